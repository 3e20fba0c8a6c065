// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce-sim: runs the real transport engine on the simulated network.
//   bench  one JSON object per line per (transport, loss)
//   demo   MetaRoCE against the RoCEv2 profile under loss, as a table
//   scenarios  blackhole recovery and reordering figures, as JSON lines
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

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
        {"spurious_fraction", static_cast<double>(r.sender.spurious_retransmits) / std::max<uint64_t>(1, r.sender.tx_data_packets)},
        {"goodput_gbps", r.goodput_gbps},
        {"data_intact", r.completed && r.data_intact},
    };
    std::printf("%s\n", line.dump().c_str());
  }
  return status;
}

int run_demo(Options options) {
  const double loss = 0.01;
  std::printf("MetaRoCE demo (simulated network, virtual time): %llu MiB of RDMA WRITE over %u paths of 100 Gb/s,\n"
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
                  profile == Profile::RoCEv2 ? 1u : options.paths, r == &clean ? 0.0 : loss * 100,
                  r->goodput_gbps, clean.goodput_gbps > 0 ? r->goodput_gbps / clean.goodput_gbps : 0.0,
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
  CLI11_PARSE(app, argc, argv);
  if (bench->parsed()) return run_bench(options);
  if (scenarios->parsed()) return run_scenarios(options);
  return run_demo(options);
}
