// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce-sim: runs the real transport engine on the simulated network.
//   bench  one JSON object per line per (transport, loss)
//   demo   MetaRoCE against the RoCEv2 profile under loss, as a table
//   scenarios  blackhole recovery and reordering figures, as JSON lines
//   collective one JSON object per line per (workload, planes, transport, loss)
//              on a multiplane leaf-spine cluster
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collective.h"
#include "write_transfer.h"

namespace {

using metaroce::sim::WriteTransferResult;
using metaroce::sim::WriteTransferSpec;
using metaroce::transport::Profile;

constexpr const char* kScenario = R"(Default scenario (all in virtual time, deterministic from --seed):
  two hosts joined by 4 parallel paths of 100 Gb/s, 4 us one-way delay each
  (8 us base RTT), 66 bytes of per-packet wire overhead, ECN marking above a
  100 kB queue, 2 MiB drop-tail queues; random loss applied to every path in
  both directions (data and ACKs alike).
  Workload: 64 MiB of RDMA WRITE with a 4 KiB MTU, as 64 messages of 1 MiB on
  one QP with up to 16 posted at a time; the receiver's memory is compared
  with the sender's at the end.
  Loss values: 0, 0.001, 0.01, 0.02, 0.05, 0.1. Transports: metaroce (4 paths,
  per-path SACK, selective retransmission) and rocev2 (the same engine's
  RoCEv2 profile: one path, go-back-N).
  retained = goodput / the same transport's goodput at loss 0 in this run.)";

constexpr const char* kCollectiveScenario = R"(Default scenario (all in virtual time, deterministic from --seed):
  64 nodes on a two-tier leaf-spine fabric per plane: 8 leaves of 8 hosts and
  8 spines, 1:1 (every leaf has one 400 Gb/s link to every spine); each host
  has one 400 Gb/s NIC per plane, planes 1, 2, 4 and 8 (so 400 Gb/s to 3.2
  Tb/s per host); 1 us per link one way (RTT about 9 us across the spine),
  66 bytes of per-packet wire overhead, 1 MiB of buffer per switch port,
  ECN marking above 100 kB, ECMP hashing the 5-tuple at every leaf; a 64 KiB
  transmit ring per NIC. Random loss applies to every leaf-to-host link, so
  every datagram (data, ACKs, credits) meets it exactly once.
  Transports: metaroce (one endpoint per host over all planes, 4 paths per
  plane, sprayed), rocev2 (the engine's RoCEv2 profile, one endpoint per NIC,
  one path per connection, go-back-N, drop-tail fabric) and rocev2+pfc (the
  same on a lossless fabric: PFC at every switch port, XOFF 256 KiB, XON
  248 KiB per ingress port). Every QP has NCCL's attributes: timeout 20
  (4.3 s) and retry_cnt 7, so loss is repaired by the transports' own
  timers, not the QP's.
  Workloads: allreduce (NCCL's ring: reduce-scatter then all-gather, two
  rings per plane as NCCL duplicates its rings, each rank's chunk sent as two
  or more slices of at most 512 KiB through 8 slots; 64 MiB per rank), alltoall
  (16 MiB per rank, 256 KiB to each peer), incast (every other rank writes
  4 MiB to rank 0). Every reduced element and copied byte is checked.
  busbw is nccl-tests' bus bandwidth: algbw x 2(n-1)/n for allreduce,
  x (n-1)/n for alltoall, and for incast everything that reaches rank 0.
  Without options: every combination of --planes 1,2,4,8, --workload
  allreduce,alltoall, --loss 0,0.01 and the three transports, 48 cases of
  a few seconds to a minute of CPU each; docs/scale.md lists narrower runs.
  The exit status is 1 when a case did not complete with its data intact.)";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Options {
  std::string losses = "0,0.001,0.01,0.02,0.05,0.1";
  std::string transports = "metaroce,rocev2";
  uint16_t paths = 4;
  uint64_t seed = 1;
  uint64_t megabytes = 64;
};

