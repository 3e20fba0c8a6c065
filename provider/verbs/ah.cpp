// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Address handles for UD QPs: the destination IP of ah_attr.grh.dgid (an
// IPv4-mapped or IPv6 GID), in the provider only (the kernel has no data
// path to resolve a MAC for). The UDP port of a send comes from its
// remote_qpn, whose high bits name the destination context's home port.
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "provider.h"

namespace metaroce::verbs {

namespace {

bool is_loopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == IN_LOOPBACKNET;
  return a.ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
}

}  // namespace

bool av_address(const Device& device, const ibv_ah_attr& av, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  if (!av.is_global) {
    if (!is_loopback(device.address)) return false;
    out = device.address;
    return true;
  }
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr uint8_t kZero[16] = {};
  const uint8_t* raw = av.grh.dgid.raw;
  if (std::memcmp(raw, kZero, sizeof kZero) == 0) return false;
  if (std::memcmp(raw, kMapped, sizeof kMapped) == 0) {
    auto& sin = reinterpret_cast<sockaddr_in&>(out);
    sin.sin_family = AF_INET;
    std::memcpy(&sin.sin_addr, raw + 12, 4);
  } else {
    auto& sin6 = reinterpret_cast<sockaddr_in6&>(out);
    sin6.sin6_family = AF_INET6;
    std::memcpy(&sin6.sin6_addr, raw, 16);
  }
  return out.ss_family == device.address.ss_family;
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  Context* ctx = context_of(pd->context);
  sockaddr_storage address{};
  if (attr->port_num != 1 || !av_address(*ctx->device, *attr, address)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new (std::nothrow) Ah;
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  ah->address = address;
  ah->attr = *attr;
  return &ah->ibv;  // libibverbs fills context and pd
}

int destroy_ah(ibv_ah* ah) {
  delete ah_of(ah);
  return 0;
}

transport::PeerId ud_peer(const Qp& qp, const Ah& ah, uint32_t remote_qpn) {
  sockaddr_storage destination = ah.address;
  const uint16_t port = htons(home_port_of_qpn(remote_qpn));
  if (destination.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(destination).sin_port = port;
  else reinterpret_cast<sockaddr_in6&>(destination).sin6_port = port;
  return qp.shard->runtime->peer_for(destination);
}

}  // namespace metaroce::verbs
