// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The control-protocol decoder (include/metaroce/ctl.h) on arbitrary bytes:
// it must never crash or throw, and a message it accepts must re-encode to
// one that decodes to the same type and body (what the daemon and the
// provider forward or store stays valid).
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "metaroce/ctl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ctl = metaroce::ctl;
  std::string error;
  const std::optional<ctl::Message> m = ctl::decode(std::span<const uint8_t>(data, size), error);
  if (!m) {
    if (error.empty()) std::abort();
    return 0;
  }
  const std::string again = ctl::encode(m->body);
  std::string error2;
  const std::optional<ctl::Message> m2 =
      ctl::decode(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(again.data()), again.size()), error2);
  // Re-encoding can only grow a message by escaping invalid UTF-8.
  if (!m2 && again.size() <= ctl::kMaxMessageBytes) std::abort();
  if (m2 && (m2->type != m->type)) std::abort();
  if (m->type == ctl::Type::Policy || m->type == ctl::Type::LeaseOk) {
    ctl::Policy p;
    if (!ctl::policy_from_json(m->body["policy"], p, error)) std::abort();
  }
  return 0;
}
