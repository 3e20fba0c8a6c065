// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce-compliance-target: our implementation as the endpoint under test.
// It runs the io/ runtime (UDP sockets, the engine, the progress thread) on
// one address and serves the compliance suite's side channel
// (control_protocol.h) on a TCP port of the same address: memory regions,
// QPs connected to the suite's endpoint, posted work, completions, memory
// and counters. It prints one line, "control ADDRESS PORT", once it
// listens, serves one connection and exits when that connection closes.
//
// The engine runs with the timers the verbs provider gives it over kernel
// UDP (provider/verbs/context_options.h, Options): the engine's own defaults are
// for an 8 us datacenter RTT, and a user-space peer on a shared host answers
// in tens of microseconds to milliseconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "control_protocol.h"
#include "line_channel.h"
#include "local_address.h"
#include "metaroce/abi.h"
#include "runtime.h"

namespace metaroce::compliance {
namespace {

using nlohmann::json;
using transport::Endpoint;
using transport::Time;

constexpr uint32_t kPd = 1;
constexpr uint32_t kCqDepth = 4096;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// Counter names of the side channel (control::kDropCounters and
// kDuplicateCounters) and where the engine keeps each.
constexpr std::pair<const char*, uint64_t transport::EndpointCounters::*> kCounterFields[] = {
    {"rx_drop_malformed", &transport::EndpointCounters::rx_drop_malformed},
    {"rx_drop_security_mode", &transport::EndpointCounters::rx_drop_security_mode},
    {"rx_drop_integrity", &transport::EndpointCounters::rx_drop_integrity},
    {"rx_drop_no_key", &transport::EndpointCounters::rx_drop_no_key},
    {"rx_drop_unknown_peer", &transport::EndpointCounters::rx_drop_unknown_peer},
    {"rx_drop_stale_epoch", &transport::EndpointCounters::rx_drop_stale_epoch},
    {"rx_drop_replay", &transport::EndpointCounters::rx_drop_replay},
    {"rx_drop_unknown_qp", &transport::EndpointCounters::rx_drop_unknown_qp},
    {"rx_drop_qp_state", &transport::EndpointCounters::rx_drop_qp_state},
    {"rx_drop_out_of_window", &transport::EndpointCounters::rx_drop_out_of_window},
    {"rx_drop_invalid_request", &transport::EndpointCounters::rx_drop_bad_request},
    {"rx_drop_access", &transport::EndpointCounters::rx_drop_access},
    {"rx_drop_rnr", &transport::EndpointCounters::rx_drop_rnr},
    {"rx_drop_out_of_order", &transport::EndpointCounters::rx_drop_out_of_order},
    {"rx_drop_stale_response", &transport::EndpointCounters::rx_drop_stale_response},
    {"rx_duplicate_completed", &transport::EndpointCounters::rx_duplicate_completed},
    {"rx_duplicate_chunk", &transport::EndpointCounters::rx_duplicate_chunk},
};
static_assert(std::size(kCounterFields) == std::size(control::kDropCounters) + std::size(control::kDuplicateCounters));

json failure(const std::string& why) { return {{"ok", false}, {"error", why}}; }

class Target {
 public:
  explicit Target(std::unique_ptr<io::Runtime> runtime, std::string address)
      : runtime_(std::move(runtime)), address_(std::move(address)) {
    runtime_->set_completion_listener([this](uint32_t) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++signals_;
      }
      cv_.notify_all();
    });
  }
  ~Target() { runtime_->set_completion_listener({}); }

  json handle(const control::Request& r) {
    switch (r.op) {
      case control::Op::Hello: return hello();
      case control::Op::Connect: return connect(r);
      case control::Op::DestroyQp: return destroy_qp(r.qpn);
      case control::Op::QpState: return qp_state(r.qpn);
      case control::Op::Register: return register_buffer(r.length, r.access);
      case control::Op::Deregister: return deregister(r.key);
      case control::Op::Read: return read(r.addr, r.length);
      case control::Op::Write: return write(r.addr, r.bytes);
      case control::Op::PostRecv: return post_recv(r);
      case control::Op::PostSend: return post_send(r);
      case control::Op::Poll: return poll(r.qpn, r.count, r.wait_ms);
      case control::Op::Counters: return counters();
    }
    return failure("unknown op");
  }

