// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A compliance case: an id that docs/spec.md cites next to the MUSTs it
// checks ("[C-7b]"), a one-line title, and a function of named checks.
// Cases register themselves (COMPLIANCE_CASE) and run in phases: stimulus
// cases first, then the workload cases that make the target send every kind
// of packet, then the cases that judge everything the target sent in the
// run (observer.h).
#pragma once

#include <set>
#include <string>
#include <vector>

namespace metaroce::compliance {

class Session;

enum class Phase : int {
  Stimulus = 0,  // crafted packets in; packets, counters and memory out
  Workload = 1,  // the target sends every kind of packet; its own checks
  Observed = 2,  // judges every datagram the target sent during the run
};

inline constexpr const char* kSkipCheck = "skip";

struct CheckResult {
  std::string name;
  bool ok = false;
  bool known_deviation = false;  // listed with --known-deviation
  std::string detail;
};

class CaseContext {
 public:
  CaseContext(Session& session, std::string case_id, const std::set<std::string>& known_deviations)
      : session_(session), case_id_(std::move(case_id)), known_(known_deviations) {}

  Session& session() { return session_; }
  const std::string& id() const { return case_id_; }

  // Records a named check of this case; `detail` says what was wrong.
  // Returns ok.
  bool check(const std::string& name, bool ok, const std::string& detail = {});
  // The case cannot run here (a missing privilege, a target that cannot
  // be made to do what it needs); `why` is printed.
  void skip(const std::string& why) { results_.push_back({kSkipCheck, true, false, why}); }
  const std::vector<CheckResult>& results() const { return results_; }

 private:
  Session& session_;
  std::string case_id_;
  const std::set<std::string>& known_;
  std::vector<CheckResult> results_;
};

struct CaseDef {
  const char* id;     // "C-7b"
  const char* title;  // what the case checks, one line
  Phase phase;
  void (*run)(CaseContext&);
};

std::vector<CaseDef>& registered_cases();

struct CaseRegistration {
  explicit CaseRegistration(const CaseDef& def) { registered_cases().push_back(def); }
};

#define COMPLIANCE_CASE(function, case_id, phase, title)                                                \
  static void function(::metaroce::compliance::CaseContext&);                                           \
  static const ::metaroce::compliance::CaseRegistration function##_registration{                        \
      ::metaroce::compliance::CaseDef{case_id, title, ::metaroce::compliance::Phase::phase, function}}; \
  static void function(::metaroce::compliance::CaseContext& c)

}  // namespace metaroce::compliance
