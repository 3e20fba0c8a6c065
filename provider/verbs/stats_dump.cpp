// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "provider.h"

namespace metaroce::verbs {

// METAROCE_STATS=1: the engine's counters and per-path state on stderr when
// the context closes, one JSON object (until the daemon collects them).
void dump_stats(Context& ctx) {
  const char* env = std::getenv("METAROCE_STATS");
  if (!env || std::strcmp(env, "0") == 0) return;
  const io::RuntimeStats io = ctx.runtime->stats();
  nlohmann::ordered_json stats = {{"io_uring", io.io_uring},
                                  {"gso", io.gso},
                                  {"gro", io.gro},
                                  {"datagrams_sent", io.datagrams_sent},
                                  {"send_syscalls", io.send_syscalls},
                                  {"gso_sends", io.gso_sends},
                                  {"datagrams_received", io.datagrams_received},
                                  {"receive_syscalls", io.receive_syscalls},
                                  {"gro_receives", io.gro_receives},
                                  {"progress_wakeups", io.progress_wakeups},
                                  {"unknown_sender_drops", io.unknown_sender_drops},
                                  {"truncated_drops", io.truncated_drops},
                                  {"oversize_drops", io.oversize_drops}};
  ctx.engine([&](transport::Endpoint& e) {
    stats["security"] = wire::to_string(e.config().security);
    transport::for_each_counter(e.counters(), [&](const char* name, uint64_t value) { stats[name] = value; });
    // Sending-side state of every path of every peer, as the engine sees it now.
    nlohmann::ordered_json paths = nlohmann::ordered_json::array();
    for (const transport::PeerId peer : e.peers()) {
      for (const transport::PathSnapshot& p : e.path_snapshots(peer)) {
        paths.push_back({{"peer", peer},
                         {"path", p.path_id},
                         {"health", transport::to_string(p.health)},
                         {"packets_sent", p.packets_sent},
                         {"retransmits", p.retransmits},
                         {"lost", p.lost},
                         {"ecn_marks", p.ecn_marks},
                         {"window_bytes", p.window_bytes},
                         {"srtt_ns", p.srtt_ns},
                         {"min_rtt_ns", p.min_rtt_ns}});
      }
    }
    stats["paths"] = std::move(paths);
    return 0;
  });
  std::fprintf(stderr, "%s\n", nlohmann::ordered_json{{"metaroce_stats", stats}}.dump().c_str());
}

}  // namespace metaroce::verbs
