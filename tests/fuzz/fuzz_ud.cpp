// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Fuzz target for the UD receive path (Endpoint::on_ud_datagram): every
// input is one datagram from an arbitrary source (its first byte says
// whether it gets a valid CRC trailer), delivered to an endpoint
// with two UD QPs (0x1001 with its own receives, 0x1002 on an SRQ), whose
// receive buffers sit inside a guarded arena. Checked, abort() on violation:
//  - no byte outside the posted receive buffers changes;
//  - the datagram either lands in one receive (one completion, GRH + message,
//    byte_len = 40 + its length) or increments exactly one drop counter;
//  - rx_datagrams counts it; nothing is transmitted in answer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "endpoint.h"
#include "packet_protection.h"
#include "ud_queue_pair.h"

namespace {

using namespace metaroce::transport;

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kQpn = 0x1001;
constexpr size_t kRecvBytes = 40 + 1024;
constexpr size_t kGuard = 256;
constexpr uint8_t kCanary = 0xA5;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_ud: %s\n", what);
  std::abort();
}

uint64_t drops(const EndpointCounters& c) {
  return c.rx_drop_malformed + c.rx_drop_security_mode + c.rx_drop_integrity + c.rx_drop_ud_unknown_qp +
         c.rx_drop_ud_qkey + c.rx_drop_ud_no_receive + c.rx_drop_ud_too_long;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  EndpointConfig config;
  config.qpn_base = kQpn;
  config.mtu = 1024;
  Endpoint e(config);
  // Two receive buffers per QP, each framed by guards.
  std::vector<uint8_t> arena(kGuard + 4 * (kRecvBytes + kGuard), kCanary);
  const auto buffer = [&](int i) { return arena.data() + kGuard + static_cast<size_t>(i) * (kRecvBytes + kGuard); };
  const uint32_t pd = 1;
  const std::optional<uint32_t> key =
      e.memory().register_region(pd, reinterpret_cast<uintptr_t>(arena.data()), arena.size(), kAccessLocalWrite);
  check(key.has_value(), "register_region");
  const uint32_t cq = e.create_cq(16);
  const uint32_t srq = e.create_srq(pd, 4);
  QpConfig qc;
  const uint32_t own = e.create_ud_qp(0, pd, cq, cq, 0, qc, 1024);
  const uint32_t shared = e.create_ud_qp(0, pd, cq, cq, srq, qc, 1024);
  check(own == kQpn && shared == kQpn + 1, "UD QP numbers");
  for (const uint32_t qpn : {own, shared}) {
    check(e.modify_qp(qpn, {.next = QpState::Init, .qkey = kQkey}) == PostResult::Ok, "to INIT");
    check(e.modify_qp(qpn, {.next = QpState::ReadyToReceive}) == PostResult::Ok, "to RTR");
  }
  for (int i = 0; i < 4; ++i) {
    RecvWr wr;
    wr.wr_id = static_cast<uint64_t>(i);
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(buffer(i)), static_cast<uint32_t>(kRecvBytes), *key};
    check((i < 2 ? e.post_recv(own, wr) : e.post_srq_recv(srq, wr)) == PostResult::Ok, "post receive");
  }
  // Receive buffers may change; nothing else may.
  std::vector<bool> writable(arena.size(), false);
  for (int i = 0; i < 4; ++i)
    for (size_t j = 0; j < kRecvBytes; ++j) writable[static_cast<size_t>(buffer(i) - arena.data()) + j] = true;

  UdAddresses addresses;
  addresses.source = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  addresses.destination = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  // The first byte chooses: odd, the rest gets a valid CRC32C trailer (so
  // that mutations reach the decoder and the QPs); even, it goes as it is.
  if (size == 0) return 0;
  const bool seal = data[0] & 1;
  std::vector<uint8_t> datagram(data + 1, data + size);
  if (seal) {
    datagram.resize(datagram.size() + metaroce::wire::kIntegrityTrailerBytes);
    seal_integrity(datagram, size - 1);
  }
  datagram.shrink_to_fit();  // exact size: a sanitizer sees overreads
  const EndpointCounters before = e.counters();
  e.on_ud_datagram(addresses, datagram);
  const EndpointCounters& after = e.counters();
  check(after.rx_datagrams == before.rx_datagrams + 1, "rx_datagrams");
  Completion c[4];
  const size_t n = e.poll_cq(cq, c);
  const uint64_t dropped = drops(after) - drops(before);
  check(n + dropped == 1, "neither delivered nor counted as one drop");
  if (n == 1) {
    check(c[0].status == WcStatus::Success && c[0].has_grh, "delivered without a GRH");
    check(c[0].byte_len >= 40 && c[0].byte_len <= kRecvBytes, "byte_len");
    check(after.rx_ud_delivered == before.rx_ud_delivered + 1, "rx_ud_delivered");
  }
  for (size_t i = 0; i < arena.size(); ++i)
    check(writable[i] || arena[i] == kCanary, "a byte outside the receives changed");
  std::vector<uint8_t> tx(e.max_datagram_bytes());
  check(!e.poll_transmit(0, tx), "a UD datagram was answered");
  return 0;
}