 private:
  struct Buffer {
    std::unique_ptr<uint8_t, FreeDeleter> memory;
    uint64_t length = 0;
  };

  json hello() {
    const transport::EndpointConfig config = runtime_->with_engine([](Endpoint& e, Time) { return e.config(); });
    return {{"ok", true},        {"address", address_},   {"home_port", runtime_->home_port()},
            {"mtu", config.mtu}, {"paths", config.paths}, {"security", wire::to_string(config.security)}};
  }

  json connect(const control::Request& r) {
    sockaddr_storage peer_address;
    if (!make_address(r.peer_address, r.peer_home_port, peer_address)) return failure("bad peer_address");
    const transport::PeerId peer = runtime_->peer_for(peer_address);
    if (peer == 0) return failure("peer_address is not of the target's family");
    transport::QpConfig config;
    config.sq_psn = r.sq_psn;
    config.rq_psn = r.rq_psn;
    const uint32_t qpn = runtime_->with_engine([&](Endpoint& e, Time) -> uint32_t {
      const uint32_t cq = e.create_cq(kCqDepth);
      const uint32_t n = e.create_qp(kPd, cq, cq, config);
      if (n == 0 || e.connect_qp(n, peer, r.peer_qpn, config) != transport::PostResult::Ok) return 0;
      cq_of_[n] = cq;
      return n;
    });
    if (qpn == 0) return failure("QP creation failed");
    return {{"ok", true}, {"qpn", qpn}};
  }

  json destroy_qp(uint32_t qpn) {
    const bool ok = runtime_->with_engine([&](Endpoint& e, Time) {
      auto it = cq_of_.find(qpn);
      if (it == cq_of_.end() || e.destroy_qp(qpn) != transport::PostResult::Ok) return false;
      e.destroy_cq(it->second);
      cq_of_.erase(it);
      return true;
    });
    return ok ? json{{"ok", true}} : failure("no such QP");
  }

  json qp_state(uint32_t qpn) {
    const std::optional<transport::QpState> state =
        runtime_->with_engine([&](Endpoint& e, Time) { return e.qp_state(qpn); });
    if (!state) return failure("no such QP");
    return {{"ok", true}, {"state", transport::to_string(*state)}};
  }

  json register_buffer(uint64_t length, uint32_t access) {
    const uint64_t rounded = (length + 4095) / 4096 * 4096;
    Buffer buffer;
    buffer.memory.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
    if (!buffer.memory) return failure("out of memory");
    std::memset(buffer.memory.get(), 0, rounded);
    buffer.length = length;
    const uint64_t addr = reinterpret_cast<uintptr_t>(buffer.memory.get());
    const std::optional<uint32_t> key =
        runtime_->with_engine([&](Endpoint& e, Time) { return e.memory().register_region(kPd, addr, length, access); });
    if (!key) return failure("registration refused");
    // Buffers stay allocated until exit: a deregistered region's memory
    // must stay readable for the suite to show that nothing wrote it.
    buffers_.push_back(std::move(buffer));
    return {{"ok", true}, {"addr", addr}, {"key", *key}};
  }

  json deregister(uint32_t key) {
    const bool ok = runtime_->with_engine([&](Endpoint& e, Time) { return e.memory().deregister(key); });
    return ok ? json{{"ok", true}} : failure("no such key");
  }

  // The buffer holding [addr, addr + length), or null.
  uint8_t* locate(uint64_t addr, uint64_t length) {
    for (Buffer& b : buffers_) {
      const uint64_t first = reinterpret_cast<uintptr_t>(b.memory.get());
      if (addr >= first && addr - first <= b.length && length <= b.length - (addr - first))
        return b.memory.get() + (addr - first);
    }
    return nullptr;
  }

