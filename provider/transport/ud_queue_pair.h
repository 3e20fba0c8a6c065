// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// An unreliable-datagram queue pair (verbs UD QP): each SEND is one UdSend
// datagram (docs/spec.md 6a) to the address and QP its work request names,
// sent once; each datagram received for it consumes one receive WQE (its own
// or its SRQ's), whose buffer gets a 40-byte GRH and then the message. No
// connection, no ACK, no retransmission: what cannot be delivered is a
// counted drop.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "config.h"
#include "counters.h"
#include "metaroce/wire.h"
#include "queue_pair_common.h"
#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

class Endpoint;
class SharedReceiveQueue;

// A UD send: the work request and where it goes.
struct UdSendWr {
  SendWr wr;        // Send or SendWithImm
  PeerId peer = 0;  // the driver's name for the destination address and home port
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;  // high bit set: use the QP's own Q_Key (verbs)
};

// The datagram's addresses, for the GRH.
struct UdAddresses {
  Gid source{};
  Gid destination{};
};

class UdQueuePair final : public QueuePairCommon {
 public:
  // max_message: the largest message (the port's active MTU).
  UdQueuePair(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
              SharedReceiveQueue* srq, const QpConfig& config, uint32_t max_message);

  uint32_t qkey() const { return qkey_; }

  // Enters `next` (Endpoint::modify_qp has checked that it may), with a new
  // Q_Key if given.
  void modify(QpState next, std::optional<uint32_t> qkey);
  void to_reset();

  PostResult post_send(const UdSendWr& wr);
  PostResult post_recv(const RecvWr& wr);

  bool has_pending() const { return !pending_.empty(); }
  // Writes the oldest pending send as a datagram into `out` and completes it;
  // returns the length (0: nothing sent, e.g. its buffer became invalid).
  size_t build_next(std::span<uint8_t> out, PeerId& peer);

  void on_datagram(const wire::Packet& packet, const UdAddresses& addresses, EndpointCounters& counters);

 private:
  struct Pending {
    UdSendWr send;
    std::vector<uint8_t> inline_bytes;  // copied at post time
  };
  void complete_send(const Pending& p, WcStatus status);
  void flush() override;
  const RecvWr* next_receive();

  const QpConfig config_;
  const uint32_t max_message_;
  uint32_t qkey_ = 0;
  RingQueue<Pending> pending_;
  std::vector<uint8_t> scratch_;  // GRH + message, scattered into a receive
};

// The 40-byte GRH a UD receive buffer starts with: an IPv6 header with the
// datagram's addresses as GIDs (docs/spec.md 6a).
inline constexpr size_t kGrhBytes = 40;
void build_grh(const UdAddresses& addresses, size_t udp_payload_bytes, std::span<uint8_t, kGrhBytes> out);

}  // namespace metaroce::transport
