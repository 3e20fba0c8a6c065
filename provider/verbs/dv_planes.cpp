// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce_dv_query_planes / metaroce_dv_query_paths: a device's planes and
// a connection's paths as the engine sees them (metaroce_dv.h).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "provider.h"

namespace metaroce::verbs {
namespace {

uint32_t dv_health(transport::PathHealth health) {
  switch (health) {
    case transport::PathHealth::Active: return METAROCE_DV_PATH_ACTIVE;
    case transport::PathHealth::Suspect: return METAROCE_DV_PATH_SUSPECT;
    case transport::PathHealth::Failed: return METAROCE_DV_PATH_FAILED;
  }
  return METAROCE_DV_PATH_FAILED;
}

void copy_text(char* out, size_t size, const std::string& text) {
  std::memset(out, 0, size);
  std::memcpy(out, text.data(), std::min(text.size(), size - 1));
}

}  // namespace
}  // namespace metaroce::verbs

using namespace metaroce;
using namespace metaroce::verbs;

extern "C" {

int metaroce_dv_query_planes(ibv_context* context, metaroce_dv_plane* planes, int max) {
  if (!metaroce_dv_is_metaroce_context(context) || max < 0 || (max > 0 && !planes)) {
    errno = EINVAL;
    return -1;
  }
  Context& ctx = *context_of(context);
  std::vector<metaroce_dv_plane> out(ctx.planes.size());
  for (size_t k = 0; k < out.size(); ++k) {
    copy_text(out[k].netdev, sizeof out[k].netdev, ctx.planes[k].netdev);
    copy_text(out[k].address, sizeof out[k].address, ctx.planes[k].address_text);
  }
  // Every shard's paths; a plane is up when the first shard sees it up (the
  // plane monitor tells them all at once).
  for (const std::unique_ptr<Shard>& shard : ctx.shards)
    shard->engine([&](transport::Endpoint& e) {
      if (shard == ctx.shards.front())
        for (size_t k = 0; k < out.size(); ++k) out[k].up = e.plane_up(static_cast<uint16_t>(k)) ? 1 : 0;
      for (const transport::PeerId peer : e.peers()) {
        for (const transport::PathSnapshot& p : e.path_snapshots(peer)) {
          if (p.plane >= out.size()) continue;
          metaroce_dv_plane& plane = out[p.plane];
          ++plane.paths;
          if (p.health == transport::PathHealth::Active) ++plane.active_paths;
          plane.packets_sent += p.packets_sent;
          plane.bytes_sent += p.bytes_sent;
          plane.retransmits += p.retransmits;
          plane.lost += p.lost;
        }
      }
      return 0;
    });
  std::copy_n(out.begin(), std::min<size_t>(out.size(), static_cast<size_t>(max)), planes);
  return static_cast<int>(out.size());
}

int metaroce_dv_query_paths(ibv_qp* qp, metaroce_dv_path* paths, int max) {
  if (!qp || !metaroce_dv_is_metaroce_context(qp->context) || max < 0 || (max > 0 && !paths)) {
    errno = EINVAL;
    return -1;
  }
  const Qp& q = *qp_of(qp);
  if (q.peer == 0) return 0;
  const std::vector<transport::PathSnapshot> snapshots =
      q.shard->engine([&](transport::Endpoint& e) { return e.path_snapshots(q.peer); });
  for (size_t i = 0; i < snapshots.size() && i < static_cast<size_t>(max); ++i) {
    const transport::PathSnapshot& p = snapshots[i];
    paths[i] =
        metaroce_dv_path{p.path_id, p.plane,     dv_health(p.health), p.packets_sent,   p.bytes_sent, p.retransmits,
                         p.lost,    p.ecn_marks, p.window_bytes,      p.inflight_bytes, p.srtt_ns,    p.min_rtt_ns};
  }
  return static_cast<int>(snapshots.size());
}

}  // extern "C"
