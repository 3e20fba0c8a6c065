// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#pragma once

#include <cstdint>
#include <vector>

#include "metaroce/wire.h"
#include "types.h"

namespace metaroce::transport {

// The engine's counters, one list: X(name, unit, meaning). EndpointCounters,
// kEndpointCounterInfo (`metaroce counters` prints it), METAROCE_STATS and the
// daemon report are all made from it. Every datagram the engine refuses
// increments exactly one rx_drop_* counter; rx_ignored_* count control
// information not believed (the packet's other contents still count).
#define METAROCE_ENDPOINT_COUNTERS(X)                                                                           \
  X(rx_datagrams, "datagrams", "datagrams handed to the engine, refused ones included")                         \
  X(rx_data_packets, "packets", "data packets a QP took up: placed, duplicate or refused with a NAK")           \
  X(rx_ce_marked, "packets", "data packets that arrived marked ECN CE")                                         \
  X(rx_drop_malformed, "datagrams", "failed wire decoding")                                                     \
  X(rx_drop_integrity, "datagrams", "CRC32C mismatch or AES-GCM tag not genuine")                               \
  X(rx_drop_security_mode, "datagrams", "protected in another security mode than ours")                         \
  X(rx_drop_no_key, "datagrams", "authenticate/encrypt: no key for that peer")                                  \
  X(rx_drop_stale_epoch, "datagrams", "for a previous incarnation of us, or from a retired one of the peer")    \
  X(rx_drop_replay, "datagrams", "packet number already seen, too old or implausibly far ahead")                \
  X(rx_drop_unknown_peer, "datagrams", "no connection to the source address")                                   \
  X(rx_drop_unknown_qp, "datagrams", "dst_qpn not a QP connected to that peer")                                 \
  X(rx_drop_qp_state, "datagrams", "QP not in RTR/RTS (or in error)")                                           \
  X(rx_drop_out_of_window, "datagrams", "msn beyond the receive window")                                        \
  X(rx_drop_bad_request, "datagrams", "inconsistent placement info (NAK InvalidRequest sent)")                  \
  X(rx_drop_access, "datagrams", "key/bounds/permission failure (NAK RemoteAccess sent)")                       \
  X(rx_drop_rnr, "datagrams", "SEND without a posted receive (NAK RNR sent)")                                   \
  X(rx_drop_out_of_order, "datagrams", "rocev2 profile: dropped after a gap")                                   \
  X(rx_drop_stale_response, "datagrams", "response for no outstanding request")                                 \
  X(rx_drop_ud_unknown_qp, "datagrams", "UD datagram for no UD QP in RTR/RTS")                                  \
  X(rx_drop_ud_qkey, "datagrams", "UD datagram with another Q_Key than its QP's")                               \
  X(rx_drop_ud_no_receive, "datagrams", "UD datagram that found no posted receive")                             \
  X(rx_drop_ud_too_long, "datagrams", "UD message larger than the receive buffer (after its GRH)")              \
  X(rx_ud_delivered, "datagrams", "UD datagrams placed in a receive")                                           \
  X(rx_duplicate_completed, "packets", "packet of an already completed message: ACKed, discarded")              \
  X(rx_duplicate_chunk, "packets", "data packet whose chunk was already placed")                                \
  X(rx_acks, "packets", "ACKs received")                                                                        \
  X(rx_naks, "packets", "NAKs received")                                                                        \
  X(tx_ud_datagrams, "datagrams", "UD datagrams sent")                                                          \
  X(tx_data_packets, "packets", "data packets sent, including retransmissions")                                 \
  X(tx_data_bytes, "bytes", "payload bytes sent, including retransmissions")                                    \
  X(tx_retransmits, "packets", "data packets sent again")                                                       \
  X(spurious_retransmits, "packets", "a packet declared lost was ACKed after all")                              \
  X(tx_acks, "packets", "ACKs sent")                                                                            \
  X(tx_naks, "packets", "NAKs sent")                                                                            \
  X(tx_probes, "packets", "path probes sent")                                                                   \
  X(rto_expirations, "events", "retransmission timeouts of a path")                                             \
  X(lost_by_time, "packets", "declared lost: older than its path's RTT while later packets arrived on others")  \
  X(tail_probes, "packets", "the connection's newest packet resent, two RTTs without an ACK (tail probe)")      \
  X(path_failures, "events", "paths declared failed")                                                           \
  X(path_recoveries, "events", "paths that answered a probe and carry data again")                              \
  X(plane_drains, "events", "paths drained because their plane went down")                                      \
  X(go_back_n, "events", "rocev2 profile: rewinds")                                                             \
  X(atomics_executed, "operations", "atomic operations executed on this host's memory for peers")               \
  X(atomic_replays, "operations", "duplicate atomic answered from the result cache")                            \
  X(placed_bytes, "bytes", "bytes written to application memory for peers")                                     \
  X(write_tails_deferred, "chunks", "WRITE final chunks held until the WRITE and every earlier one had landed") \
  X(peer_restarts, "events", "a peer came back as a new incarnation")                                           \
  X(tx_drop_no_key, "datagrams", "authenticate/encrypt: datagram not sent, no key for the peer")                \
  X(rx_ignored_ack_block, "events", "SACK block for packets never sent on that path")                           \
  X(rx_ignored_stream_ack, "events", "completion claimed for a message not posted or not sent in full")         \
  X(rx_ignored_nak, "packets", "NAK for no outstanding attempt of a sent message")                              \
  X(rx_ignored_rate_hint, "packets", "receiver rate hint below 10 Mb/s")                                        \
  X(rx_drop_path_jump, "datagrams", "path_seq implausibly far beyond the path's highest")                       \
  X(rd_atomic_limit_refusals, "packets", "READ/atomic beyond max_dest_rd_atomic (also an rx_drop_bad_request)") \
  X(tx_control_dropped, "packets", "NAK or probe reply not queued: the control queue was full")                 \
  X(tx_psn_fillers, "packets", "rocev2 profile: go-back-N sent a PSN filler for a packet it could not rebuild") \
  X(tx_response_unreadable, "packets", "READ response abandoned: a resend could not read its memory (unmapped)")

struct EndpointCounters {
#define METAROCE_COUNTER_FIELD(name, unit, meaning) uint64_t name = 0;
  METAROCE_ENDPOINT_COUNTERS(METAROCE_COUNTER_FIELD)
#undef METAROCE_COUNTER_FIELD
};

// One counter of `Counters` (a struct of uint64_t made from an X-macro list):
// its name, which is its key in every dump, its unit and what it counts.
template <class Counters>
struct CounterInfo {
  const char* name;
  const char* unit;
  const char* meaning;
  uint64_t Counters::*value;
};

inline constexpr CounterInfo<EndpointCounters> kEndpointCounterInfo[] = {
#define METAROCE_COUNTER_INFO(name, unit, meaning) {#name, unit, meaning, &EndpointCounters::name},
    METAROCE_ENDPOINT_COUNTERS(METAROCE_COUNTER_INFO)
#undef METAROCE_COUNTER_INFO
};

// Calls f(name, value) for every counter, in the list's order.
template <class F>
void for_each_counter(const EndpointCounters& c, F&& f) {
  for (const auto& info : kEndpointCounterInfo) f(info.name, c.*info.value);
}

enum class PathHealth : uint8_t { Active, Suspect, Failed };
const char* to_string(PathHealth health);

struct PathSnapshot {
  uint16_t path_id = 0;
  uint16_t plane = 0;
  PathHealth health = PathHealth::Active;
  uint64_t packets_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t retransmits = 0;
  uint64_t lost = 0;
  uint64_t ecn_marks = 0;
  uint32_t window_bytes = 0;
  uint32_t inflight_bytes = 0;
  Time srtt_ns = 0;
  Time min_rtt_ns = 0;
  double ecn_alpha = 0;
};

// What the transport timer saw when it failed a QP with RETRY_EXC_ERR: the
// oldest unfinished message and the connection's paths, for the provider's
// one-line report of why.
struct RetryExhaustion {
  uint32_t expiries = 0;  // retry_cnt + 1
  Time interval_ns = 0;
  uint32_t msn = 0;
  wire::Opcode opcode = wire::Opcode::Send;
  uint32_t length = 0;
  uint32_t chunks = 0;
  uint32_t sent = 0;        // chunks sent in this attempt
  uint32_t acked = 0;       // ... acknowledged in this attempt
  uint32_t ever_acked = 0;  // ... in any attempt
  uint16_t attempt = 0;
  uint32_t rnr_naks = 0;
  uint32_t stall_probes = 0;
  // Since anything (data or ACK) last arrived from the peer; kNever: nothing
  // ever did. A silent peer is dead, unreachable or stalled; one heard
  // recently acknowledges but not this message.
  Time peer_silent_ns = kNever;
  std::vector<PathSnapshot> paths;
};

// Calls f(name, value) for every field of `p`: the names METAROCE_STATS and
// the daemon report give them.
template <class F>
void for_each_field(const PathSnapshot& p, F&& f) {
  f("path", p.path_id);
  f("plane", p.plane);
  f("health", to_string(p.health));
  f("packets_sent", p.packets_sent);
  f("bytes_sent", p.bytes_sent);
  f("retransmits", p.retransmits);
  f("lost", p.lost);
  f("ecn_marks", p.ecn_marks);
  f("window_bytes", p.window_bytes);
  f("inflight_bytes", p.inflight_bytes);
  f("srtt_ns", p.srtt_ns);
  f("min_rtt_ns", p.min_rtt_ns);
  f("ecn_alpha", p.ecn_alpha);
}

}  // namespace metaroce::transport
