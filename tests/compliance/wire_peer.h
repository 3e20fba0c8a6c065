// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The suite's own MetaRoCE endpoint, as far as the wire goes: a home socket
// that the target sends everything to, one socket per path slot to send
// from, this endpoint's epoch, the packet numbers per destination epoch
// (docs/spec.md 9.5) and the integrity-mode framing. It sends exactly the
// bytes it is given; what to send is the cases' business.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "local_address.h"

namespace metaroce::compliance {

using Clock = std::chrono::steady_clock;

struct Datagram {
  std::vector<uint8_t> bytes;  // the UDP payload, trailer included
  sockaddr_storage from{};
  uint16_t source_port = 0;
  int ecn = -1;  // the IP ECN field as received (0..3), -1 when the kernel did not say
  Clock::time_point at;
};

class WirePeer {
 public:
  // Opens the home socket on `local_ip` (any free port) for talking to the
  // endpoint whose home address is `target`. Null with `error` on failure.
  static std::unique_ptr<WirePeer> open(const std::string& local_ip, const sockaddr_storage& target, uint32_t epoch,
                                        std::string& error);
  ~WirePeer();
  WirePeer(const WirePeer&) = delete;
  WirePeer& operator=(const WirePeer&) = delete;

  uint16_t home_port() const { return home_port_; }
  const std::string& local_ip() const { return local_ip_; }
  uint32_t epoch() const { return epoch_; }
  // The target's epoch as last learned from a datagram it sent (0: none yet);
  // what this endpoint writes as dst_epoch.
  uint32_t target_epoch() const { return target_epoch_; }
  void learn_target_epoch(uint32_t epoch) { target_epoch_ = epoch; }

  // The next packet number towards the target under `dst_epoch` (1, 2, ...),
  // and the highest one given out so far (0: none).
  uint32_t next_packet_number(uint32_t dst_epoch) { return ++numbers_[dst_epoch]; }
  uint32_t last_packet_number(uint32_t dst_epoch) const;
  // Moves the numbering under dst_epoch on so that the next number is `next`.
  void skip_packet_numbers(uint32_t dst_epoch, uint32_t next) { numbers_[dst_epoch] = next - 1; }

  // Stamps security (integrity), both epochs and the next packet number
  // into the common header of `body` (at least 20 bytes) and appends the
  // CRC32C: the datagram as this endpoint sends it.
  std::vector<uint8_t> frame(std::vector<uint8_t> body);

  // Sends `datagram` as it is from path slot `slot`'s socket (< 64) to the
  // target's home port. False when the kernel refused it.
  bool send(std::span<const uint8_t> datagram, uint8_t slot);
  // The UDP source port of `slot` (its socket is opened on first use).
  uint16_t slot_port(uint8_t slot);

  // The next datagram that reached the home socket, waiting until
  // `deadline`; nothing when none came.
  std::optional<Datagram> receive(Clock::time_point deadline);

 private:
  WirePeer() = default;
  int slot_socket(uint8_t slot);

  std::string local_ip_;
  sockaddr_storage local_{};
  sockaddr_storage target_{};
  int home_fd_ = -1;
  uint16_t home_port_ = 0;
  std::map<uint8_t, std::pair<int, uint16_t>> slots_;  // slot -> (socket, port)
  uint32_t epoch_ = 0;
  uint32_t target_epoch_ = 0;
  std::map<uint32_t, uint32_t> numbers_;  // dst_epoch -> last packet number
};

}  // namespace metaroce::compliance
