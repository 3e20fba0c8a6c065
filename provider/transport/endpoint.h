// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The MetaRoCE engine, sans-I/O. An Endpoint is one device context: it owns
// memory regions, completion queues, queue pairs (one ordered stream each) and
// one Connection per remote endpoint, which sprays the streams' packets over
// many paths under one congestion controller.
//
// Nothing here reads a clock, makes a syscall or starts a thread. The driver
// (io/ runtime or the simulator) feeds it:
//   on_datagram(now, ...)   a received UDP payload
//   on_timer(now)           when now >= next_wakeup()
// and drains it:
//   poll_transmit(now, buf) until it returns nothing, after every call above
//   and after every post
//   poll_cq(cq, ...)        completions
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "counters.h"
#include "memory.h"
#include "metaroce/wire.h"
#include "packet_protection.h"
#include "path_congestion.h"
#include "peer_session.h"
#include "types.h"

namespace metaroce::transport {

class Connection;
class QueuePair;
class SharedReceiveQueue;
class UdQueuePair;
struct UdAddresses;
struct UdSendWr;

struct SrqAttributes {
  uint32_t max_wr = 0;
  uint32_t limit = 0;
  uint32_t depth = 0;  // WQEs waiting
};

// A state as include/metaroce/qp_rules.h numbers it (METAROCE_QPS_*, the
// uverbs ABI's).
int qp_rules_state(QpState state);

// What modify_qp gives the new state: RTR of an RC QP takes the peer, its QP
// number and the responder's config; RTS of an RC QP may take the requester's
// (timeout, retries, max_rd_atomic, sq_psn; without it RTR's stays); a UD QP
// may take a Q_Key in any state but RESET and ERROR.
struct QpModify {
  QpState next = QpState::Reset;
  PeerId peer = 0;
  uint32_t remote_qpn = 0;
  std::optional<QpConfig> config;
  std::optional<uint32_t> qkey;
};

struct TxDatagram {
  PeerId peer = 0;
  uint16_t path_id = 0;  // the driver sends from its socket (source port) for this path
  uint16_t plane = 0;    // ... through its NIC on this plane (path_id % planes)
  uint32_t length = 0;   // the datagram's bytes
  // EndpointConfig::gather_payload: when not empty, the datagram is the
  // buffer's first `head` bytes, then `payload` (application memory), then
  // the buffer's bytes from `head` to length - payload.size() (the trailer).
  // Otherwise the buffer holds all `length` bytes.
  uint32_t head = 0;
  std::span<const uint8_t> payload;
};

class Endpoint {
 public:
  // `memory`: the memory-region table, when several endpoints share one (a
  // device context's progress threads, docs/verbs.md); null: its own.
  explicit Endpoint(const EndpointConfig& config, std::shared_ptr<MemoryRegistry> memory = nullptr);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  const EndpointConfig& config() const { return config_; }
  // This endpoint's incarnation, in every datagram it sends.
  uint32_t epoch() const { return epoch_; }

  // --- memory -------------------------------------------------------------
  MemoryRegistry& memory() { return *memory_; }

  // --- completion queues --------------------------------------------------
  uint32_t create_cq(uint32_t capacity);
  PostResult destroy_cq(uint32_t cq);
  // True while a QP of this endpoint uses the CQ (destroy_cq refuses).
  bool cq_in_use(uint32_t cq) const;
  // Moves up to out.size() completions into out; returns how many.
  size_t poll_cq(uint32_t cq, std::span<Completion> out);
  // Completions waiting in the CQ.
  size_t cq_depth(uint32_t cq) const;
  // Called whenever a completion is added to a CQ (for completion channels).
  void set_completion_observer(std::function<void(uint32_t cq)> observer) {
    completion_observer_ = std::move(observer);
  }

  // Called for every asynchronous event (engine lock held, like completions).
  void set_async_observer(std::function<void(const AsyncEvent&)> observer) { async_observer_ = std::move(observer); }

  // --- shared receive queues ---------------------------------------------
  // Returns the new SRQ id (never 0).
  uint32_t create_srq(uint32_t pd, uint32_t max_wr);
  PostResult destroy_srq(uint32_t srq);  // BadState while a QP takes from it
  PostResult post_srq_recv(uint32_t srq, const RecvWr& wr);
  PostResult modify_srq(uint32_t srq, std::optional<uint32_t> max_wr, std::optional<uint32_t> limit);
  std::optional<SrqAttributes> query_srq(uint32_t srq) const;