  json read(uint64_t addr, uint64_t length) {
    uint8_t* at = locate(addr, length);
    if (!at) return failure("not inside a registered buffer");
    std::vector<uint8_t> bytes(length);
    // Under the engine lock: the progress thread places data there.
    runtime_->with_engine([&](Endpoint&, Time) { std::memcpy(bytes.data(), at, length); });
    return {{"ok", true}, {"hex", control::to_hex(bytes)}};
  }

  json write(uint64_t addr, const std::vector<uint8_t>& bytes) {
    uint8_t* at = locate(addr, bytes.size());
    if (!at) return failure("not inside a registered buffer");
    runtime_->with_engine([&](Endpoint&, Time) { std::memcpy(at, bytes.data(), bytes.size()); });
    return {{"ok", true}};
  }

  static void copy_sges(const std::vector<control::Sge>& in, uint32_t& count,
                        std::array<transport::Sge, transport::kMaxSge>& out) {
    count = static_cast<uint32_t>(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = {in[i].addr, in[i].length, in[i].key};
  }

  json post_recv(const control::Request& r) {
    transport::RecvWr wr;
    wr.wr_id = r.wr_id;
    copy_sges(r.sge, wr.num_sge, wr.sg);
    const transport::PostResult result =
        runtime_->with_engine([&](Endpoint& e, Time) { return e.post_recv(r.qpn, wr); });
    if (result != transport::PostResult::Ok) return failure("post_recv refused");
    return {{"ok", true}};
  }

  json post_send(const control::Request& r) {
    transport::SendWr wr;
    wr.wr_id = r.wr_id;
    wr.opcode = static_cast<transport::WrOpcode>(r.opcode);
    copy_sges(r.sge, wr.num_sge, wr.sg);
    wr.remote_addr = r.remote_addr;
    wr.rkey = r.rkey;
    wr.imm = r.imm;
    wr.compare_add = r.compare_add;
    wr.swap = r.swap;
    const transport::PostResult result =
        runtime_->with_engine([&](Endpoint& e, Time) { return e.post_send(r.qpn, wr); });
    if (result != transport::PostResult::Ok) return failure("post_send refused");
    return {{"ok", true}};
  }

  json poll(uint32_t qpn, uint32_t count, uint32_t wait_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    json completions = json::array();
    bool known = true;
    while (true) {
      uint64_t seen = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        seen = signals_;
      }
      runtime_->with_engine([&](Endpoint& e, Time) {
        auto it = cq_of_.find(qpn);
        if (it == cq_of_.end()) {
          known = false;
          return;
        }
        transport::Completion batch[64];
        while (completions.size() < std::max<uint32_t>(count, 1)) {
          const size_t want = std::min<size_t>(std::size(batch), std::max<uint32_t>(count, 1) - completions.size());
          const size_t n = e.poll_cq(it->second, std::span(batch, want));
          if (n == 0) break;
          for (size_t i = 0; i < n; ++i) {
            const transport::Completion& c = batch[i];
            json entry = {{"wr_id", c.wr_id},
                          {"status", control::wc_status_name(static_cast<uint32_t>(c.status))},
                          {"opcode", control::wc_opcode_name(static_cast<uint32_t>(c.opcode))},
                          {"byte_len", c.byte_len}};
            if (c.has_imm) entry["imm"] = c.imm;
            completions.push_back(std::move(entry));
          }
        }
      });
      if (!known) return failure("no such QP");
      if (completions.size() >= count) break;
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_until(lock, deadline, [&] { return signals_ != seen; })) break;
    }
    return {{"ok", true}, {"completions", completions}};
  }

  json counters() {
    json out = json::object();
    runtime_->with_engine([&](Endpoint& e, Time) {
      for (const auto& [name, field] : kCounterFields) out[name] = e.counters().*field;
    });
    // The runtime refuses datagrams from unknown senders before the engine
    // sees them.
    out["rx_drop_unknown_peer"] = out["rx_drop_unknown_peer"].get<uint64_t>() + runtime_->stats().unknown_sender_drops;
    return {{"ok", true}, {"counters", out}};
  }

  std::unique_ptr<io::Runtime> runtime_;
  const std::string address_;
  std::vector<Buffer> buffers_;
  std::map<uint32_t, uint32_t> cq_of_;  // QP -> its CQ (sends and receives)
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t signals_ = 0;
};

