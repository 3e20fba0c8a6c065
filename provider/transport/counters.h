// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#pragma once

#include <cstdint>

#include "types.h"

namespace metaroce::transport {

// The engine's counters, one list: EndpointCounters, METAROCE_STATS and the
// daemon report are all made from it. Every datagram the engine refuses
// increments exactly one rx_drop_* counter; rx_ignored_* count control
// information not believed (the packet's other contents still count).
#define METAROCE_ENDPOINT_COUNTERS(X) \
  X(rx_datagrams) \
  X(rx_data_packets) \
  X(rx_ce_marked) \
  X(rx_drop_malformed) /* failed wire decoding */ \
  X(rx_drop_integrity) /* CRC32C mismatch or AES-GCM tag not genuine */ \
  X(rx_drop_security_mode) /* protected in another mode than ours */ \
  X(rx_drop_no_key) /* authenticate/encrypt: no key for that peer */ \
  X(rx_drop_stale_epoch) /* for a previous incarnation of us, or from a retired one of the peer */ \
  X(rx_drop_replay) /* packet number already seen, too old or implausibly far ahead */ \
  X(rx_drop_unknown_peer) /* no connection to the source address */ \
  X(rx_drop_unknown_qp) /* dst_qpn not a QP connected to that peer */ \
  X(rx_drop_qp_state) /* QP not in RTR/RTS (or in error) */ \
  X(rx_drop_out_of_window) /* msn beyond the receive window */ \
  X(rx_drop_bad_request) /* inconsistent placement info (NAK InvalidRequest sent) */ \
  X(rx_drop_access) /* key/bounds/permission failure (NAK RemoteAccess sent) */ \
  X(rx_drop_rnr) /* SEND without a posted receive (NAK RNR sent) */ \
  X(rx_drop_out_of_order) /* rocev2 profile: dropped after a gap */ \
  X(rx_drop_stale_response) /* response for no outstanding request */ \
  X(rx_drop_ud_unknown_qp) /* UD datagram for no UD QP in RTR/RTS */ \
  X(rx_drop_ud_qkey) /* UD datagram with another Q_Key than its QP's */ \
  X(rx_drop_ud_no_receive) /* UD datagram that found no posted receive */ \
  X(rx_drop_ud_too_long) /* UD message larger than the receive buffer (after its GRH) */ \
  X(rx_ud_delivered) /* UD datagrams placed in a receive */ \
  X(rx_duplicate_completed) /* packet of an already completed message: ACKed, discarded */ \
  X(rx_duplicate_chunk) /* chunk already placed */ \
  X(rx_acks) \
  X(rx_naks) \
  X(tx_ud_datagrams) \
  X(tx_data_packets) \
  X(tx_data_bytes) /* payload bytes, including retransmissions */ \
  X(tx_retransmits) \
  X(spurious_retransmits) /* a packet declared lost was ACKed after all */ \
  X(tx_acks) \
  X(tx_naks) \
  X(tx_probes) \
  X(rto_expirations) \
  X(path_failures) \
  X(path_recoveries) \
  X(plane_drains) /* paths drained because their plane went down */ \
  X(go_back_n) /* rocev2 profile: rewinds */ \
  X(atomics_executed) \
  X(atomic_replays) /* duplicate atomic answered from the result cache */ \
  X(placed_bytes) /* bytes written to application memory for peers */ \
  X(peer_restarts) /* a peer came back as a new incarnation */ \
  X(tx_drop_no_key) /* authenticate/encrypt: datagram not sent, no key for the peer */ \
  X(rx_ignored_ack_block) /* SACK block for packets never sent on that path */ \
  X(rx_ignored_stream_ack) /* completion claimed for a message not posted or not sent in full */ \
  X(rx_ignored_nak) /* NAK for no outstanding attempt of a sent message */ \
  X(rx_ignored_rate_hint) /* receiver rate hint below 10 Mb/s */ \
  X(rx_drop_path_jump) /* path_seq implausibly far beyond the path's highest */ \
  X(rd_atomic_limit_refusals) /* READ/atomic beyond max_dest_rd_atomic (also an rx_drop_bad_request) */ \
  X(tx_control_dropped) /* NAK or probe reply not queued: the control queue was full */ \
  X(tx_psn_fillers) /* rocev2 profile: go-back-N sent a PSN filler for a packet it could not rebuild */

struct EndpointCounters {
#define METAROCE_COUNTER_FIELD(name) uint64_t name = 0;
  METAROCE_ENDPOINT_COUNTERS(METAROCE_COUNTER_FIELD)
#undef METAROCE_COUNTER_FIELD
};

// Calls f(name, value) for every counter, in the list's order.
template <class F>
void for_each_counter(const EndpointCounters& c, F&& f) {
#define METAROCE_COUNTER_VISIT(name) f(#name, c.name);
  METAROCE_ENDPOINT_COUNTERS(METAROCE_COUNTER_VISIT)
#undef METAROCE_COUNTER_VISIT
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

}  // namespace metaroce::transport
