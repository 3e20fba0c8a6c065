// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// engine-scale-bench: what the engine's state costs as a process talks to
// many peers, and what many QPs on one connection cost. One JSON object per
// line on stdout.
//
//   engine-scale-bench [--connections N] [--idle-ms N] [--qps N] [--mib N]
//
// "idle_state": one Endpoint at its defaults, N peers with one RC QP each
// (at its defaults, in RTS), nothing posted. Heap bytes in use (mallinfo2)
// before and after, per connection; then the engine runs through --idle-ms
// of idleness (timers fired, datagrams drained) and reports what the idle
// connections sent and whether their state grew.
// "qp_state": as many QPs again, all to one peer: the bytes of a QP alone.
// "qp_fanout": the simulator's two hosts (4 paths at 100 Gb/s), a verified
// RDMA WRITE of --mib MiB in 64 KiB messages, 64 in flight, once over one QP
// and once round-robin over --qps QPs of the same connection: goodput in
// virtual time and the CPU seconds the simulation took, side by side.
// "busy_among_idle": the one-QP transfer again, once alone and once with
// --connections idle peers (one RC QP each) on both hosts: the CPU seconds
// of the transfer (connecting the idle peers not counted) show what the busy
// connection pays for the idle ones, which should be next to nothing.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cpu_time.h"
#include "endpoint.h"
#include "write_transfer.h"

namespace {

using metaroce::bench::cpu_seconds;
using metaroce::transport::Endpoint;
using metaroce::transport::EndpointConfig;
using metaroce::transport::PostResult;
using metaroce::transport::QpConfig;
using metaroce::transport::Time;

size_t heap_bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Fires every timer due up to `until` and drains what it sends; returns the
// datagrams sent.
uint64_t run_idle(Endpoint& endpoint, Time from, Time until) {
  std::vector<uint8_t> buf(endpoint.max_datagram_bytes());
  uint64_t sent = 0;
  Time now = from;
  while (now <= until) {
    endpoint.on_timer(now);
    while (endpoint.poll_transmit(now, buf)) ++sent;
    const Time next = endpoint.next_wakeup();
    if (next <= now) {
      ++now;  // a wake-up that asks for the same instant again: step past it
      continue;
    }
    now = next;
  }
  return sent;
}

// Creates `count` RC QPs in RTS, QP i to peer peer_of(i).
template <typename PeerOf>
bool connect_many(Endpoint& endpoint, uint32_t cq, uint32_t count, PeerOf peer_of) {
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t qpn = endpoint.create_qp(1, cq, cq, QpConfig{});
    if (qpn == 0 || endpoint.connect_qp(qpn, peer_of(i), 0x11, QpConfig{}) != PostResult::Ok) {
      std::fprintf(stderr, "engine-scale-bench: QP %u could not be created and connected\n", i);
      return false;
    }
  }
  return true;
}

int idle_state(uint32_t connections, uint32_t idle_ms) {
  const size_t before = heap_bytes_in_use();
  Endpoint endpoint(EndpointConfig{});
  const uint32_t cq = endpoint.create_cq(1024);
  const size_t empty = heap_bytes_in_use();
  if (!connect_many(endpoint, cq, connections, [](uint32_t i) { return i + 1; })) return 1;
  const size_t connected = heap_bytes_in_use();
  const Time idle_ns = static_cast<Time>(idle_ms) * 1'000'000;
  const uint64_t idle_datagrams = run_idle(endpoint, 0, idle_ns);
  const size_t after_idle = heap_bytes_in_use();
  const double per_connection = static_cast<double>(connected - empty) / connections;
  std::printf("%s\n", nlohmann::json{{"case", "idle_state"},
                                     {"connections", connections},
                                     {"qps_per_connection", 1},
                                     {"endpoint_bytes", empty - before},
                                     {"bytes_per_connection", static_cast<uint64_t>(per_connection)},
                                     {"kib_per_connection", per_connection / 1024},
                                     {"idle_ms", idle_ms},
                                     {"idle_datagrams_sent", idle_datagrams},
                                     {"bytes_grown_while_idle", static_cast<int64_t>(after_idle - connected)}}
                          .dump()
                          .c_str());

  // The same number of QPs, all on one connection: what a QP alone costs.
  Endpoint one_peer(EndpointConfig{});
  const uint32_t one_cq = one_peer.create_cq(1024);
  const size_t one_empty = heap_bytes_in_use();
  if (!connect_many(one_peer, one_cq, connections, [](uint32_t) { return 1u; })) return 1;
  const double per_qp = static_cast<double>(heap_bytes_in_use() - one_empty) / connections;
  std::printf("%s\n", nlohmann::json{{"case", "qp_state"},
                                     {"connections", 1},
                                     {"qps", connections},
                                     {"bytes_per_qp", static_cast<uint64_t>(per_qp)},
                                     {"kib_per_qp", per_qp / 1024}}
                          .dump()
                          .c_str());
  return 0;
}

