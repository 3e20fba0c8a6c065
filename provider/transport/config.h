// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#pragma once

#include <cstdint>

#include "metaroce/wire.h"
#include "types.h"

namespace metaroce::transport {

// Per-path congestion response. Defaults suit a datacenter fabric: start at
// line rate (as RDMA congestion controllers do) and back off on ECN and delay.
struct CongestionConfig {
  double ecn_gain = 1.0 / 16;            // EWMA gain of the marked fraction (DCTCP's g)
  uint32_t additive_increase_bytes = 0;  // per RTT; 0 = one MTU
  Time target_queue_delay_ns = 0;        // delay signal: back off when RTT exceeds min RTT + this; 0 = base RTT
  double delay_backoff = 0.8;            // window factor applied when the delay signal fires
  uint32_t min_window_bytes = 0;         // 0 = one MTU
  uint32_t max_window_bytes = 0;         // per path; 0 = 4 * initial window
  uint32_t initial_window_bytes = 0;     // per path; 0 = the path's bandwidth-delay product
};

struct EndpointConfig {
  Profile profile = Profile::MetaRoCE;
  uint16_t home_port = wire::kHomePortBase;  // written in every datagram's common header
  // QP numbers are qpn_base, qpn_base + 1, ... up to max_qps of them. The
  // verbs layer encodes its home port in qpn_base so that a peer can derive
  // the port from the QP number it is given.
  uint32_t qpn_base = 0x11;
  uint32_t max_qps = 0xffffff;
  uint16_t paths = 4;  // MetaRoCE only; RoCEv2 always uses one
  // Independent network planes the device reaches (one NIC or netdev each).
  // Path p belongs to plane p % planes, so consecutive paths alternate
  // planes and the scheduler spreads a connection's packets over all of
  // them. Use a multiple of planes as paths to give each plane as many.
  uint16_t planes = 1;
  uint32_t mtu = 4096;                       // payload bytes per data packet
  uint64_t path_rate_bps = 100'000'000'000;  // line rate per path: pacing ceiling, initial window
  uint64_t inbound_capacity_bps = 0;         // receiver rate hint total; 0 = paths * path_rate_bps
  // With several senders the rate hint hands out this fraction of the
  // inbound capacity, so that a queue built by the first RTT of an incast
  // drains instead of standing; a lone sender is given all of it.
  double rate_hint_utilization = 0.95;
  Time base_rtt_ns = 8'000;            // RTT before the first sample
  Time min_rto_ns = 0;                 // 0 = 4 * base RTT
  Time max_rto_ns = 100'000'000;       // backoff ceiling (100 ms)
  uint32_t path_suspect_timeouts = 1;  // consecutive RTOs before a path stops taking new data
  uint32_t path_fail_timeouts = 3;     // consecutive RTOs before a path is failed and probed
  Time probe_interval_ns = 0;          // first probe of a failed path after this; 0 = min RTO
  // Pacing burst allowance: a path may send up to this far ahead of its
  // paced schedule, and next_wakeup() reports a pacing release half of it
  // early, so that a runtime which wakes at that time releases about half a
  // burst per wake-up (one batched submission) rather than one datagram.
  // Timestamps and timers stay honest. 0 = strict pacing (the simulator).
  Time pacing_burst_ns = 0;
  uint32_t ack_every_packets = 4;            // ACK at least every this many data packets
  Time ack_delay_ns = 0;                     // or after this long; 0 = base RTT / 4
  uint32_t max_outstanding_messages = 1024;  // per stream, receive-side tracking bound
  CongestionConfig cc;
  // How datagrams are protected. Authenticate and encrypt need a pair key
  // per peer (Endpoint::set_peer_key) before anything moves.
  wire::Security security = wire::Security::Integrity;
  // This endpoint's incarnation, written in every datagram; 0 = drawn from
  // random_seed. The driver passes fresh randomness: a restarted endpoint
  // must not reuse its predecessor's epoch.
  uint32_t epoch = 0;
  // Seeds what the engine makes unpredictable (epoch, memory keys); 0 =
  // derived from home_port and qpn_base (deterministic, for tests).
  uint64_t random_seed = 0;
  // Completions that data arriving here caused wait for the ACK covering it
  // (Endpoint::push_completion). false: they become visible when
  // poll_transmit has handed out every datagram due, for a driver that sends
  // each one as it gets it. true: only when the driver calls
  // release_completions(), for a driver that queues datagrams and hands them
  // to the kernel later (the io runtime): a process that exits at its last
  // completion, even with _exit(), must not take the ACK with it.
  bool driver_releases_completions = false;
  // The driver sends a datagram from three places (TxDatagram::payload): the
  // engine then leaves a payload that lies in one piece of application
  // memory where it is instead of copying it into the datagram, and the
  // kernel's copy is the only one. Integrity mode only (a tag over the
  // payload is computed in place); new data only (a resend, inline data and
  // a payload across SGEs are copied). The driver must not let an MR's
  // deregistration return while a datagram it handed out may still be read
  // (io::Runtime::fence_sends).
  bool gather_payload = false;
};

// IB's largest RNR timer value (655.36 ms): a NAK asking for a longer delay
// is capped to it.
inline constexpr Time kMaxRnrDelayNs = 655'360'000;

// What a queue pair is configured with (from ibv_modify_qp attributes).
struct QpConfig {
  uint32_t max_send_wr = 1024;
  uint32_t max_recv_wr = 1024;
  uint8_t retry_cnt = 7;  // timeouts without progress before RETRY_EXC_ERR
  uint8_t rnr_retry = 7;  // 7 = retry forever, as in verbs
  Time timeout_ns = 0;    // transport timeout (verbs: 4.096us * 2^timeout); 0 = engine RTO
  Time min_rnr_timer_ns = 10'000;
  uint32_t max_rd_atomic = 16;
  uint32_t max_dest_rd_atomic = 16;
  // Initial message sequence numbers (verbs sq_psn / rq_psn): the first
  // request this QP sends has msn sq_psn; the first it accepts, rq_psn.
  uint32_t sq_psn = 1;
  uint32_t rq_psn = 1;
  // Payload bytes per data packet of this QP (verbs: a path_mtu below the
  // port's active MTU); 0, or anything above the endpoint's mtu, means the
  // endpoint's. Both ends of a connection must agree, as with path_mtu.
  uint32_t mtu = 0;
};

}  // namespace metaroce::transport
