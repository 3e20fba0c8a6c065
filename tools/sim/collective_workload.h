// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What run_collective drives: a workload posts its first work requests at
// start(), is handed every completion of every endpoint (it may post more
// on that endpoint), and says when every rank has finished.
#pragma once

#include <memory>
#include <vector>

#include "collective.h"

namespace metaroce::sim {

class CollectiveWorkload {
 public:
  virtual ~CollectiveWorkload() = default;
  virtual void start(Time now) = 0;
  virtual void on_completion(uint32_t node, uint16_t rail, const transport::Completion& wc, Time now) = 0;
  virtual bool finished() const = 0;
  virtual Time finish_time() const = 0;  // the last rank's
  virtual bool verify() const = 0;
  // The factor nccl-tests turns algorithm bandwidth into bus bandwidth with.
  virtual double bus_factor() const = 0;

  const std::vector<Time>& fct_ns() const { return fct_ns_; }
  uint64_t error_completions() const { return error_completions_; }

 protected:
  std::vector<Time> fct_ns_;
  uint64_t error_completions_ = 0;
};

std::unique_ptr<CollectiveWorkload> make_ring_allreduce(Cluster& cluster, const CollectiveSpec& spec);
// alltoall and incast: a fixed set of (source, destination, bytes) WRITEs.
std::unique_ptr<CollectiveWorkload> make_pairwise_writes(Cluster& cluster, const CollectiveSpec& spec);

}  // namespace metaroce::sim