WriteTransferSpec make_spec(const Options& options, Profile profile, double loss) {
  WriteTransferSpec spec;
  spec.rig.endpoint.profile = profile;
  spec.rig.endpoint.paths = options.paths;
  spec.rig.links = options.paths;
  spec.rig.loss = loss;
  spec.rig.seed = options.seed;
  spec.total_bytes = options.megabytes << 20;
  return spec;
}

bool parse_losses(const std::string& text, std::vector<double>& out) {
  for (const std::string& item : split(text)) {
    try {
      size_t used = 0;
      const double value = std::stod(item, &used);
      if (used != item.size() || !(value >= 0 && value < 1)) return false;
      out.push_back(value);
    } catch (const std::exception&) {
      return false;
    }
  }
  return !out.empty();
}

bool parse_transports(const std::string& text, std::vector<std::pair<std::string, Profile>>& out) {
  for (const std::string& item : split(text)) {
    if (item == "metaroce") out.emplace_back(item, Profile::MetaRoCE);
    else if (item == "rocev2") out.emplace_back(item, Profile::RoCEv2);
    else return false;
  }
  return !out.empty();
}

int run_bench(const Options& options) {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Profile>> transports;
  if (!parse_losses(options.losses, losses)) {
    std::fprintf(stderr, "metaroce-sim: --loss wants a comma-separated list of values in [0, 1)\n");
    return 2;
  }
  if (!parse_transports(options.transports, transports)) {
    std::fprintf(stderr, "metaroce-sim: --transport wants a comma-separated list of metaroce, rocev2\n");
    return 2;
  }
  int status = 0;
  for (const auto& transport : transports) {
    const std::string& name = transport.first;
    const Profile profile = transport.second;
    std::map<double, WriteTransferResult> results;
    auto run = [&](double loss) -> const WriteTransferResult& {
      auto it = results.find(loss);
      if (it == results.end()) it = results.emplace(loss, run_write_transfer(make_spec(options, profile, loss))).first;
      return it->second;
    };
    const double baseline = run(0).goodput_gbps;
    for (double loss : losses) {
      const WriteTransferResult& r = run(loss);
      if (!r.completed || !r.data_intact) status = 1;
      nlohmann::ordered_json line = {
          {"transport", name},
          {"paths", profile == Profile::RoCEv2 ? 1 : options.paths},
          {"loss", loss},
          {"goodput_gbps", r.goodput_gbps},
          {"retained", baseline > 0 ? r.goodput_gbps / baseline : 0.0},
          {"fct_p50_us", metaroce::sim::percentile(r.fct_ns, 0.5) / 1000.0},
          {"fct_p99_us", metaroce::sim::percentile(r.fct_ns, 0.99) / 1000.0},
          {"retransmits", r.sender.tx_retransmits},
          {"spurious_retransmits", r.sender.spurious_retransmits},
          {"data_intact", r.completed && r.data_intact},
      };
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  return status;
}

// Goodput after a path fails, and reordering without loss: the figures the
// transport's targets are stated in.
int run_scenarios(const Options& options) {
  int status = 0;
  {
    WriteTransferSpec spec = make_spec(options, Profile::MetaRoCE, 0);
    const metaroce::transport::Time rtt = spec.rig.endpoint.base_rtt_ns;
    const metaroce::transport::Time start = 300'000, length = 400'000;
    spec.sample_interval_ns = rtt / 4;
    spec.setup = [&](metaroce::sim::TwoHostRig& rig) { rig.blackhole(options.paths - 1, start, start + length); };
    const WriteTransferResult r = run_write_transfer(spec);
    const double efficiency = 4096.0 / (4096 + 56 + 66);
    const double capacity = (options.paths - 1) * 100 * efficiency;
    auto bytes_at = [&](metaroce::transport::Time t) {
      uint64_t bytes = 0;
      for (const auto& [when, placed] : r.timeline)
        if (when <= t) bytes = placed;
      return bytes;
    };
    // First whole RTT after which every 5-RTT window of the outage carries
    // at least 90% of what the remaining paths can.
    const metaroce::transport::Time window = 5 * rtt;
    int recovery = -1;
    for (int k = 0; k * rtt + window <= length && recovery < 0; ++k) {
      bool holds = true;
      for (metaroce::transport::Time t = start + k * rtt; t + window <= start + length; t += rtt / 4) {
        holds &= (bytes_at(t + window) - bytes_at(t)) * 8.0 / window >= 0.9 * capacity;
      }
      if (holds) recovery = k;
    }
    const double during = (bytes_at(start + length) - bytes_at(start)) * 8.0 / length;
    if (!r.completed || !r.data_intact || recovery < 0) status = 1;
    nlohmann::ordered_json line = {
        {"scenario", "blackhole"},
        {"paths", options.paths},
        {"blackholed_path", options.paths - 1},
        {"remaining_capacity_gbps", capacity},
        {"goodput_during_gbps", during},
        {"recovery_base_rtts", recovery},
        {"path_failures", r.sender.path_failures},
        {"path_recoveries", r.sender.path_recoveries},
        {"data_intact", r.completed && r.data_intact},
    };
    std::printf("%s\n", line.dump().c_str());
  }
  {
    WriteTransferSpec spec = make_spec(options, Profile::MetaRoCE, 0);
    for (uint16_t i = 0; i < options.paths; ++i) spec.rig.extra_delay_ns.push_back(i * 2'000);
    spec.rig.jitter_ns = 2'000;
    const WriteTransferResult r = run_write_transfer(spec);
    if (!r.completed || !r.data_intact) status = 1;
    nlohmann::ordered_json line = {
        {"scenario", "reorder"},
        {"paths", options.paths},
        {"path_delay_spread_us", (options.paths - 1) * 2.0},
        {"jitter_us", 2.0},
        {"data_packets", r.sender.tx_data_packets},
        {"spurious_retransmits", r.sender.spurious_retransmits},
        {"spurious_fraction",
         static_cast<double>(r.sender.spurious_retransmits) / std::max<uint64_t>(1, r.sender.tx_data_packets)},
        {"goodput_gbps", r.goodput_gbps},
        {"data_intact", r.completed && r.data_intact},
    };
    std::printf("%s\n", line.dump().c_str());
  }
  return status;
}

struct CollectiveOptions {
  uint32_t nodes = 64;
  uint32_t hosts_per_leaf = 8;
  uint32_t spines = 8;
  double oversubscription = 1;
  std::string planes = "1,2,4,8";
  uint32_t rate_gbps = 400;
  std::string workloads = "allreduce,alltoall";
  uint64_t bytes = 0;  // 0 = the workload's default
  std::string losses = "0,0.01";
  std::string transports = "metaroce,rocev2,rocev2+pfc";
  uint16_t paths_per_plane = 4;
  uint32_t channels = 0;  // 0 = kChannelsPerPlane per plane
  uint32_t slot_kib = 512;
  uint32_t slots = 8;
  uint64_t seed = 1;
  uint64_t buffer_kib = 1024;
  uint64_t ecn_kb = 100;
  uint64_t pfc_xoff_kib = 256;
  uint64_t pfc_xon_kib = 248;
  double fail_spine_link_us = -1;  // plane 0, leaf 0, its busiest spine link, from this time on
  double fail_plane_us = -1;       // plane 0, from this time on
  double min_rto_us = 0;           // engine's minimum RTO; 0 = its default (4 x base RTT)
  bool counters = false;           // add every nonzero engine counter, summed over the cluster
  uint64_t time_limit_ms = 1'000;
};

uint64_t default_bytes(metaroce::sim::Workload workload) {
  switch (workload) {
    case metaroce::sim::Workload::AllReduce: return 64ull << 20;
    case metaroce::sim::Workload::AllToAll: return 16ull << 20;
    case metaroce::sim::Workload::Incast: return 4ull << 20;
  }
  return 0;
}

int run_collective_cases(const CollectiveOptions& o) {
  using metaroce::sim::ClusterTransport;
  using metaroce::sim::Workload;
  std::vector<Workload> workloads;
  for (const std::string& item : split(o.workloads)) {
    const auto w = metaroce::sim::parse_workload(item);
    if (!w) {
      std::fprintf(stderr, "metaroce-sim: --workload wants a comma-separated list of allreduce, alltoall, incast\n");
      return 2;
    }
    workloads.push_back(*w);
  }
  std::vector<ClusterTransport> transports;
  for (const std::string& item : split(o.transports)) {
    const auto t = metaroce::sim::parse_cluster_transport(item);
    if (!t) {
      std::fprintf(stderr, "metaroce-sim: --transport wants a comma-separated list of metaroce, rocev2, rocev2+pfc\n");
      return 2;
    }
    transports.push_back(*t);
  }
  std::vector<uint16_t> planes;
  for (const std::string& item : split(o.planes)) {
    try {
      size_t used = 0;
      const unsigned long value = std::stoul(item, &used);
      if (used != item.size() || value < 1 || value > 16) throw std::out_of_range(item);
      planes.push_back(static_cast<uint16_t>(value));
    } catch (const std::exception&) {
      std::fprintf(stderr, "metaroce-sim: --planes wants a comma-separated list of counts in 1..16\n");
      return 2;
    }
  }
  std::vector<double> losses;
  if (workloads.empty() || transports.empty() || planes.empty() || !parse_losses(o.losses, losses)) {
    std::fprintf(stderr, "metaroce-sim: --workload, --transport, --planes and --loss each want at least one value\n");
    return 2;
  }
  int status = 0;
  for (Workload workload : workloads) {
    for (uint16_t plane_count : planes) {
      for (ClusterTransport transport : transports) {
        for (double loss : losses) {
          metaroce::sim::CollectiveSpec spec;
          metaroce::sim::LeafSpineSpec& fabric = spec.cluster.fabric;
          fabric.hosts_per_leaf = o.hosts_per_leaf;
          fabric.leaves = (o.nodes + o.hosts_per_leaf - 1) / o.hosts_per_leaf;
          fabric.spines = o.spines;
          fabric.planes = plane_count;
          fabric.oversubscription = o.oversubscription;
          fabric.link_rate_bps = uint64_t{o.rate_gbps} * 1'000'000'000;
          fabric.buffer_bytes = o.buffer_kib << 10;
          fabric.ecn_threshold_bytes = o.ecn_kb * 1000;
          fabric.pfc_params.xoff_bytes = o.pfc_xoff_kib << 10;
          fabric.pfc_params.xon_bytes = o.pfc_xon_kib << 10;
          fabric.loss = loss;
          spec.cluster.nodes = o.nodes;
          spec.cluster.transport = transport;
          spec.cluster.paths_per_plane = o.paths_per_plane;
          spec.cluster.seed = o.seed;
          spec.cluster.endpoint.min_rto_ns = static_cast<metaroce::transport::Time>(o.min_rto_us * 1000);
          spec.workload = workload;
          spec.bytes = o.bytes ? o.bytes : default_bytes(workload);
          spec.channels = o.channels;
          spec.slot_bytes = o.slot_kib << 10;
          spec.slots = o.slots;
          spec.time_limit_ns = o.time_limit_ms * 1'000'000;
          spec.setup = [&o](metaroce::sim::Cluster& cluster) {
            if (o.fail_spine_link_us >= 0) {
              cluster.sim().at(static_cast<uint64_t>(o.fail_spine_link_us * 1000), [&cluster] {
                metaroce::sim::LeafSpineFabric& net = cluster.fabric();
                net.fail_spine_link(0, 0, net.busiest_spine(0, 0), cluster.sim().now(), UINT64_MAX);
              });
            }
            if (o.fail_plane_us >= 0) {
              // Every link of the plane, the NICs' included: their hosts see
              // the carrier go and tell their engines, as the runtime does.
              const auto at = static_cast<uint64_t>(o.fail_plane_us * 1000);
              cluster.fabric().fail_plane(0, at, UINT64_MAX);
              cluster.sim().at(at, [&cluster] {
                for (uint32_t node = 0; node < cluster.nodes(); ++node) {
                  for (uint16_t rail = 0; rail < cluster.rails(); ++rail) {
                    cluster.host(node, rail).endpoint().set_plane_up(cluster.sim().now(), 0, false);
                    cluster.sim().wake(cluster.node_id(node, rail));
                  }
                }
              });
            }
          };
          nlohmann::ordered_json counters = nlohmann::ordered_json::object();
          if (o.counters) {
            spec.after = [&counters](metaroce::sim::Cluster& cluster) {
              for (const auto& info : metaroce::transport::kEndpointCounterInfo) {
                const uint64_t total = cluster.total(info.value);
                if (total != 0) counters[info.name] = total;
              }
            };
          }
          metaroce::sim::CollectiveResult r;
          try {
            r = metaroce::sim::run_collective(spec);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "metaroce-sim: %s\n", e.what());
            return 2;
          }
          if (!r.data_intact) status = 1;
          nlohmann::ordered_json line = {
              {"transport", metaroce::sim::to_string(transport)},
              {"pfc", transport == ClusterTransport::RoCEv2Pfc},
              {"nodes", o.nodes},
              {"planes", plane_count},
              {"workload", metaroce::sim::to_string(workload)},
              {"bytes", spec.bytes},
              {"loss", loss},
              {"completion_us",
               r.completed ? nlohmann::ordered_json(r.completion_ns / 1000.0) : nlohmann::ordered_json()},
              {"busbw_gbps", r.busbw_gbps},
              {"fct_p50_us", metaroce::sim::percentile(r.fct_ns, 0.5) / 1000.0},
              {"fct_p99_us", metaroce::sim::percentile(r.fct_ns, 0.99) / 1000.0},
              {"retransmits", r.retransmits},
              {"pause_frames", r.fabric.pause_frames},
              {"max_queue_bytes", r.fabric.max_switch_queue_bytes},
              {"connections", r.connections},
              {"data_intact", r.data_intact},
          };
          if (o.fail_spine_link_us >= 0) line["failed_spine_link_at_us"] = o.fail_spine_link_us;
          if (o.fail_plane_us >= 0) line["failed_plane_at_us"] = o.fail_plane_us;
          if (o.min_rto_us > 0) line["min_rto_us"] = o.min_rto_us;
          if (o.counters) line["counters"] = counters;
          std::printf("%s\n", line.dump().c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  return status;
}

int run_demo(Options options) {
  const double loss = 0.01;
  std::printf(
      "MetaRoCE demo (simulated network, virtual time): %llu MiB of RDMA WRITE over %u paths of 100 Gb/s,\n"
      "random loss %.0f%% on every path, compared with the RoCEv2 go-back-N profile of the same engine.\n\n",
      static_cast<unsigned long long>(options.megabytes), options.paths, loss * 100);
  std::printf("%-10s %6s %6s %14s %10s %12s %10s\n", "transport", "paths", "loss", "goodput_gbps", "retained",
              "retransmits", "data_ok");
  int status = 0;
  for (const auto& transport : {std::pair{"metaroce", Profile::MetaRoCE}, std::pair{"rocev2", Profile::RoCEv2}}) {
    const char* name = transport.first;
    const Profile profile = transport.second;
    const WriteTransferResult clean = run_write_transfer(make_spec(options, profile, 0));
    const WriteTransferResult lossy = run_write_transfer(make_spec(options, profile, loss));
    for (const auto* r : {&clean, &lossy}) {
      const bool ok = r->completed && r->data_intact;
      if (!ok) status = 1;
      std::printf("%-10s %6u %5.1f%% %14.1f %10.3f %12llu %10s\n", name,
                  profile == Profile::RoCEv2 ? 1u : options.paths, r == &clean ? 0.0 : loss * 100, r->goodput_gbps,
                  clean.goodput_gbps > 0 ? r->goodput_gbps / clean.goodput_gbps : 0.0,
                  static_cast<unsigned long long>(r->sender.tx_retransmits), ok ? "yes" : "NO");
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metaroce-sim: the MetaRoCE engine on a simulated multipath network"};
  app.require_subcommand(1);
  Options options;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--paths", options.paths, "parallel paths (metaroce)")->check(CLI::Range(1, 64));
    sub->add_option("--seed", options.seed, "simulation seed");
    sub->add_option("--megabytes", options.megabytes, "MiB to transfer")->check(CLI::Range(1, 4096));
  };
  CLI::App* bench = app.add_subcommand("bench", "print one JSON line per transport and loss");
  bench->footer(kScenario);
  bench->add_option("--loss", options.losses, "comma-separated loss probabilities");
  bench->add_option("--transport", options.transports, "comma-separated: metaroce,rocev2");
  add_common(bench);
  CLI::App* demo = app.add_subcommand("demo", "MetaRoCE vs RoCEv2 at 1% loss, as a table");
  add_common(demo);
  CLI::App* scenarios = app.add_subcommand("scenarios", "one path blackholed mid-transfer; reordering across paths");
  add_common(scenarios);
  CollectiveOptions co;
  CLI::App* collective =
      app.add_subcommand("collective", "collectives on a multiplane leaf-spine cluster, one JSON line per case");
  collective->footer(kCollectiveScenario);
  collective->add_option("--nodes", co.nodes, "hosts taking part")->check(CLI::Range(2, 4096));
  collective->add_option("--hosts-per-leaf", co.hosts_per_leaf, "hosts per leaf switch")->check(CLI::Range(1, 512));
  collective->add_option("--spines", co.spines, "spine switches per plane")->check(CLI::Range(1, 512));
  collective->add_option("--oversubscription", co.oversubscription, "a leaf's host capacity over its spine capacity")
      ->check(CLI::Range(0.01, 100.0));
  collective->add_option("--planes", co.planes, "comma-separated plane counts");
  collective->add_option("--rate-gbps", co.rate_gbps, "NIC (and leaf port) rate per plane")->check(CLI::Range(1, 3200));
  collective->add_option("--workload", co.workloads, "comma-separated: allreduce,alltoall,incast");
  collective->add_option("--bytes", co.bytes, "bytes per rank (0 = 64 MiB allreduce, 16 MiB alltoall, 4 MiB incast)");
  collective->add_option("--loss", co.losses, "comma-separated loss probabilities (every leaf-to-host link)");
  collective->add_option("--transport", co.transports, "comma-separated: metaroce,rocev2,rocev2+pfc");
  collective->add_option("--paths-per-plane", co.paths_per_plane, "metaroce paths in each plane")
      ->check(CLI::Range(1, 64));
  collective->add_option("--seed", co.seed, "simulation seed");
  collective->add_option("--channels", co.channels, "allreduce rings (0 = two per plane, as NCCL duplicates its rings)")
      ->check(CLI::Range(0, 64));
  collective->add_option("--slot-kib", co.slot_kib, "allreduce FIFO slot: the largest slice")
      ->check(CLI::Range(4, 65536));
  collective->add_option("--slots", co.slots, "allreduce FIFO slots per ring and rank")->check(CLI::Range(1, 64));
  collective->add_option("--buffer-kib", co.buffer_kib, "buffer per switch port");
  collective->add_option("--ecn-kb", co.ecn_kb, "ECN marking threshold (kB of egress backlog)");
  collective->add_option("--pfc-xoff-kib", co.pfc_xoff_kib, "PFC pause threshold per ingress port (rocev2+pfc)");
  collective->add_option("--pfc-xon-kib", co.pfc_xon_kib, "PFC resume threshold per ingress port (rocev2+pfc)");
  collective->add_option("--fail-spine-link-us", co.fail_spine_link_us,
                         "fail the busiest link between leaf 0 and a spine of plane 0 (both ways) from this time on");
  collective->add_option("--fail-plane-us", co.fail_plane_us,
                         "fail every link of plane 0 from this time on (the NICs see it and tell their engines)");
  collective->add_option("--time-limit-ms", co.time_limit_ms, "virtual time limit per case")
      ->check(CLI::Range(1, 100'000));
  collective->add_option("--min-rto-us", co.min_rto_us, "the engines' minimum RTO (0 = theirs: 4 x 8 us base RTT)")
      ->check(CLI::Range(0.0, 100'000.0));
  collective->add_flag("--counters", co.counters,
                       "add \"counters\": every nonzero engine counter summed over the cluster's endpoints");
  CLI11_PARSE(app, argc, argv);
  if (bench->parsed()) return run_bench(options);
  if (collective->parsed()) return run_collective_cases(co);
  if (scenarios->parsed()) return run_scenarios(options);
  return run_demo(options);
}
