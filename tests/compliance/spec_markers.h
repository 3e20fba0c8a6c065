// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The MUSTs of docs/spec.md and the cases that check them. Every MUST (or
// MUST NOT) is followed, before the next MUST and within its paragraph,
// list item or table row, by a marker naming the cases that check it:
// "[C-7b]" or "[C-4.2a, C-7c]". The RFC 2119 sentence that defines the key
// words is not a requirement and carries none.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace metaroce::compliance {

struct MustStatement {
  size_t line = 0;      // 1-based line of the MUST
  std::string excerpt;  // the words around it
  std::vector<std::string> cases;
};

struct SpecMarkers {
  std::vector<MustStatement> musts;
  std::vector<std::string> problems;  // a MUST without a marker, a marker after no MUST
};

SpecMarkers read_spec_markers(const std::string& text);

// Problems between the spec's markers and the suite's cases: a marker that
// names no case of the suite, a case that no MUST names.
std::vector<std::string> coverage_problems(const SpecMarkers& markers, const std::vector<std::string>& case_ids);

}  // namespace metaroce::compliance
