// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "provider.h"

namespace metaroce::verbs {
namespace {

// One shard's object; `index` names the shard when the context has several
// (-1: it has one, and the object has no "progress_thread").
void dump_shard_stats(Shard& shard, int index) {
  const io::RuntimeStats io = shard.runtime->stats();
  nlohmann::ordered_json stats = {{"io_uring", io.io_uring}, {"gso", io.gso}, {"gro", io.gro}};
  if (index >= 0) stats["progress_thread"] = index;
  io::for_each_counter(io, [&](const char* name, uint64_t value) { stats[name] = value; });
  shard.engine([&](transport::Endpoint& e) {
    stats["security"] = wire::to_string(e.config().security);
    transport::for_each_counter(e.counters(), [&](const char* name, uint64_t value) { stats[name] = value; });
    // Sending-side state of every path of every peer, as the engine sees it now.
    nlohmann::ordered_json paths = nlohmann::ordered_json::array();
    for (const transport::PeerId peer : e.peers()) {
      for (const transport::PathSnapshot& p : e.path_snapshots(peer)) {
        nlohmann::ordered_json path = {{"peer", peer}};
        transport::for_each_field(p, [&](const char* name, const auto& value) { path[name] = value; });
        paths.push_back(std::move(path));
      }
    }
    stats["paths"] = std::move(paths);
    return 0;
  });
  std::fprintf(stderr, "%s\n", nlohmann::ordered_json{{"metaroce_stats", stats}}.dump().c_str());
}

}  // namespace

// METAROCE_STATS=1: the engine's counters and per-path state on stderr when
// the context closes, one JSON object per progress thread (until the daemon
// collects them).
void dump_stats(Context& ctx) {
  const char* env = std::getenv("METAROCE_STATS");
  if (!env || std::strcmp(env, "0") == 0) return;
  for (size_t k = 0; k < ctx.shards.size(); ++k)
    dump_shard_stats(*ctx.shards[k], ctx.shards.size() > 1 ? static_cast<int>(k) : -1);
}

}  // namespace metaroce::verbs
