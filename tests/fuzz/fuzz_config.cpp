// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroced's config parser on arbitrary text: it must never crash or throw,
// must either accept the text or report at least one error, and what it
// accepts must satisfy the invariants the daemon relies on.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::daemon;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ConfigResult r = parse_config(text, "fuzz.toml");
  if (r.config.has_value() == !r.errors.empty()) std::abort();
  if (!r.config) return 0;
  const Config& c = *r.config;
  const PortsConfig& p = c.ports;
  if (!c.classes.count("default")) std::abort();
  if (p.block_size == 0 || p.block_size > p.source_count) std::abort();
  if (p.paths_per_connection > p.block_size) std::abort();
  if (uint32_t{p.home_first} + p.home_count > 65536 || uint32_t{p.source_first} + p.source_count > 65536) std::abort();
  if (p.home_first < uint32_t{p.source_first} + p.source_count &&
      p.source_first < uint32_t{p.home_first} + p.home_count)
    std::abort();
  for (const auto& [name, policy] : c.classes) {
    if (policy.ecn_gain && !(*policy.ecn_gain > 0 && *policy.ecn_gain <= 1)) std::abort();
    if (policy.delay_backoff && !(*policy.delay_backoff > 0 && *policy.delay_backoff < 1)) std::abort();
  }
  return 0;
}
