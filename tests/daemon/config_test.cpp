// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "config.h"

namespace metaroce::daemon {
namespace {

std::string packaged_config() {
  std::ifstream in(METAROCE_SOURCE_ROOT "/packaging/metaroced.toml");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The one error of `text`, which must fail.
ConfigError only_error(std::string_view text) {
  const ConfigResult r = parse_config(text, "t.toml");
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.errors.size(), 1u) << format_errors(r, "t.toml");
  return r.errors.empty() ? ConfigError{} : r.errors.front();
}

TEST(Config, PackagedDefaultParsesToTheBuiltInDefaults) {
  const std::string text = packaged_config();
  ASSERT_FALSE(text.empty());
  const ConfigResult r = parse_config(text, "metaroced.toml");
  ASSERT_TRUE(r.config) << format_errors(r, "metaroced.toml");
  const Config defaults;
  EXPECT_EQ(r.config->log_level, defaults.log_level);
  EXPECT_EQ(r.config->socket_path, defaults.socket_path);
  EXPECT_EQ(r.config->ports.home_first, wire::kHomePortBase);
  EXPECT_EQ(r.config->ports.source_first, defaults.ports.source_first);
  EXPECT_EQ(r.config->ports.block_size, defaults.ports.block_size);
  EXPECT_EQ(r.config->discovery.timeout_ms, defaults.discovery.timeout_ms);
  ASSERT_EQ(r.config->classes.count("default"), 1u);
  EXPECT_EQ(r.config->classes.at("default"), ctl::Policy{});
}

TEST(Config, EmptyFileIsAllDefaults) {
  const ConfigResult r = parse_config("", "t");
  ASSERT_TRUE(r.config);
  EXPECT_EQ(r.config->classes.size(), 1u);
}

TEST(Config, ReadsEverySection) {
  const ConfigResult r = parse_config(R"(
[daemon]
log_level = "debug"
socket = "/tmp/x.sock"
stats_interval_ms = 250
planes = ["eth0", "eth1"]
[ports]
source_first = 10000
source_count = 1024
block_size = 16
paths_per_connection = 8
[discovery]
enabled = false
max_ttl = 4
[devices.mr0]
busy_poll_us = 50
progress_threads = 3
planes = ["eth0", "eth1"]
[devices.mr1]
[congestion.default]
target_delay_us = 500
[congestion.bulk]
ecn_gain = 0.5
additive_increase_bytes = 8192
delay_backoff = 0.5
min_window_bytes = 4096
max_window_bytes = 1048576
initial_window_bytes = 65536
rate_hint_utilization = 0.9
)",
                                      "t");
  ASSERT_TRUE(r.config) << format_errors(r, "t");
  const Config& c = *r.config;
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.socket_path, "/tmp/x.sock");
  EXPECT_EQ(c.stats_interval_ms, 250u);
  EXPECT_EQ(c.planes, (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(c.ports.source_first, 10000);
  EXPECT_EQ(c.ports.block_size, 16);
  EXPECT_FALSE(c.discovery.enabled);
  EXPECT_EQ(c.discovery.max_ttl, 4u);
  EXPECT_EQ(c.devices.at("mr0").busy_poll_us, 50u);
  ASSERT_EQ(c.devices.count("mr1"), 1u);
  EXPECT_FALSE(c.devices.at("mr1").busy_poll_us);
  EXPECT_EQ(c.devices.at("mr0").progress_threads, 3u);
  EXPECT_FALSE(c.devices.at("mr1").progress_threads);
  EXPECT_EQ(c.devices.at("mr0").planes, (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_TRUE(c.devices.at("mr1").planes.empty());
  EXPECT_EQ(c.classes.at("default").target_delay_ns, 500'000u);
  const ctl::Policy& bulk = c.classes.at("bulk");
  EXPECT_EQ(bulk.ecn_gain, 0.5);
  EXPECT_EQ(bulk.additive_increase_bytes, 8192u);
  EXPECT_EQ(bulk.delay_backoff, 0.5);
  EXPECT_EQ(bulk.min_window_bytes, 4096u);
  EXPECT_EQ(bulk.max_window_bytes, 1048576u);
  EXPECT_EQ(bulk.initial_window_bytes, 65536u);
  EXPECT_EQ(bulk.rate_hint_utilization, 0.9);
  EXPECT_FALSE(bulk.target_delay_ns);
}

TEST(Config, UnknownKeysAreErrorsWithTheirLine) {
  ConfigError e = only_error("[daemon]\nlog_level = \"info\"\nlog_levle = \"debug\"\n");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("unknown key 'log_levle' in [daemon]"), std::string::npos) << e.message;
  e = only_error("\n\n[nonsense]\n");
  EXPECT_EQ(e.line, 3u);
  e = only_error("[congestion.bulk]\n\ntarget_delay = 5\n");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("congestion.bulk"), std::string::npos);
}

TEST(Config, TypeAndRangeErrorsNameTheKeyAndLine) {
  ConfigError e = only_error("[ports]\nblock_size = \"big\"\n");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("block_size"), std::string::npos);
  e = only_error("[discovery]\n\n\nmax_ttl = 0\n");
  EXPECT_EQ(e.line, 4u);
  EXPECT_NE(e.message.find("out of range"), std::string::npos);
  e = only_error("[congestion.x]\necn_gain = 0\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[congestion.x]\ndelay_backoff = 1.0\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[daemon]\nlog_level = \"chatty\"\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[daemon]\nsocket = \"relative.sock\"\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[daemon]\nplanes = [\"eth0\", \"a/b\"]\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("congestion = 3\n");
  EXPECT_EQ(e.line, 1u);
  e = only_error("[congestion]\nbulk = 3\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[devices.mr0]\n\nbusy_poll_us = 1000001\n");
  EXPECT_EQ(e.line, 3u);
  EXPECT_NE(e.message.find("out of range"), std::string::npos) << e.message;
  for (const char* n : {"0", "17"}) {
    e = only_error(std::string("[devices.mr0]\nbusy_poll_us = 5\nprogress_threads = ") + n + "\n");
    EXPECT_EQ(e.line, 3u);
    EXPECT_NE(e.message.find(std::string("'progress_threads' = ") + n + " is out of range [1, 16]"), std::string::npos)
        << e.message;
  }
  e = only_error("[devices.mr0]\nprogress_threads = \"4\"\n");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("'progress_threads' must be an integer"), std::string::npos) << e.message;
  e = only_error("[devices.mr0]\nbusy_pol_us = 5\n");
  EXPECT_NE(e.message.find("unknown key 'busy_pol_us' in [devices.mr0]"), std::string::npos) << e.message;
  e = only_error("[devices.mr0]\nplanes = [\"eth0\", \"eth1\", \"eth0\"]\n");
  EXPECT_NE(e.message.find("names eth0 twice"), std::string::npos) << e.message;
  e = only_error("[devices.mr0]\nplanes = [\"e0\", \"e1\", \"e2\", \"e3\", \"e4\", \"e5\", \"e6\", \"e7\", \"e8\"]\n");
  EXPECT_NE(e.message.find("at most 8 planes"), std::string::npos) << e.message;
  e = only_error("[devices.mr0]\nplanes = \"eth0\"\n");
  EXPECT_EQ(e.line, 2u);
  e = only_error("[devices]\nmr0 = 5\n");
  EXPECT_EQ(e.line, 2u);
}

TEST(Config, InconsistentValuesAreErrors) {
  EXPECT_NE(only_error("[ports]\nsource_first = 4800\n").message.find("overlaps"), std::string::npos);
  EXPECT_NE(only_error("[ports]\nsource_first = 65000\nsource_count = 1000\n").message.find("past 65535"),
            std::string::npos);
  EXPECT_NE(only_error("[ports]\nblock_size = 64\nsource_count = 32\n").message.find("block_size"), std::string::npos);
  EXPECT_NE(only_error("[congestion.default]\nmin_window_bytes = 10\nmax_window_bytes = 5\n").message.find("exceeds"),
            std::string::npos);
}

TEST(Config, SyntaxErrorsHaveALine) {
  const ConfigError e = only_error("[daemon]\nlog_level = \"info\"\nstats_interval_ms = \n");
  EXPECT_EQ(e.line, 3u);
}

TEST(Config, EveryErrorIsReportedInLineOrder) {
  const ConfigResult r = parse_config("[daemon]\nfoo = 1\n[ports]\nbar = 2\nblock_size = 0\n", "t");
  ASSERT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].line, 2u);
  EXPECT_EQ(r.errors[1].line, 4u);
  EXPECT_EQ(r.errors[2].line, 5u);
  EXPECT_EQ(format_errors(r, "t").substr(0, 5), "t:2: ");
}

TEST(Config, UnreadableFileIsAnError) {
  const ConfigResult r = load_config("/nonexistent/metaroced.toml");
  ASSERT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 0u);
}

}  // namespace
}  // namespace metaroce::daemon
