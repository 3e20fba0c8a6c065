// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>

namespace metaroce::compliance {

bool make_address(const std::string& ip, uint16_t port, sockaddr_storage& out) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return true;
  }
  return false;
}

socklen_t address_length(const sockaddr_storage& address) {
  return address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

unsigned interface_of(const std::string& ip) {
  sockaddr_storage want;
  if (!make_address(ip, 0, want)) return 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  unsigned index = 0;
  for (ifaddrs* a = list; a && index == 0; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != want.ss_family) continue;
    bool same = false;
    if (want.ss_family == AF_INET)
      same = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr ==
             reinterpret_cast<const sockaddr_in&>(want).sin_addr.s_addr;
    else
      same = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr,
                         &reinterpret_cast<const sockaddr_in6&>(want).sin6_addr, 16) == 0;
    if (same) index = if_nametoindex(a->ifa_name);
  }
  freeifaddrs(list);
  return index;
}

uint32_t interface_mtu(unsigned index) {
  ifreq request{};
  if (index == 0 || !if_indextoname(index, request.ifr_name)) return 0;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const bool ok = ::ioctl(fd, SIOCGIFMTU, &request) == 0;
  ::close(fd);
  return ok && request.ifr_mtu > 0 ? static_cast<uint32_t>(request.ifr_mtu) : 0;
}

}  // namespace metaroce::compliance
