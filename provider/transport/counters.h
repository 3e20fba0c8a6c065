// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#pragma once

#include <cstdint>

#include "types.h"

namespace metaroce::transport {

// Every datagram the engine refuses increments exactly one rx_drop_* counter.
struct EndpointCounters {
  uint64_t rx_datagrams = 0;
  uint64_t rx_data_packets = 0;
  uint64_t rx_ce_marked = 0;
  uint64_t rx_drop_malformed = 0;        // failed wire decoding
  uint64_t rx_drop_integrity = 0;        // CRC32C mismatch or AES-GCM tag not genuine
  uint64_t rx_drop_security_mode = 0;    // protected in another mode than ours
  uint64_t rx_drop_no_key = 0;           // authenticate/encrypt: no key for that peer
  uint64_t rx_drop_stale_epoch = 0;      // for a previous incarnation of us, or from a retired one of the peer
  uint64_t rx_drop_replay = 0;           // packet number already seen, too old or implausibly far ahead
  uint64_t rx_drop_unknown_peer = 0;     // no connection to the source address
  uint64_t rx_drop_unknown_qp = 0;       // dst_qpn not a QP connected to that peer
  uint64_t rx_drop_qp_state = 0;         // QP not in RTR/RTS (or in error)
  uint64_t rx_drop_out_of_window = 0;    // msn beyond the receive window
  uint64_t rx_drop_bad_request = 0;      // inconsistent placement info (NAK InvalidRequest sent)
  uint64_t rx_drop_access = 0;           // key/bounds/permission failure (NAK RemoteAccess sent)
  uint64_t rx_drop_rnr = 0;              // SEND without a posted receive (NAK RNR sent)
  uint64_t rx_drop_out_of_order = 0;     // rocev2 profile: dropped after a gap
  uint64_t rx_drop_stale_response = 0;   // response for no outstanding request
  uint64_t rx_drop_ud_unknown_qp = 0;    // UD datagram for no UD QP in RTR/RTS
  uint64_t rx_drop_ud_qkey = 0;          // UD datagram with another Q_Key than its QP's
  uint64_t rx_drop_ud_no_receive = 0;    // UD datagram that found no posted receive
  uint64_t rx_drop_ud_too_long = 0;      // UD message larger than the receive buffer (after its GRH)
  uint64_t rx_ud_delivered = 0;          // UD datagrams placed in a receive
  uint64_t rx_duplicate_completed = 0;   // packet of an already completed message: ACKed, discarded
  uint64_t rx_duplicate_chunk = 0;       // chunk already placed
  uint64_t rx_acks = 0;
  uint64_t rx_naks = 0;
  uint64_t tx_ud_datagrams = 0;
  uint64_t tx_data_packets = 0;
  uint64_t tx_data_bytes = 0;            // payload bytes, including retransmissions
  uint64_t tx_retransmits = 0;
  uint64_t spurious_retransmits = 0;     // a packet declared lost was ACKed after all
  uint64_t tx_acks = 0;
  uint64_t tx_naks = 0;
  uint64_t tx_probes = 0;
  uint64_t rto_expirations = 0;
  uint64_t path_failures = 0;
  uint64_t path_recoveries = 0;
  uint64_t go_back_n = 0;                // rocev2 profile: rewinds
  uint64_t atomics_executed = 0;
  uint64_t atomic_replays = 0;           // duplicate atomic answered from the result cache
  uint64_t placed_bytes = 0;             // bytes written to application memory for peers
  uint64_t peer_restarts = 0;            // a peer came back as a new incarnation
  uint64_t tx_drop_no_key = 0;           // authenticate/encrypt: datagram not sent, no key for the peer
};

enum class PathHealth : uint8_t { Active, Suspect, Failed };
const char* to_string(PathHealth health);

struct PathSnapshot {
  uint16_t path_id = 0;
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
