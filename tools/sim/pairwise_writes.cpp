// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// All-to-all and incast as a fixed set of RDMA WRITEs from one rank's send
// buffer into another's receive buffer, every one posted at the start (as
// a grouped set of NCCL sends), each pair's bytes split over the rails and
// cut into WRITEs of at most message_bytes. A rank posts to its peers in a
// staggered order (rank + 1, rank + 2, ...), as NCCL schedules all-to-all.
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "collective_workload.h"
#include "huge_page_allocator.h"
#include "metaroce/splitmix64.h"

namespace metaroce::sim {

namespace {

using transport::Completion;
using transport::SendWr;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WrOpcode;

constexpr uint32_t kPd = 1;

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class PairwiseWrites final : public CollectiveWorkload {
 public:
  PairwiseWrites(Cluster& cluster, const CollectiveSpec& spec);
  void start(Time now) override;
  void on_completion(uint32_t node, uint16_t rail, const Completion& wc, Time now) override;
  bool finished() const override { return completed_ == posted_at_.size(); }
  Time finish_time() const override { return finish_time_; }
  bool verify() const override;
  double bus_factor() const override { return bus_factor_; }

 private:
  struct Transfer {
    uint32_t src = 0, dst = 0;
    uint64_t src_offset = 0, dst_offset = 0, bytes = 0;
  };
  struct Rank {
    std::vector<uint8_t, HugePageAllocator<uint8_t>> send, recv;
    std::vector<uint32_t> lkey, rkey;  // per rail
  };

  Cluster& cluster_;
  const uint32_t message_bytes_;
  double bus_factor_ = 1;
  std::vector<Transfer> transfers_;  // in each source's posting order
  std::vector<Rank> ranks_;
  std::map<std::tuple<uint32_t, uint16_t, uint32_t>, uint32_t> qp_;  // (node, rail, peer) -> qpn
  std::vector<Time> posted_at_;                                      // per WRITE (its wr_id)
  size_t completed_ = 0;
  Time finish_time_ = 0;
};

PairwiseWrites::PairwiseWrites(Cluster& cluster, const CollectiveSpec& spec)
    : cluster_(cluster), message_bytes_(std::max<uint32_t>(spec.message_bytes, 1)) {
  const uint32_t n = cluster.nodes();
  ranks_.resize(n);
  std::vector<uint64_t> send_bytes(n, 0), recv_bytes(n, 0);
  if (spec.workload == Workload::AllToAll) {
    // nccl-tests' all-to-all: `bytes` per rank, bytes / n to each rank.
    const uint64_t block = spec.bytes / n;
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t d = 1; d < n; ++d) {
        const uint32_t q = (r + d) % n;
        transfers_.push_back({r, q, q * block, r * block, block});
      }
      send_bytes[r] = recv_bytes[r] = n * block;
    }
    bus_factor_ = static_cast<double>(n - 1) / n;
  } else {
    for (uint32_t s = 1; s < n; ++s) transfers_.push_back({s, 0, 0, (s - 1) * spec.bytes, spec.bytes});
    for (uint32_t s = 1; s < n; ++s) send_bytes[s] = spec.bytes;
    recv_bytes[0] = (n - 1) * spec.bytes;
    bus_factor_ = n - 1;  // what reaches the receiver, in all
  }
  for (uint32_t r = 0; r < n; ++r) {
    Rank& rank = ranks_[r];
    rank.send.resize(send_bytes[r]);
    for (uint64_t i = 0; i + 8 <= rank.send.size(); i += 8) {
      const uint64_t word = splitmix64_mix((uint64_t{r} << 40) ^ i);
      std::memcpy(rank.send.data() + i, &word, 8);
    }
    rank.recv.assign(recv_bytes[r], 0);
    for (uint16_t rail = 0; rail < cluster.rails(); ++rail) {
      transport::MemoryRegistry& memory = cluster.host(r, rail).endpoint().memory();
      rank.lkey.push_back(rank.send.empty() ? 0
                                            : *memory.register_region(kPd, addr(rank.send.data()), rank.send.size(),
                                                                      transport::kAccessLocalWrite));
      rank.rkey.push_back(rank.recv.empty()
                              ? 0
                              : *memory.register_region(kPd, addr(rank.recv.data()), rank.recv.size(),
                                                        transport::kAccessLocalWrite | transport::kAccessRemoteWrite));
    }
  }
  // One RC QP per pair of ranks and rail, used in both directions.
  for (const Transfer& t : transfers_) {
    for (uint16_t rail = 0; rail < cluster.rails(); ++rail) {
      if (qp_.count({t.src, rail, t.dst})) continue;
      const Cluster::QpPair pair = cluster.connect(t.src, t.dst, rail, kPd);
      qp_[{t.src, rail, t.dst}] = pair.qp_a;
      qp_[{t.dst, rail, t.src}] = pair.qp_b;
    }
  }
}

void PairwiseWrites::start(Time now) {
  const uint16_t rails = cluster_.rails();
  for (const Transfer& t : transfers_) {
    for (uint16_t rail = 0; rail < rails; ++rail) {
      const uint64_t lo = t.bytes * rail / rails, hi = t.bytes * (rail + 1) / rails;
      transport::Endpoint& endpoint = cluster_.host(t.src, rail).endpoint();
      const uint32_t qpn = qp_.at({t.src, rail, t.dst});
      for (uint64_t offset = lo; offset < hi; offset += message_bytes_) {
        const auto length = static_cast<uint32_t>(std::min<uint64_t>(message_bytes_, hi - offset));
        SendWr wr;
        wr.wr_id = posted_at_.size();
        wr.opcode = WrOpcode::RdmaWrite;
        wr.num_sge = 1;
        wr.sg[0] = {addr(ranks_[t.src].send.data() + t.src_offset + offset), length, ranks_[t.src].lkey[rail]};
        wr.remote_addr = addr(ranks_[t.dst].recv.data() + t.dst_offset + offset);
        wr.rkey = ranks_[t.dst].rkey[rail];
        if (endpoint.post_send(qpn, wr) != transport::PostResult::Ok) {
          ++error_completions_;
          return;
        }
        posted_at_.push_back(now);
      }
    }
  }
}

void PairwiseWrites::on_completion(uint32_t, uint16_t, const Completion& wc, Time now) {
  if (wc.status != WcStatus::Success || wc.opcode != WcOpcode::RdmaWrite || wc.wr_id >= posted_at_.size()) {
    ++error_completions_;
    return;
  }
  fct_ns_.push_back(now - posted_at_[wc.wr_id]);
  ++completed_;
  finish_time_ = std::max(finish_time_, now);
}

bool PairwiseWrites::verify() const {
  for (const Transfer& t : transfers_) {
    if (std::memcmp(ranks_[t.dst].recv.data() + t.dst_offset, ranks_[t.src].send.data() + t.src_offset, t.bytes) != 0)
      return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<CollectiveWorkload> make_pairwise_writes(Cluster& cluster, const CollectiveSpec& spec) {
  return std::make_unique<PairwiseWrites>(cluster, spec);
}

}  // namespace metaroce::sim