  // --- queue pairs --------------------------------------------------------
  // Returns the new QP number (never 0), or 0 if a CQ (or the SRQ, when not
  // 0) does not exist or the QP numbers are used up. Numbers are not reused.
  uint32_t create_qp(uint32_t pd, uint32_t send_cq, uint32_t recv_cq, const QpConfig& config, uint32_t srq = 0);
  // The same with the number chosen by someone else (the kernel module
  // numbers the QPs of kernel devices): returns `qpn`, or 0 if it is 0 or
  // already in use, or a CQ does not exist.
  uint32_t create_qp_numbered(uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq, const QpConfig& config,
                              uint32_t srq = 0);
  // UD QPs (numbered from the same space; qpn 0: the engine numbers it).
  // max_message: the largest UD message (the port's active MTU).
  uint32_t create_ud_qp(uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq, uint32_t srq,
                        const QpConfig& config, uint32_t max_message);
  PostResult post_send_ud(uint32_t qpn, const UdSendWr& wr);
  PostResult destroy_qp(uint32_t qpn);
  // modify_qp's state change, for RC and UD QPs alike. Which changes exist is
  // the table of include/metaroce/qp_rules.h, which the verbs layer and the
  // kernel module check with their attribute masks; a change to the state a
  // QP is in changes attributes only (here: a UD QP's Q_Key).
  PostResult modify_qp(uint32_t qpn, const QpModify& modify);
  // RESET -> INIT -> RTR -> RTS to `remote_qpn` on `peer`, for the callers
  // that are not verbs (the simulator, benches, tests).
  PostResult connect_qp(uint32_t qpn, PeerId peer, uint32_t remote_qpn, const QpConfig& config);
  std::optional<QpState> qp_state(uint32_t qpn) const;
  // Why the transport timer failed an RC QP, if it did (null otherwise).
  const RetryExhaustion* retry_exhaustion(uint32_t qpn) const;

  PostResult post_send(uint32_t qpn, const SendWr& wr);
  PostResult post_recv(uint32_t qpn, const RecvWr& wr);

  // --- security -----------------------------------------------------------
  // The key metaroced derived for this endpoint and `peer` (authenticate and
  // encrypt modes) and this end's role in the pair (0 for the end whose
  // address and home port sort first). Creates the peer's connection.
  void set_peer_key(PeerId peer, const PairKey& key, uint8_t role);

  // Frames a datagram the wire encoders wrote (length bytes in buf) as this
  // endpoint sends to `peer`: epochs, the next packet number, the trailer.
  // For drivers and tests that craft packets. Returns the framed length, 0
  // when it cannot (unknown peer, no key, buf without room for the trailer).
  size_t seal_datagram(PeerId peer, std::span<uint8_t> buf, size_t length);

