// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroced: the MetaRoCE control plane (see server.h). Logs go to stderr,
// which systemd hands to the journal.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config.h"
#include "server.h"

namespace {

constexpr const char* kDefaultConfig = "/etc/metaroce/metaroced.toml";

}  // namespace

int main(int argc, char** argv) {
  using namespace metaroce::daemon;
  CLI::App app{"metaroced: MetaRoCE control plane (source ports, path discovery, congestion policy, stats)"};
  std::string config_path;
  std::string check_path;
  std::string socket_override;
  std::string level_override;
  app.add_option("-c,--config", config_path, std::string("config file (default ") + kDefaultConfig + " if it exists)");
  app.add_option("--check-config", check_path, "check a config file, print its errors with line numbers, and exit");
  app.add_option("--socket", socket_override, "control socket path (overrides the config)");
  app.add_option("--log-level", level_override, "trace|debug|info|warn|error|critical|off (overrides the config)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  CLI11_PARSE(app, argc, argv);

  if (!check_path.empty()) {
    const ConfigResult r = load_config(check_path);
    if (!r.config) {
      std::fputs(format_errors(r, check_path).c_str(), stderr);
      return 1;
    }
    std::printf("%s: OK (%zu traffic class(es))\n", check_path.c_str(), r.config->classes.size());
    return 0;
  }

  // Under systemd the journal adds its own timestamps.
  auto logger = spdlog::stderr_logger_st("metaroced");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(std::getenv("JOURNAL_STREAM") ? "<%l> %v" : "%Y-%m-%d %H:%M:%S.%e %l: %v");

  Config config;
  if (config_path.empty() && ::access(kDefaultConfig, F_OK) == 0) config_path = kDefaultConfig;
  if (!config_path.empty()) {
    ConfigResult r = load_config(config_path);
    if (!r.config) {
      std::fputs(format_errors(r, config_path).c_str(), stderr);
      return 1;
    }
    config = std::move(*r.config);
  } else {
    config.classes["default"] = {};
  }
  if (!socket_override.empty()) config.socket_path = socket_override;
  spdlog::set_level(spdlog::level::from_str(level_override.empty() ? config.log_level : level_override));
  if (config.socket_path.empty() || config.socket_path.size() > 107) {
    spdlog::critical("socket path must be 1..107 bytes");
    return 1;
  }

  Server server(std::move(config), config_path);
  std::string error;
  if (!server.start(error)) {
    spdlog::critical("{}", error);
    return 1;
  }
  return server.run();
}
