// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "write_transfer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace metaroce::sim {

using transport::Completion;
using transport::SendWr;
using transport::WcStatus;
using transport::WrOpcode;

Time percentile(std::vector<Time> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

WriteTransferResult run_write_transfer(const WriteTransferSpec& spec) {
  TwoHostRig rig(spec.rig);
  if (spec.setup) spec.setup(rig);
  WriteTransferResult result;

  std::vector<uint8_t> source(spec.total_bytes);
  std::mt19937_64 pattern(spec.rig.seed * 7919 + 17);
  for (size_t i = 0; i + 8 <= source.size(); i += 8) {
    const uint64_t word = pattern();
    std::memcpy(source.data() + i, &word, 8);
  }
  std::vector<uint8_t> sink(spec.total_bytes, 0);

  transport::Endpoint& a = rig.a().endpoint();
  transport::Endpoint& b = rig.b().endpoint();
  const uint32_t pd = 1;
  const auto lkey = a.memory().register_region(pd, reinterpret_cast<uintptr_t>(source.data()), source.size(),
                                               transport::kAccessLocalWrite);
  const auto rkey = b.memory().register_region(pd, reinterpret_cast<uintptr_t>(sink.data()), sink.size(),
                                               transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
  std::vector<QpPair> pairs;
  for (uint32_t i = 0; i < std::max<uint32_t>(spec.qps, 1); ++i) pairs.push_back(rig.connect_qps(spec.qp, pd));

  const uint64_t messages = (spec.total_bytes + spec.message_bytes - 1) / spec.message_bytes;
  uint64_t next_message = 0;
  uint64_t completed = 0;
  std::vector<Time> posted_at(messages, 0);
  std::vector<uint32_t> in_flight(pairs.size(), 0);
  Time first_post = 0;
  Time last_completion = 0;

  auto post_more = [&](Time now) {
    for (size_t q = 0; q < pairs.size(); ++q) {
      while (in_flight[q] < spec.outstanding && next_message < messages) {
        const uint64_t offset = next_message * spec.message_bytes;
        const uint32_t length =
            static_cast<uint32_t>(std::min<uint64_t>(spec.message_bytes, spec.total_bytes - offset));
        SendWr wr;
        wr.wr_id = next_message;
        wr.opcode = WrOpcode::RdmaWrite;
        wr.num_sge = 1;
        wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()) + offset, length, *lkey};
        wr.remote_addr = reinterpret_cast<uintptr_t>(sink.data()) + offset;
        wr.rkey = *rkey;
        if (a.post_send(pairs[q].qp_a, wr) != transport::PostResult::Ok) return;
        posted_at[next_message] = now;
        ++next_message;
        ++in_flight[q];
      }
    }
  };
  rig.a().set_application([&](Time now) {
    Completion wc[64];
    for (size_t q = 0; q < pairs.size(); ++q) {
      size_t n;
      while ((n = a.poll_cq(pairs[q].cq_a, wc)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          if (wc[i].status != WcStatus::Success) {
            ++result.error_completions;
            continue;
          }
          if (wc[i].wr_id < messages) result.fct_ns.push_back(now - posted_at[wc[i].wr_id]);
          ++completed;
          --in_flight[q];
          last_completion = now;
        }
      }
    }
    post_more(now);
  });

  // Declared at function scope: the scheduled copies refer to it.
  std::function<void()> sample = [&]() {
    result.timeline.emplace_back(rig.sim().now(), b.counters().placed_bytes);
    if (completed < messages && result.error_completions == 0)
      rig.sim().at(rig.sim().now() + spec.sample_interval_ns, sample);
  };
  if (spec.sample_interval_ns > 0) rig.sim().at(0, sample);

  first_post = rig.sim().now();
  post_more(first_post);
  rig.sim().wake(rig.node_a());
  rig.sim().run_until([&] { return completed == messages || result.error_completions > 0; }, spec.time_limit_ns);

  result.completed = completed == messages;
  result.data_intact = std::memcmp(source.data(), sink.data(), source.size()) == 0;
  result.duration_ns = last_completion - first_post;
  if (result.completed && result.duration_ns > 0)
    result.goodput_gbps = static_cast<double>(spec.total_bytes) * 8 / static_cast<double>(result.duration_ns);
  result.sender = a.counters();
  result.receiver = b.counters();
  result.sender_paths = a.path_snapshots(rig.node_b());
  result.events = rig.sim().events_processed();
  if (spec.on_finish) spec.on_finish(rig);
  return result;
}

}  // namespace metaroce::sim
