// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "peer_table.h"

#include <algorithm>
#include <cstring>

namespace metaroce::io {

bool make_peer_key(const sockaddr_storage& address, uint16_t port, PeerKey& key) {
  key.port = port;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    key.ip.fill(0);
    key.ip[10] = 0xff;
    key.ip[11] = 0xff;
    std::memcpy(key.ip.data() + 12, &v4.sin_addr, 4);
    return true;
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    std::memcpy(key.ip.data(), &v6.sin6_addr, 16);
    return true;
  }
  return false;
}

uint64_t transmit_order_key(const PeerKey& key) {
  uint64_t order = 0;
  for (size_t b = key.ip.size() - 6; b < key.ip.size(); ++b) order = order << 8 | key.ip[b];
  return order << 16 | key.port;
}

namespace {

bool is_v4_mapped(const PeerKey& key) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(key.ip.data(), kPrefix, sizeof kPrefix) == 0;
}

// The destination for `key` in the sockets' family; length 0 if impossible.
socklen_t make_destination(int family, const PeerKey& key, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  if (family == AF_INET) {
    if (!is_v4_mapped(key)) return 0;
    auto& v4 = reinterpret_cast<sockaddr_in&>(out);
    v4.sin_family = AF_INET;
    v4.sin_port = htons(key.port);
    std::memcpy(&v4.sin_addr, key.ip.data() + 12, 4);
    return sizeof(sockaddr_in);
  }
  if (is_v4_mapped(key)) return 0;  // IPV6_V6ONLY sockets
  auto& v6 = reinterpret_cast<sockaddr_in6&>(out);
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(key.port);
  std::memcpy(&v6.sin6_addr, key.ip.data(), 16);
  return sizeof(sockaddr_in6);
}

uint16_t port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

}  // namespace

PeerTable::PeerTable(int family, std::vector<Ip> plane_masks) : family_(family), plane_masks_(std::move(plane_masks)) {}

transport::PeerId PeerTable::get_or_add(const sockaddr_storage& address) {
  PeerKey key;
  if (!make_peer_key(address, port_of(address), key)) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < entries_.size(); ++i)
    for (const Plane& plane : entries_[i].planes)
      if (plane.key == key) return static_cast<transport::PeerId>(i + 1);
  Entry entry;
  for (size_t k = 0; k <= plane_masks_.size(); ++k) {
    Plane plane{key, {}, 0};
    if (k > 0)
      for (size_t b = 0; b < plane.key.ip.size(); ++b) plane.key.ip[b] ^= plane_masks_[k - 1][b];
    plane.length = make_destination(family_, plane.key, plane.destination);
    entry.planes.push_back(plane);
  }
  entries_.push_back(std::move(entry));
  version_.fetch_add(1, std::memory_order_release);
  return static_cast<transport::PeerId>(entries_.size());
}

uint64_t PeerTable::transmit_order_key(transport::PeerId peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer == 0 || peer > entries_.size()) return 0;
  return io::transmit_order_key(entries_[peer - 1].planes.front().key);
}

bool PeerTable::destination_of(transport::PeerId peer, sockaddr_storage& address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer == 0 || peer > entries_.size()) return false;
  address = entries_[peer - 1].planes.front().destination;
  return true;
}

bool PeerTable::set_sockets(transport::PeerId peer, std::vector<uint16_t> sockets) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer == 0 || peer > entries_.size()) return false;
  entries_[peer - 1].sockets = std::move(sockets);
  version_.fetch_add(1, std::memory_order_release);
  return true;
}

std::vector<uint16_t> PeerTable::sockets_of(transport::PeerId peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer == 0 || peer > entries_.size()) return {};
  return entries_[peer - 1].sockets;
}

void PeerTable::refresh(View& view) const {
  if (version_.load(std::memory_order_acquire) == view.version_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  view.version_ = version_.load(std::memory_order_relaxed);
  view.sorted_.clear();
  view.destinations_.clear();
  view.sockets_.clear();
  view.planes_ = static_cast<uint16_t>(plane_masks_.size() + 1);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    for (const Plane& plane : e.planes) {
      view.sorted_.push_back({plane.key, static_cast<transport::PeerId>(i + 1)});
      view.destinations_.push_back({plane.destination, plane.length, static_cast<uint32_t>(view.sockets_.size()),
                                    static_cast<uint16_t>(e.sockets.size())});
    }
    view.sockets_.insert(view.sockets_.end(), e.sockets.begin(), e.sockets.end());
  }
  std::sort(view.sorted_.begin(), view.sorted_.end(),
            [](const View::Sorted& a, const View::Sorted& b) { return a.key < b.key; });
  view.last_peer_ = 0;
}

transport::PeerId PeerTable::View::lookup(const PeerKey& key) const {
  if (last_peer_ != 0 && key == last_key_) return last_peer_;
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), key,
                             [](const Sorted& entry, const PeerKey& k) { return entry.key < k; });
  if (it == sorted_.end() || !(it->key == key)) return 0;
  last_key_ = key;
  last_peer_ = it->peer;
  return it->peer;
}

const sockaddr_storage* PeerTable::View::destination(transport::PeerId peer, uint16_t path, socklen_t& length) const {
  length = 0;
  const size_t index = (size_t{peer} - 1) * planes_ + path % planes_;
  if (peer == 0 || index >= destinations_.size()) return nullptr;
  const Destination& d = destinations_[index];
  if (d.length == 0) return nullptr;
  length = d.length;
  return &d.address;
}

uint16_t PeerTable::View::socket(transport::PeerId peer, uint16_t path, uint16_t default_count) const {
  if (peer != 0 && (size_t{peer} - 1) * planes_ < destinations_.size()) {
    const Destination& d = destinations_[(size_t{peer} - 1) * planes_];
    if (d.sockets_count != 0) return sockets_[d.sockets_first + path % d.sockets_count];
  }
  return static_cast<uint16_t>(path % std::max<uint16_t>(default_count, 1));
}

}  // namespace metaroce::io
