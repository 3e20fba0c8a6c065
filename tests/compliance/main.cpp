// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce-compliance: the packet-level conformance suite of docs/spec.md.
// It plays the remote endpoint of a target — any implementation reachable
// over UDP whose driver speaks the side channel of control_protocol.h — by
// sending crafted datagrams and judging what comes back: packets, counters
// and memory. Each case checks the MUSTs whose markers in docs/spec.md name
// it; --spec checks that every MUST has a case and every case a MUST.
//
//   metaroce-compliance --spec docs/spec.md --target 127.0.0.1:5000
//   metaroce-compliance --spec docs/spec.md --launch build/tests/compliance/metaroce-compliance-target
//   metaroce-compliance --spec docs/spec.md --check-spec
//
// Output: one line per case (PASS, FAIL, XFAIL for a failure listed with
// --known-deviation, SKIP), the failed checks under it, then the counts.
// Exit status 0 when nothing failed unexpectedly, 1 otherwise, 77 when the
// target cannot be started or reached with --launch.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "compliance_case.h"
#include "control_client.h"
#include "observer.h"
#include "session.h"
#include "spec_markers.h"

namespace metaroce::compliance {
namespace {

constexpr int kSkipStatus = 77;
constexpr auto kLaunchTimeout = std::chrono::seconds(30);
constexpr auto kExitTimeout = std::chrono::seconds(10);

// Orders ids as their numbers read: C-1.2a < C-1.10a < C-7b.
std::vector<int> id_key(const std::string& id) {
  std::vector<int> key;
  int number = -1;
  for (const char ch : id) {
    if (ch >= '0' && ch <= '9') {
      number = (number < 0 ? 0 : number * 10) + (ch - '0');
    } else {
      if (number >= 0) key.push_back(number);
      number = -1;
      if (ch >= 'a' && ch <= 'z') key.push_back(1000 + ch);
    }
  }
  if (number >= 0) key.push_back(number);
  return key;
}

// A target started with --launch: its stdout's first line names the side
// channel ("control ADDRESS PORT").
struct Launched {
  pid_t pid = -1;
  std::string address;
  uint16_t port = 0;
};

std::optional<Launched> launch(const std::vector<std::string>& command, std::string& why) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    why = "pipe failed";
    return std::nullopt;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    why = "fork failed";
    return std::nullopt;
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  const auto deadline = Clock::now() + kLaunchTimeout;
  while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) break;
    char chunk[256];
    const ssize_t n = read(out[0], chunk, sizeof chunk);
    if (n <= 0) break;
    line.append(chunk, static_cast<size_t>(n));
  }
  close(out[0]);
  std::istringstream words(line);
  std::string keyword;
  Launched l;
  l.pid = pid;
  unsigned port = 0;
  if (!(words >> keyword >> l.address >> port) || keyword != "control" || port == 0 || port > 65535) {
    why = "the target did not announce its side channel (\"control ADDRESS PORT\"): " + command[0];
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return std::nullopt;
  }
  l.port = static_cast<uint16_t>(port);
  return l;
}

void reap(pid_t pid) {
  const auto deadline = Clock::now() + kExitTimeout;
  for (int round = 0; round < 1000 && Clock::now() < deadline; ++round) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(10'000);  // bounded: the target exits when its side channel closes
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

bool split_host_port(const std::string& text, std::string& host, uint16_t& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const unsigned long p = std::strtoul(text.c_str() + colon + 1, nullptr, 10);
  if (p == 0 || p > 65535) return false;
  port = static_cast<uint16_t>(p);
  return true;
}

// The largest UDP payload the route to the target carries unfragmented.
size_t max_udp_payload(const sockaddr_storage& target) {
  const int fd = socket(target.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 65507;
  int mtu = 0;
  socklen_t length = sizeof mtu;
  const bool v4 = target.ss_family == AF_INET;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&target), address_length(target)) != 0 ||
      getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &mtu, &length) != 0)
    mtu = 65535;
  close(fd);
  return static_cast<size_t>(mtu) - (v4 ? 20 : 40) - 8;
}

struct Outcome {
  enum Kind { Pass, Fail, KnownDeviation, Skip } kind = Pass;
  std::vector<CheckResult> failed;
};

int check_spec_only(const SpecMarkers& markers, const std::vector<std::string>& ids) {
  const std::vector<std::string> problems = coverage_problems(markers, ids);
  for (const std::string& p : problems) std::printf("SPEC %s\n", p.c_str());
  std::printf("compliance: %zu MUSTs in docs/spec.md, %zu cases: %s\n", markers.musts.size(), ids.size(),
              problems.empty() ? "every MUST has a case and every case a MUST" : "markers incomplete");
  return problems.empty() ? 0 : 1;
}

}  // namespace
}  // namespace metaroce::compliance

