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

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  Context* ctx = context_of(pd->context);
  if (attr->port_num != 1) {
    errno = EINVAL;
    return nullptr;
  }
  sockaddr_storage address{};
  if (!attr->is_global) {
    // No GRH: LIDs are 0 here, so only this host is reachable.
    address = ctx->device->address;
  } else {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const uint8_t* raw = attr->grh.dgid.raw;
    if (std::memcmp(raw, kMapped, sizeof kMapped) == 0) {
      auto& sin = reinterpret_cast<sockaddr_in&>(address);
      sin.sin_family = AF_INET;
      std::memcpy(&sin.sin_addr, raw + 12, 4);
    } else {
      auto& sin6 = reinterpret_cast<sockaddr_in6&>(address);
      sin6.sin6_family = AF_INET6;
      std::memcpy(&sin6.sin6_addr, raw, 16);
    }
  }
  // A v4 device cannot reach a v6 GID (or the reverse); a zero GID is no address.
  static constexpr uint8_t kZero[16] = {};
  if (address.ss_family != ctx->device->address.ss_family ||
      (attr->is_global && std::memcmp(attr->grh.dgid.raw, kZero, 16) == 0)) {
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

transport::PeerId ud_peer(Context& ctx, const Ah& ah, uint32_t remote_qpn) {
  sockaddr_storage destination = ah.address;
  const uint16_t port = htons(home_port_of_qpn(remote_qpn));
  if (destination.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(destination).sin_port = port;
  else reinterpret_cast<sockaddr_in6&>(destination).sin6_port = port;
  return ctx.runtime->peer_for(destination);
}

}  // namespace metaroce::verbs