  // --- I/O ----------------------------------------------------------------
  // Every datagram is checked (trailer, epochs, packet number) before its
  // body is decoded; see docs/spec.md section 9.
  // `arrival`: when the datagram reached this host (a kernel receive
  // timestamp, on the clock of `now`), if the driver knows it; 0 = now. RTT
  // samples and the holding times this end reports are measured from it, so
  // that time a datagram waited in a socket buffer for a descheduled
  // progress thread does not read as network queueing (docs/spec.md 8.7).
  void on_datagram(Time now, PeerId from, std::span<const uint8_t> datagram, bool ce_marked, Time arrival = 0);
  // A UdSend datagram, from any source: UD belongs to no connection.
  void on_ud_datagram(const UdAddresses& addresses, std::span<const uint8_t> datagram);
  // A datagram the driver could not attribute to a sender because it has no
  // common header of this version (too short, or another version): counted
  // as received and malformed (docs/spec.md 9.6 step 1), nothing else.
  void on_headerless_datagram() {
    ++counters_.rx_datagrams;
    ++counters_.rx_drop_malformed;
  }
  void on_timer(Time now);
  // Writes the next datagram due at `now` into buf (which must hold at least
  // max_datagram_bytes()); returns nothing when none is due.
  std::optional<TxDatagram> poll_transmit(Time now, std::span<uint8_t> buf);
  // The order poll_transmit serves connections in, a datagram each in turn
  // (docs/spec.md 8.6): by key_of(peer), starting with the first peer after
  // `own_key` and wrapping around. When every endpoint of a cluster keys its
  // peers the same way (the driver uses their addresses), each starts its
  // round at a different peer, and an exchange with every peer begins as a
  // permutation instead of every sender's first packets converging on the
  // lowest key. Default: key = PeerId, own key 0. key_of is called when a
  // connection is created (engine lock held) and must be quick.
  void set_transmit_order(uint64_t own_key, std::function<uint64_t(PeerId)> key_of);
  // With config().driver_releases_completions: completions are held for
  // ACKs that poll_transmit has handed out (it returned nothing since), and
  // release_completions() makes them visible once those are with the kernel.
  bool completions_releasable() const { return completions_releasable_; }
  void release_completions();
  size_t max_datagram_bytes() const;
  // Earliest time on_timer or poll_transmit has something to do; kNever if idle.
  Time next_wakeup() const;
  // Connections that may have work (a timer, a datagram to send, an ACK
  // owed) or sent data within their activity window: the only ones that
  // on_timer, poll_transmit, next_wakeup and the rate hint visit. The others
  // leave the list when next_wakeup() finds them quiet. For tests.
  size_t awake_connections() const { return awake_.size(); }
  // Before the driver stops for good: every ACK the peers are owed becomes
  // due now (poll_transmit then hands it out).
  void flush_owed(Time now);
  // True once after poll_transmit made completions visible that data
  // arriving had caused (a driver that runs the application between
  // deliveries gives it its turn again).
  bool take_completions_released() {
    const bool released = completions_released_;
    completions_released_ = false;
    return released;
  }

  const EndpointCounters& counters() const { return counters_; }
  // Per-path view of the connection to `peer`, for statistics and tests.
  std::vector<PathSnapshot> path_snapshots(PeerId peer) const;
  std::vector<PeerId> peers() const;  // every peer with a connection
  // Applies new congestion parameters to running connections.
  void set_congestion(const CongestionConfig& cc);
  // Sets the share of the inbound capacity the rate hint hands out to several
  // senders (EndpointConfig::rate_hint_utilization); applied from the next ACK.
  void set_rate_hint_utilization(double utilization) { config_.rate_hint_utilization = utilization; }
  // The driver saw the plane's NIC go down (or come back up). Down: every
  // path on it is drained at once, its packets in flight are resent on the
  // other planes, and nothing is sent on it (ACKs included) until it is up;
  // up: its paths are probed before they carry data again.
  void set_plane_up(Time now, uint16_t plane, bool up);
  bool plane_up(uint16_t plane) const { return plane >= 64 || ((planes_down_ >> plane) & 1) == 0; }
  uint16_t plane_of_path(uint16_t path_id) const { return static_cast<uint16_t>(path_id % config_.planes); }

  // Configuration with defaults resolved.
  CongestionParams congestion_params() const;
  Time min_rto() const;
  Time ack_delay() const;
  Time probe_interval() const;
  uint64_t inbound_capacity_bps() const;
  // Peers that sent us data recently: the receiver's rate hint divides among them.
  size_t active_senders(Time now) const;
  // What the rate hint grants each of them: the inbound capacity shared
  // max-min fairly. A peer sending less than half an equal share (control
  // traffic, a stream's credits) keeps what it uses and the others divide
  // the rest; every peer is granted the same rate, so a light one may grow
  // into a share. With two or more heavy peers only rate_hint_utilization of
  // the capacity is handed out, so that the queue their first RTT built
  // drains; a lone heavy peer is given all of it.
  uint64_t rate_hint_bps(Time now) const;

 private:
  friend class Connection;
  friend class QueuePair;
  friend class QueuePairCommon;
  friend class UdQueuePair;