int main(int argc, char** argv) {
  using namespace metaroce::compliance;
  CLI::App app{"MetaRoCE v0.2 packet-level compliance suite (docs/spec.md)"};
  std::string spec_path;
  std::string target_text;
  std::vector<std::string> launch_command;
  std::string local_ip;
  std::vector<std::string> only;
  std::vector<std::string> known_list;
  bool check_spec = false;
  bool list = false;
  unsigned quiet_ms = 40;
  unsigned reply_ms = 2000;
  app.add_option("--spec", spec_path, "docs/spec.md, to check that every MUST has a case");
  app.add_flag("--check-spec", check_spec, "only check the spec's case markers");
  app.add_option("--target", target_text, "the target's side channel, ADDRESS:PORT");
  app.add_option("--launch", launch_command, "start this target program and use its side channel")->expected(1, -1);
  app.add_option("--local-address", local_ip, "the suite's address (default: the target's)");
  app.add_option("--case", only, "run only cases whose id starts with this");
  app.add_option("--known-deviation", known_list,
                 "CASE/CHECK: a failure of this check is a known deviation of the target (XFAIL)");
  app.add_option("--quiet-ms", quiet_ms, "how long to listen for a reaction that must not come")
      ->check(CLI::Range(1u, 10'000u));
  app.add_option("--reply-ms", reply_ms, "how long a required response may take")->check(CLI::Range(10u, 60'000u));
  app.add_flag("--list", list, "list the cases");
  CLI11_PARSE(app, argc, argv);

  std::vector<CaseDef> cases = registered_cases();
  std::sort(cases.begin(), cases.end(), [](const CaseDef& a, const CaseDef& b) {
    if (a.phase != b.phase) return a.phase < b.phase;
    return id_key(a.id) < id_key(b.id);
  });
  std::vector<std::string> ids;
  for (const CaseDef& d : cases) ids.push_back(d.id);
  if (list) {
    for (const CaseDef& d : cases) std::printf("%-8s %s\n", d.id, d.title);
    return 0;
  }

  std::optional<SpecMarkers> markers;
  if (!spec_path.empty()) {
    std::ifstream in(spec_path);
    if (!in) {
      std::fprintf(stderr, "metaroce-compliance: cannot read %s\n", spec_path.c_str());
      return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    markers = read_spec_markers(text.str());
  }
  if (check_spec) {
    if (!markers) {
      std::fprintf(stderr, "metaroce-compliance: --check-spec needs --spec\n");
      return 1;
    }
    return check_spec_only(*markers, ids);
  }

  std::optional<Launched> launched;
  std::string control_host;
  uint16_t control_port = 0;
  if (!launch_command.empty()) {
    std::string why;
    launched = launch(launch_command, why);
    if (!launched) {
      std::printf("SKIP: %s\n", why.c_str());
      return kSkipStatus;
    }
    control_host = launched->address;
    control_port = launched->port;
  } else if (!split_host_port(target_text, control_host, control_port)) {
    std::fprintf(stderr, "metaroce-compliance: give --target ADDRESS:PORT or --launch PROGRAM\n");
    return 1;
  }

  int status = 0;
  {
    std::string error;
    LineChannel channel = connect_line_channel(control_host, control_port, control::kMaxLineBytes, error);
    if (!channel.valid()) {
      std::fprintf(stderr, "metaroce-compliance: %s\n", error.c_str());
      if (launched) reap(launched->pid);
      return launched ? kSkipStatus : 1;
    }
    ControlClient control(std::move(channel));
    TargetInfo info;
    try {
      info = control.hello();
    } catch (const CaseAbort& e) {
      std::fprintf(stderr, "metaroce-compliance: %s\n", e.what());
      if (launched) reap(launched->pid);
      return 1;
    }
    if (info.security != "integrity") {
      std::fprintf(stderr, "metaroce-compliance: the target runs in %s mode; the suite needs integrity mode\n",
                   info.security.c_str());
      if (launched) reap(launched->pid);
      return 1;
    }
    sockaddr_storage target_home;
    if (!make_address(info.address, info.home_port, target_home)) {
      std::fprintf(stderr, "metaroce-compliance: the target's address %s is not an IP address\n", info.address.c_str());
      if (launched) reap(launched->pid);
      return 1;
    }
    std::random_device random;
    uint32_t epoch = 0;
    while (epoch == 0) epoch = random();
    std::unique_ptr<WirePeer> peer =
        WirePeer::open(local_ip.empty() ? info.address : local_ip, target_home, epoch, error);
    if (!peer) {
      std::fprintf(stderr, "metaroce-compliance: %s\n", error.c_str());
      if (launched) reap(launched->pid);
      return 1;
    }
    Observer observer;
    observer.expect({info.home_port, epoch, 0, max_udp_payload(target_home)});
    Timing timing;
    timing.quiet = std::chrono::milliseconds(quiet_ms);
    timing.reply = std::chrono::milliseconds(reply_ms);
    std::printf("target %s home port %u, mtu %u, %u paths; suite home port %u, epoch 0x%08x\n", info.address.c_str(),
                info.home_port, info.mtu, info.paths, peer->home_port(), epoch);
    std::optional<Session> made;
    try {
      made.emplace(control, std::move(peer), observer, info, timing);
    } catch (const CaseAbort& e) {
      std::fprintf(stderr, "metaroce-compliance: the target cannot connect a QP to the suite: %s\n", e.what());
      if (launched) reap(launched->pid);
      return 1;
    }
    Session& session = *made;
    const std::set<std::string> known(known_list.begin(), known_list.end());
    std::set<std::string> known_used;

    size_t passed = 0, failed = 0, deviations = 0, skipped = 0;
    std::map<std::string, size_t> findings_at_end;
    std::map<std::string, Outcome> outcomes;
    for (const CaseDef& d : cases) {
      if (!only.empty() && std::none_of(only.begin(), only.end(),
                                        [&](const std::string& p) { return std::string(d.id).starts_with(p); }))
        continue;
      CaseContext context(session, d.id, known);
      session.reset_policies();
      try {
        session.settle();
        d.run(context);
      } catch (const CaseAbort& e) {
        context.check("completed", false, e.what());
      }
      session.reset_policies();
      findings_at_end[d.id] = observer.finding_count(d.id);
      Outcome o;
      bool skip = false;
      bool unexpected = false;
      bool deviated = false;
      for (const CheckResult& r : context.results()) {
        if (r.name == kSkipCheck) {
          skip = true;
          o.failed.push_back(r);
          continue;
        }
        if (r.known_deviation) known_used.insert(std::string(d.id) + "/" + r.name);
        if (r.ok && !r.known_deviation) continue;
        o.failed.push_back(r);
        if (r.known_deviation && !r.ok) deviated = true;
        else unexpected = true;
      }
      o.kind = unexpected ? Outcome::Fail : skip ? Outcome::Skip : deviated ? Outcome::KnownDeviation : Outcome::Pass;
      static constexpr const char* kNames[] = {"PASS", "FAIL", "XFAIL", "SKIP"};
      std::printf("%-5s %-7s %s (%zu checks)\n", kNames[o.kind], d.id, d.title, context.results().size());
      for (const CheckResult& r : o.failed) {
        const char* what = r.name == kSkipCheck ? "skipped"
                           : !r.known_deviation ? "failed"
                           : r.ok               ? "passed, but is listed as a known deviation"
                                                : "known deviation";
        std::printf("        %s/%s %s: %s\n", d.id, r.name.c_str(), what, r.detail.c_str());
      }
      std::fflush(stdout);
      outcomes[d.id] = o;
    }
    // Findings the observer filed for a case after that case had run.
    for (const auto& [id, count] : findings_at_end) {
      const size_t late = observer.finding_count(id) - count;
      if (late == 0) continue;
      std::printf("FAIL  %-7s %zu finding(s) after the case ran:", id.c_str(), late);
      for (const std::string& f : observer.findings(id)) std::printf(" %s;", f.c_str());
      std::printf("\n");
      outcomes[id].kind = Outcome::Fail;
    }
    for (const std::string& k : known)
      if (!known_used.count(k)) std::printf("note: --known-deviation %s names no check that ran\n", k.c_str());
    for (const auto& [id, o] : outcomes) {
      switch (o.kind) {
        case Outcome::Pass: ++passed; break;
        case Outcome::Fail: ++failed; break;
        case Outcome::KnownDeviation: ++deviations; break;
        case Outcome::Skip: ++skipped; break;
      }
    }
    std::string coverage = "spec markers not checked (no --spec)";
    if (markers) {
      const std::vector<std::string> problems = coverage_problems(*markers, ids);
      for (const std::string& p : problems) std::printf("SPEC %s\n", p.c_str());
      coverage = std::to_string(markers->musts.size()) + " MUSTs in docs/spec.md, " +
                 (problems.empty() ? std::string("each with a case") : "markers incomplete");
      if (!problems.empty()) status = 1;
    }
    std::printf("compliance: %s; %zu cases: %zu passed, %zu failed, %zu known deviations, %zu skipped\n",
                coverage.c_str(), ids.size(), passed, failed, deviations, skipped);
    if (failed) status = 1;
  }
  if (launched) reap(launched->pid);
  return status;
}
