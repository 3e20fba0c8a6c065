// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Remote endpoints by (IP address, home port) <-> transport::PeerId. The
// table is shared (peer_for() may run on any thread) and grows only; the
// progress thread works on a private View that it refreshes when the table's
// version changes, so that per-datagram lookups take no lock and allocate
// nothing.
//
// A device over several planes (one netdev each, docs/spec.md 8.15) reaches
// a peer at one address per plane. Planes are numbered in parallel: a peer's
// plane-k address is its plane-0 address XOR the local plane-k address XOR
// the local plane-0 address (the plane's mask), as clusters number the NICs
// of their rails (host n is 10.k.0.n on rail k). Datagrams from any of a
// peer's plane addresses belong to that peer; path p is sent to its address
// on plane p % planes.
//
// Each peer may also carry its own path -> source socket map (set_sockets),
// chosen by path discovery for that destination: ECMP hashes the whole
// 5-tuple, so the source ports that cover the fabric's paths differ from one
// destination to the next. Without a map, path i uses the runtime's default
// socket i % count.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <compare>
#include <cstdint>
#include <mutex>
#include <vector>

#include "types.h"

namespace metaroce::io {

// An address in IPv6 form (IPv4 as ::ffff:a.b.c.d) and a port, host order.
struct PeerKey {
  std::array<uint8_t, 16> ip{};
  uint16_t port = 0;
  auto operator<=>(const PeerKey&) const = default;
  bool operator==(const PeerKey&) const = default;
};

// The key of `address` (its IP) with `port`; false for non-IP families.
bool make_peer_key(const sockaddr_storage& address, uint16_t port, PeerKey& key);

// `key`'s place in the order every host of a cluster computes alike (the
// engine's transmit order, Endpoint::set_transmit_order): the address's low
// six bytes (all of an IPv4 address), then the port.
uint64_t transmit_order_key(const PeerKey& key);

class PeerTable {
 public:
  using Ip = std::array<uint8_t, 16>;
  // `family` is that of the local sockets (AF_INET or AF_INET6): destinations
  // are kept in that form. `plane_masks[k - 1]` is plane k's mask (above);
  // empty: one plane.
  explicit PeerTable(int family, std::vector<Ip> plane_masks = {});

  // Thread-safe. Ids start at 1. Returns 0 for an address that is not IP.
  // An address on plane k > 0 of a known peer is that peer; a new peer is
  // added by its plane-0 address.
  transport::PeerId get_or_add(const sockaddr_storage& address);

  // The progress thread's lock-free copy.
  class View {
   public:
    // 0 when the key is unknown.
    transport::PeerId lookup(const PeerKey& key) const;
    // Where path `path` of `peer` is sent (its address on the path's plane);
    // null (and length 0) when unknown or of another family than the sockets.
    const sockaddr_storage* destination(transport::PeerId peer, uint16_t path, socklen_t& length) const;
    // The socket index path `path` of `peer` leaves through; `default_count`
    // is the number of default sockets (path % default_count without a map).
    uint16_t socket(transport::PeerId peer, uint16_t path, uint16_t default_count) const;

   private:
    friend class PeerTable;
    struct Sorted {
      PeerKey key;
      transport::PeerId peer;
    };
    std::vector<Sorted> sorted_;  // by key
    struct Destination {
      sockaddr_storage address;
      socklen_t length;
      uint32_t sockets_first;  // into sockets_
      uint16_t sockets_count;  // 0: default map
    };
    std::vector<uint16_t> sockets_;
    std::vector<Destination> destinations_;  // index (peer - 1) * planes_ + plane
    uint16_t planes_ = 1;
    uint64_t version_ = 0;
    mutable PeerKey last_key_{};
    mutable transport::PeerId last_peer_ = 0;
  };
  // Thread-safe. transmit_order_key() of the address `peer` was added with
  // (its plane-0 address); 0 when unknown.
  uint64_t transmit_order_key(transport::PeerId peer) const;
  // Thread-safe. The destination `peer` was added with (its plane-0
  // address); false when unknown.
  bool destination_of(transport::PeerId peer, sockaddr_storage& address) const;

  // Thread-safe. Path i of `peer` leaves through socket sockets[i % size]
  // (indexes into the runtime's path sockets); empty: the default map.
  // False when the peer is unknown.
  bool set_sockets(transport::PeerId peer, std::vector<uint16_t> sockets);
  // Thread-safe. The peer's map (empty: default).
  std::vector<uint16_t> sockets_of(transport::PeerId peer) const;

  // Brings `view` up to date (cheap when nothing changed).
  void refresh(View& view) const;

 private:
  struct Plane {
    PeerKey key;
    sockaddr_storage destination;
    socklen_t length;
  };
  struct Entry {
    std::vector<Plane> planes;  // [0] is the address the peer was added with
    std::vector<uint16_t> sockets;
  };
  const int family_;
  const std::vector<Ip> plane_masks_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;  // index peer - 1
  std::atomic<uint64_t> version_{0};
};

}  // namespace metaroce::io
