// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The compliance suite's side-channel request parser
// (tests/compliance/control_protocol.h), which metaroce-compliance-target
// runs on every line it is sent: it must never crash or throw, refuse with a
// reason, and what it accepts must re-encode to a line that parses to the
// same request.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace control = metaroce::compliance::control;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  std::string error;
  const std::optional<control::Request> r = control::parse_request(line, error);
  if (!r) {
    if (error.empty()) std::abort();
    return 0;
  }
  std::string again_error;
  const std::optional<control::Request> again = control::parse_request(control::encode_request(*r), again_error);
  if (!again || !(*again == *r)) std::abort();
  return 0;
}