// The simulated transfer of qp_fanout and busy_among_idle: 64 KiB WRITEs,
// 64 in flight.
constexpr uint32_t kMessageBytes = 64 << 10;
constexpr uint32_t kInFlight = 64;

int qp_fanout(uint32_t qps, uint32_t mib) {
  bool ok = true;
  for (const uint32_t count : {1u, qps}) {
    metaroce::sim::WriteTransferSpec spec;
    spec.total_bytes = static_cast<uint64_t>(mib) << 20;
    spec.message_bytes = kMessageBytes;
    spec.qps = count;
    spec.outstanding = std::max<uint32_t>(kInFlight / count, 1);
    const double cpu0 = cpu_seconds();
    const metaroce::sim::WriteTransferResult r = metaroce::sim::run_write_transfer(spec);
    const double cpu = cpu_seconds() - cpu0;
    ok = ok && r.completed && r.data_intact && r.error_completions == 0;
    std::printf("%s\n", nlohmann::json{{"case", "qp_fanout"},
                                       {"qps", count},
                                       {"messages_in_flight", spec.outstanding * count},
                                       {"mib", mib},
                                       {"completed", r.completed},
                                       {"intact", r.data_intact},
                                       {"goodput_gbps_virtual", r.goodput_gbps},
                                       {"cpu_seconds", cpu},
                                       {"events", r.events}}
                            .dump()
                            .c_str());
  }
  return ok ? 0 : 1;
}

// The one-QP transfer of qp_fanout, once alone and once with `idle` more
// peers on each host, one idle RC QP each: what the busy connection pays per
// byte for the idle ones around it.
int busy_among_idle(uint32_t idle, uint32_t mib) {
  bool ok = true;
  for (const uint32_t count : {0u, idle}) {
    metaroce::sim::WriteTransferSpec spec;
    spec.total_bytes = static_cast<uint64_t>(mib) << 20;
    spec.message_bytes = kMessageBytes;
    spec.outstanding = kInFlight;
    // Peer ids above the rig's two hosts' node ids: nobody answers them.
    double setup_cpu = 0;
    spec.setup = [&](metaroce::sim::TwoHostRig& rig) {
      const double setup0 = cpu_seconds();
      for (metaroce::sim::EngineHost* host : {&rig.a(), &rig.b()}) {
        Endpoint& e = host->endpoint();
        ok = ok && connect_many(e, e.create_cq(1024), count, [](uint32_t i) { return 1000 + i; });
      }
      setup_cpu = cpu_seconds() - setup0;
    };
    const double cpu0 = cpu_seconds();
    const metaroce::sim::WriteTransferResult r = metaroce::sim::run_write_transfer(spec);
    const double cpu = cpu_seconds() - cpu0 - setup_cpu;
    ok = ok && r.completed && r.data_intact && r.error_completions == 0;
    std::printf("%s\n", nlohmann::json{{"case", "busy_among_idle"},
                                       {"idle_connections", count},
                                       {"mib", mib},
                                       {"completed", r.completed},
                                       {"intact", r.data_intact},
                                       {"goodput_gbps_virtual", r.goodput_gbps},
                                       {"cpu_seconds", cpu},
                                       {"setup_cpu_seconds", setup_cpu},
                                       {"events", r.events}}
                            .dump()
                            .c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine-scale-bench: engine state per idle connection, and many QPs on one connection"};
  uint32_t connections = 4000, idle_ms = 2000, qps = 64, mib = 64;
  app.add_option("--connections", connections, "peers, one idle RC QP each")->check(CLI::Range(1, 100'000));
  app.add_option("--idle-ms", idle_ms, "virtual idle time run through after connecting")->check(CLI::Range(0, 600'000));
  app.add_option("--qps", qps, "QPs the transfer is spread over (against one)")->check(CLI::Range(1, 1024));
  app.add_option("--mib", mib, "MiB written in the fan-out case")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  const int state = idle_state(connections, idle_ms);
  const int fanout = qp_fanout(qps, mib);
  const int among_idle = busy_among_idle(connections, mib);
  return state != 0 ? state : fanout != 0 ? fanout : among_idle;
}
