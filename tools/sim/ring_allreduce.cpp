// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Ring all-reduce of uint32 elements (sum, wrapping), as NCCL's ring
// algorithm with the Simple protocol runs it over RDMA.
//
// Each channel owns a contiguous share of the buffer, cut into `nodes`
// chunks, each chunk into `slices` slices (two or more) of at most one slot. A rank's work
// on a channel is a sequence of units k = step * slices + slice over
// 2 (nodes - 1) steps: in reduce-scatter step s rank r sends chunk r - s and
// receives chunk r - s - 1, which it adds into its buffer; in all-gather
// step s it sends chunk r + 1 - s and receives chunk r - s, which it copies.
// What a rank sends at unit k is what it received at unit k - slices, so it
// may send unit k once that arrived (the pipeline) and once slot k % slots
// at the next rank is free (credits: the next rank returns each slot with a
// zero-length SEND once it has consumed it).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "collective_workload.h"
#include "huge_page_allocator.h"

namespace metaroce::sim {

namespace {

using transport::Completion;
using transport::RecvWr;
using transport::SendWr;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WrOpcode;

constexpr uint32_t kPd = 1;

// The value rank r contributes at element i, and their sum over n ranks:
// sum (h(i) (r + 1) + r c) = h(i) n (n + 1) / 2 + c n (n - 1) / 2 (mod 2^32).
constexpr uint32_t kRankStride = 0x9e3779b9u;
uint32_t element_hash(uint64_t i) { return static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(i >> 13); }
uint32_t contribution(uint32_t rank, uint64_t i) { return element_hash(i) * (rank + 1) + rank * kRankStride; }
uint32_t reduced(uint32_t n, uint64_t i) {
  return element_hash(i) * static_cast<uint32_t>(uint64_t{n} * (n + 1) / 2) +
         kRankStride * static_cast<uint32_t>(uint64_t{n} * (n - 1) / 2);
}

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class RingAllReduce final : public CollectiveWorkload {
 public:
  RingAllReduce(Cluster& cluster, const CollectiveSpec& spec);
  void start(Time now) override;
  void on_completion(uint32_t node, uint16_t rail, const Completion& wc, Time now) override;
  bool finished() const override { return finished_ranks_ == n_; }
  Time finish_time() const override { return finish_time_; }
  bool verify() const override;
  double bus_factor() const override { return 2.0 * (n_ - 1) / n_; }

 private:
  struct Channel {
    uint16_t rail = 0;
    uint64_t first = 0, elements = 0;  // the channel's share of the buffer
  };
  // One rank's state on one channel.
  struct Lane {
    uint32_t qp_next = 0, qp_prev = 0;  // to rank + 1; from rank - 1
    uint32_t sent = 0, received = 0, credits = 0, send_completed = 0;
    bool done = false;
    std::vector<uint32_t> slots;  // slots_ x slot_elements_ elements, written by rank - 1
    uint32_t slots_rkey = 0;
    std::vector<Time> posted_at;  // per unit
  };
  struct Rank {
    std::vector<uint32_t, HugePageAllocator<uint32_t>> buffer;
    std::vector<uint32_t> lkey;  // per rail
    std::vector<Lane> lanes;     // per channel
    uint32_t lanes_done = 0;
  };
  enum class Role : uint8_t { Next, Prev };
  struct QpRef {
    uint32_t channel;
    Role role;
  };

  static uint64_t key(uint32_t node, uint16_t rail, uint32_t qpn) {
    return (uint64_t{node} << 40) | (uint64_t{rail} << 32) | qpn;
  }
  uint32_t units() const { return 2 * (n_ - 1) * slices_; }
  // Element range of slice `slice` of chunk `chunk` in channel c.
  std::pair<uint64_t, uint64_t> slice_range(uint32_t c, uint32_t chunk, uint32_t slice) const;
  uint32_t send_chunk(uint32_t rank, uint32_t step) const;
  uint32_t recv_chunk(uint32_t rank, uint32_t step) const;
  void try_send(uint32_t rank, uint32_t c, Time now);
  void post_recv(uint32_t rank, uint32_t c, uint32_t qpn);
  void on_data(uint32_t rank, uint32_t c, const Completion& wc, Time now);
  void lane_progress(uint32_t rank, uint32_t c, Time now);

  Cluster& cluster_;
  const uint32_t n_;
  uint32_t slots_ = 0;
  uint32_t slices_ = 1;
  uint64_t slot_elements_ = 0;
  std::vector<Channel> channels_;
  std::vector<Rank> ranks_;
  std::unordered_map<uint64_t, QpRef> qps_;
  uint32_t finished_ranks_ = 0;
  Time finish_time_ = 0;
};

RingAllReduce::RingAllReduce(Cluster& cluster, const CollectiveSpec& spec)
    : cluster_(cluster), n_(cluster.nodes()), slots_(std::max<uint32_t>(spec.slots, 1)) {
  const uint64_t elements = spec.bytes / sizeof(uint32_t);
  const uint32_t channel_count = spec.channels ? spec.channels : kChannelsPerPlane * spec.cluster.fabric.planes;
  for (uint32_t c = 0; c < channel_count; ++c) {
    Channel ch;
    ch.rail = static_cast<uint16_t>(c % cluster.rails());
    ch.first = elements * c / channel_count;
    ch.elements = elements * (c + 1) / channel_count - ch.first;
    channels_.push_back(ch);
  }
  // Every chunk is cut into the same number of slices, each within a slot,
  // and at least two: NCCL's ring sends a chunk as two slices
  // (ALLREDUCE_CHUNKSTEPS / ALLREDUCE_SLICESTEPS), so that a rank forwards
  // the first while the second arrives.
  uint64_t largest_chunk = 0;
  for (const Channel& ch : channels_) largest_chunk = std::max(largest_chunk, (ch.elements + n_ - 1) / n_);
  const uint64_t slot_capacity = std::max<uint64_t>(spec.slot_bytes / sizeof(uint32_t), 1);
  slices_ = static_cast<uint32_t>(std::max<uint64_t>(2, (largest_chunk + slot_capacity - 1) / slot_capacity));
  slot_elements_ = std::max<uint64_t>(1, (largest_chunk + slices_ - 1) / slices_);

  ranks_.resize(n_);
  for (uint32_t r = 0; r < n_; ++r) {
    Rank& rank = ranks_[r];
    rank.buffer.resize(elements);
    for (uint64_t i = 0; i < elements; ++i) rank.buffer[i] = contribution(r, i);
    for (uint16_t rail = 0; rail < cluster.rails(); ++rail) {
      rank.lkey.push_back(*cluster.host(r, rail).endpoint().memory().register_region(
          kPd, addr(rank.buffer.data()), rank.buffer.size() * sizeof(uint32_t), transport::kAccessLocalWrite));
    }
    rank.lanes.resize(channels_.size());
    for (uint32_t c = 0; c < channels_.size(); ++c) {
      Lane& lane = rank.lanes[c];
      lane.slots.assign(slots_ * slot_elements_, 0);
      lane.slots_rkey = *cluster.host(r, channels_[c].rail)
                             .endpoint()
                             .memory()
                             .register_region(kPd, addr(lane.slots.data()), lane.slots.size() * sizeof(uint32_t),
                                              transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
      lane.posted_at.assign(units(), 0);
    }
  }
  for (uint32_t c = 0; c < channels_.size(); ++c) {
    const uint16_t rail = channels_[c].rail;
    for (uint32_t r = 0; r < n_; ++r) {
      const uint32_t next = (r + 1) % n_;
      const Cluster::QpPair pair = cluster.connect(r, next, rail, kPd);
      ranks_[r].lanes[c].qp_next = pair.qp_a;
      ranks_[next].lanes[c].qp_prev = pair.qp_b;
      qps_[key(r, rail, pair.qp_a)] = {c, Role::Next};
      qps_[key(next, rail, pair.qp_b)] = {c, Role::Prev};
    }
  }
}

std::pair<uint64_t, uint64_t> RingAllReduce::slice_range(uint32_t c, uint32_t chunk, uint32_t slice) const {
  const Channel& ch = channels_[c];
  const uint64_t lo = ch.first + ch.elements * chunk / n_;
  const uint64_t len = ch.first + ch.elements * (chunk + 1) / n_ - lo;
  return {lo + len * slice / slices_, lo + len * (slice + 1) / slices_};
}

uint32_t RingAllReduce::send_chunk(uint32_t rank, uint32_t step) const {
  const uint32_t n = n_;
  return step < n - 1 ? (rank + n - step) % n : (rank + 1 + n - (step - (n - 1))) % n;
}

uint32_t RingAllReduce::recv_chunk(uint32_t rank, uint32_t step) const {
  const uint32_t n = n_;
  return step < n - 1 ? (rank + 2 * n - step - 1) % n : (rank + n - (step - (n - 1))) % n;
}

void RingAllReduce::post_recv(uint32_t rank, uint32_t c, uint32_t qpn) {
  RecvWr wr;  // WRITE with immediate and the zero-length credit SEND consume one each, with no data
  cluster_.host(rank, channels_[c].rail).endpoint().post_recv(qpn, wr);
}

void RingAllReduce::start(Time now) {
  for (uint32_t r = 0; r < n_; ++r) {
    for (uint32_t c = 0; c < channels_.size(); ++c) {
      for (uint32_t i = 0; i < slots_; ++i) {
        post_recv(r, c, ranks_[r].lanes[c].qp_prev);
        post_recv(r, c, ranks_[r].lanes[c].qp_next);
      }
    }
  }
  for (uint32_t r = 0; r < n_; ++r)
    for (uint32_t c = 0; c < channels_.size(); ++c) try_send(r, c, now);
}

void RingAllReduce::try_send(uint32_t rank, uint32_t c, Time now) {
  Lane& lane = ranks_[rank].lanes[c];
  const uint16_t rail = channels_[c].rail;
  transport::Endpoint& endpoint = cluster_.host(rank, rail).endpoint();
  const Lane& next = ranks_[(rank + 1) % n_].lanes[c];
  while (lane.sent < units() && lane.sent < slots_ + lane.credits &&
         (lane.sent < slices_ || lane.received > lane.sent - slices_)) {
    const uint32_t k = lane.sent;
    const auto [lo, hi] = slice_range(c, send_chunk(rank, k / slices_), k % slices_);
    SendWr wr;
    wr.wr_id = k;
    wr.opcode = WrOpcode::RdmaWriteWithImm;
    wr.imm = k;
    wr.num_sge = hi > lo ? 1 : 0;
    wr.sg[0] = {addr(ranks_[rank].buffer.data() + lo), static_cast<uint32_t>((hi - lo) * sizeof(uint32_t)),
                ranks_[rank].lkey[rail]};
    wr.remote_addr = addr(next.slots.data() + (k % slots_) * slot_elements_);
    wr.rkey = next.slots_rkey;
    if (endpoint.post_send(lane.qp_next, wr) != transport::PostResult::Ok) {
      ++error_completions_;
      return;
    }
    lane.posted_at[k] = now;
    ++lane.sent;
  }
}

void RingAllReduce::on_data(uint32_t rank, uint32_t c, const Completion& wc, Time now) {
  Lane& lane = ranks_[rank].lanes[c];
  const uint32_t k = lane.received;
  if (!wc.has_imm || wc.imm != k) {  // the stream completes in order: anything else is a bug
    ++error_completions_;
    return;
  }
  const auto [lo, hi] = slice_range(c, recv_chunk(rank, k / slices_), k % slices_);
  const uint32_t* slot = lane.slots.data() + (k % slots_) * slot_elements_;
  uint32_t* out = ranks_[rank].buffer.data() + lo;
  if (k / slices_ < n_ - 1) {
    for (uint64_t i = 0; i < hi - lo; ++i) out[i] += slot[i];
  } else {
    std::memcpy(out, slot, (hi - lo) * sizeof(uint32_t));
  }
  ++lane.received;
  post_recv(rank, c, lane.qp_prev);
  SendWr credit;
  credit.wr_id = UINT64_MAX;
  credit.opcode = WrOpcode::SendWithImm;
  credit.imm = k;
  credit.signaled = false;
  if (cluster_.host(rank, channels_[c].rail).endpoint().post_send(lane.qp_prev, credit) != transport::PostResult::Ok)
    ++error_completions_;
  try_send(rank, c, now);
}

void RingAllReduce::lane_progress(uint32_t rank, uint32_t c, Time now) {
  Lane& lane = ranks_[rank].lanes[c];
  if (lane.done || lane.received != units() || lane.send_completed != units()) return;
  lane.done = true;
  if (++ranks_[rank].lanes_done == channels_.size()) {
    ++finished_ranks_;
    finish_time_ = std::max(finish_time_, now);
  }
}

void RingAllReduce::on_completion(uint32_t node, uint16_t rail, const Completion& wc, Time now) {
  if (wc.status != WcStatus::Success) {
    ++error_completions_;
    return;
  }
  const auto it = qps_.find(key(node, rail, wc.qp_num));
  if (it == qps_.end()) {
    ++error_completions_;
    return;
  }
  const uint32_t c = it->second.channel;
  Lane& lane = ranks_[node].lanes[c];
  if (it->second.role == Role::Prev) {
    if (wc.opcode == WcOpcode::RecvRdmaWithImm) on_data(node, c, wc, now);
  } else if (wc.opcode == WcOpcode::Recv) {  // a slot returned
    ++lane.credits;
    post_recv(node, c, lane.qp_next);
    try_send(node, c, now);
  } else if (wc.opcode == WcOpcode::RdmaWrite && wc.wr_id < units()) {
    fct_ns_.push_back(now - lane.posted_at[wc.wr_id]);
    ++lane.send_completed;
  }
  lane_progress(node, c, now);
}

bool RingAllReduce::verify() const {
  for (const Rank& rank : ranks_)
    for (uint64_t i = 0; i < rank.buffer.size(); ++i)
      if (rank.buffer[i] != reduced(n_, i)) return false;
  return true;
}

}  // namespace

std::unique_ptr<CollectiveWorkload> make_ring_allreduce(Cluster& cluster, const CollectiveSpec& spec) {
  return std::make_unique<RingAllReduce>(cluster, spec);
}

}  // namespace metaroce::sim
