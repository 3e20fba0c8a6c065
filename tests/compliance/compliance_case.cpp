// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "compliance_case.h"

namespace metaroce::compliance {

std::vector<CaseDef>& registered_cases() {
  static std::vector<CaseDef> cases;
  return cases;
}

bool CaseContext::check(const std::string& name, bool ok, const std::string& detail) {
  const bool known = known_.count(case_id_ + "/" + name) != 0;
  results_.push_back({name, ok, known, ok ? std::string() : detail});
  return ok;
}

}  // namespace metaroce::compliance