  struct Peer {
    std::unique_ptr<Connection> connection;
    PeerSession session;
    uint64_t distance = 0;  // its place in the transmit round (set_transmit_order)
    bool awake = false;     // listed in awake_
  };
  // A connection's place in the transmit round (set_transmit_order): its
  // key's distance after the own key.
  struct TransmitSlot {
    uint64_t distance = 0;
    PeerId id = 0;
    Peer* peer = nullptr;
    bool operator<(const TransmitSlot& other) const {
      return distance != other.distance ? distance < other.distance : id < other.id;
    }
  };
  uint64_t transmit_distance(PeerId peer) const;
  // Lists a connection that an API call or a datagram may have given
  // something to do (awake_).
  void awaken(PeerId id, Peer& peer);
  void awaken_all();
  void awaken_qp_connection(const QueuePair* qp);
  Peer* peer_for(PeerId peer, bool create);
  Connection* connection_for(PeerId peer, bool create);
  // Writes the trailer of the datagram the peer's connection wrote (its
  // last gathered.size() bytes left in application memory, TxDatagram::
  // payload); returns the datagram's new length, 0 when it cannot be sent.
  size_t frame(Peer& peer, std::span<uint8_t> buf, size_t length, std::span<const uint8_t> gathered = {});
  QueuePair* find_qp(uint32_t qpn) const;
  void push_completion(uint32_t cq, const Completion& completion, bool owes_ack = false);
  // A receive WQE of QP `qpn` completed as flushed (the QP is in error).
  void push_flushed_receive(uint32_t cq, uint32_t qpn, uint64_t wr_id);
  void deliver_completion(uint32_t cq, const Completion& completion);
  UdQueuePair* find_ud_qp(uint32_t qpn) const;
  bool qpn_taken(uint32_t qpn) const;
  void notify(const AsyncEvent& event) {
    if (async_observer_) async_observer_(event);
  }

  EndpointConfig config_;
  uint32_t epoch_ = 0;
  std::shared_ptr<MemoryRegistry> memory_;
  EndpointCounters counters_;
  struct CompletionQueue;
  std::unordered_map<uint32_t, std::unique_ptr<CompletionQueue>> cqs_;
  std::unordered_map<uint32_t, std::unique_ptr<QueuePair>> qps_;
  std::map<uint32_t, std::unique_ptr<UdQueuePair>> ud_qps_;  // ordered: deterministic transmit
  std::unordered_map<uint32_t, std::unique_ptr<SharedReceiveQueue>> srqs_;
  // Ordered so that iteration (transmit scheduling) is deterministic.
  std::map<PeerId, Peer> connections_;
  std::function<void(uint32_t)> completion_observer_;
  std::vector<std::pair<uint32_t, Completion>> held_completions_;  // (cq, completion), in order
  bool completions_released_ = false;
  bool completions_releasable_ = false;  // held ones, once the driver has sent what poll_transmit gave
  std::function<void(const AsyncEvent&)> async_observer_;
  uint32_t next_cq_ = 1;
  uint32_t next_srq_ = 1;
  uint32_t ud_tx_cursor_ = 0;  // round-robin start among UD QPs
  uint32_t next_qpn_index_ = 0;
  // The connections that may have work, by place in the transmit round:
  // whatever has a timer, a datagram to send or an ACK owed, or received
  // data within its activity window (the rate hint counts it) is listed, so
  // that timers, transmit rounds and rate hints cost what the busy
  // connections cost, not what every connection does (4,000 idle peers
  // made each event scan them all). The round continues after tx_last_.
  // Sorted; its capacity is every connection's, so listing never allocates.
  // next_wakeup() drops the quiet ones as it visits them: bookkeeping, hence
  // mutable. latest_now_ is the latest time an entry point was given.
  mutable std::vector<TransmitSlot> awake_;
  Time latest_now_ = 0;
  std::optional<TransmitSlot> tx_last_;
  uint64_t transmit_own_key_ = 0;
  std::function<uint64_t(PeerId)> transmit_key_of_;
  uint64_t planes_down_ = 0;  // bit per plane
  // Decoded form of the datagram being handled, kept between calls: a
  // Packet is over 1 KB, and zeroing a fresh one per datagram cost more than
  // decoding it. decode() writes every member that the packet's type uses.
  wire::Packet rx_packet_;
  // Encrypt mode: the decrypted datagram being handled.
  std::vector<uint8_t> rx_plain_;
};

}  // namespace metaroce::transport