// The payload whose data packets fit the link of `address` unfragmented, as
// the verbs provider chooses it (a standard Ethernet frame's when the
// interface's MTU cannot be read).
uint32_t payload_for_link_of(const std::string& address) {
  constexpr uint32_t kEthernetMtu = 1500;
  const uint32_t link_mtu = interface_mtu(interface_of(address));
  const bool ipv6 = address.find(':') != std::string::npos;
  return metaroce_payload_for_link_mtu(link_mtu ? link_mtu : kEthernetMtu, ipv6);
}

int listen_on(const std::string& address, uint16_t port, uint16_t& bound, std::string& error) {
  sockaddr_storage local;
  if (!make_address(address, port, local)) {
    error = "not an IP address: " + address;
    return -1;
  }
  const int fd = ::socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  const socklen_t length = local.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&local), length) != 0 || ::listen(fd, 1) != 0) {
    error = std::string("control socket: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  sockaddr_storage name{};
  socklen_t name_length = sizeof name;
  getsockname(fd, reinterpret_cast<sockaddr*>(&name), &name_length);
  bound = ntohs(name.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(name).sin_port
                                          : reinterpret_cast<sockaddr_in6&>(name).sin6_port);
  return fd;
}

}  // namespace
}  // namespace metaroce::compliance

int main(int argc, char** argv) {
  using namespace metaroce;
  CLI::App app{"The MetaRoCE endpoint under test for metaroce-compliance, with its side channel"};
  std::string address = "127.0.0.1";
  uint16_t control_port = 0;
  uint32_t mtu = 0;
  app.add_option("--address", address, "local IPv4 or IPv6 address of the endpoint and its side channel");
  app.add_option("--control-port", control_port, "TCP port of the side channel (0: any)");
  app.add_option("--mtu", mtu,
                 "payload bytes per data packet (default: what fits the link of --address); must fit the path MTU")
      ->check(CLI::Range(256u, 65000u));
  CLI11_PARSE(app, argc, argv);

  io::RuntimeOptions options;
  options.local_address = address;
  options.endpoint.base_rtt_ns = 100'000;
  options.endpoint.cc.target_queue_delay_ns = 1'000'000;
  options.endpoint.ack_delay_ns = 10'000;
  options.endpoint.min_rto_ns = 4'000'000;
  options.endpoint.mtu = mtu ? mtu : compliance::payload_for_link_of(address);
  std::string error;
  std::unique_ptr<io::Runtime> runtime = io::Runtime::create(options, error);
  if (!runtime) {
    std::fprintf(stderr, "metaroce-compliance-target: %s\n", error.c_str());
    return 1;
  }
  uint16_t bound = 0;
  const int listener = compliance::listen_on(address, control_port, bound, error);
  if (listener < 0) {
    std::fprintf(stderr, "metaroce-compliance-target: %s\n", error.c_str());
    return 1;
  }
  std::printf("control %s %u\n", address.c_str(), bound);
  std::fflush(stdout);
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  if (fd < 0) return 1;
  compliance::LineChannel channel(fd, compliance::control::kMaxLineBytes);
  compliance::Target target(std::move(runtime), address);
  while (std::optional<std::string> line = channel.read_line()) {
    std::string why;
    const std::optional<compliance::control::Request> request = compliance::control::parse_request(*line, why);
    const nlohmann::json reply = request ? target.handle(*request) : compliance::failure(why);
    if (!channel.send_line(reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))) break;
  }
  return 0;
}
