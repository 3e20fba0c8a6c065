// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce-perf: bandwidth and latency of RDMA WRITE, READ and SEND over any
// verbs device (MetaRoCE, rxe, hardware), checking every byte that arrives.
// Like perftest, the two sides exchange QP numbers, GIDs and memory keys over
// TCP; then the client drives the test and the server verifies.
//
//   server:  metaroce-perf -d mr0 --test write
//   client:  metaroce-perf -d mr0 --test write 10.0.0.2
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string device;
  int ib_port = 1;
  int gid_index = 0;
  uint16_t tcp_port = 18515;
  std::string server;          // empty: be the server
  std::string test = "write";  // write | read | send
  std::string mode = "bw";     // bw | lat
  uint32_t size = 65536;
  uint32_t iterations = 5000;
  uint32_t depth = 64;  // outstanding work requests (bw)
  uint32_t slots = 16;  // distinct buffers the data rotates through
  double timeout_s = 120;
  uint64_t seed = 1;
};

[[noreturn]] void die(const std::string& what) { throw std::runtime_error(what); }

// What each side tells the other before the test.
struct [[gnu::packed]] Exchange {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  uint32_t slots;
  uint32_t iterations;
};

void write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) die("side channel: send failed");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) die("side channel: peer closed");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

int tcp_connect(const std::string& host, uint16_t port, double timeout_s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) != 0) die("cannot resolve " + host);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  // The server may not be listening yet: retry until the deadline.
  while (true) {
    const int fd = ::socket(result->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
      freeaddrinfo(result);
      return fd;
    }
    if (fd >= 0) ::close(fd);
    if (Clock::now() > deadline) {
      freeaddrinfo(result);
      die("cannot connect to " + host + ":" + std::to_string(port));
    }
    usleep(100'000);
  }
}

int tcp_accept(uint16_t port) {
  const int listener = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (listener < 0) die("socket failed");
  const int on = 1, off = 0;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(port);
  addr.sin6_addr = in6addr_any;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0)
    die("cannot listen on TCP port " + std::to_string(port));
  const int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (fd < 0) die("accept failed");
  return fd;
}

// The byte at `index` of slot `slot`: what every verifier expects.
uint8_t pattern(uint64_t seed, uint32_t slot, size_t index) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + slot * 0xBF58476D1CE4E5B9ull + index / 8;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> ((index % 8) * 8));
}

void fill(std::vector<uint8_t>& buffer, uint64_t seed, uint32_t size, uint32_t slots) {
  for (uint32_t s = 0; s < slots; ++s)
    for (size_t i = 0; i < size; ++i) buffer[size_t{s} * size + i] = pattern(seed, s, i);
}

bool verify(const std::vector<uint8_t>& buffer, uint64_t seed, uint32_t size, uint32_t slots) {
  for (uint32_t s = 0; s < slots; ++s)
    for (size_t i = 0; i < size; ++i)
      if (buffer[size_t{s} * size + i] != pattern(seed, s, i)) return false;
  return true;
}

class Rdma {
 public:
  Rdma(const Options& o, size_t buffer_bytes) : options_(o) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list || count == 0) die("no RDMA devices");
    ibv_device* device = nullptr;
    for (int i = 0; i < count; ++i)
      if (o.device.empty() || o.device == ibv_get_device_name(list[i])) device = list[i];
    if (!device) die("no RDMA device named " + o.device);
    context_ = ibv_open_device(device);
    ibv_free_device_list(list);
    if (!context_) die("ibv_open_device failed");
    pd_ = ibv_alloc_pd(context_);
    if (!pd_) die("ibv_alloc_pd failed");
    buffer_.assign(buffer_bytes, 0);
    mr_ = ibv_reg_mr(pd_, buffer_.data(), buffer_.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr_) die("ibv_reg_mr failed");
    cq_ = ibv_create_cq(context_, static_cast<int>(2 * o.depth + 16), nullptr, nullptr, 0);
    if (!cq_) die("ibv_create_cq failed");
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = o.depth + 4;
    init.cap.max_recv_wr = o.depth + 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp_ = ibv_create_qp(pd_, &init);
    if (!qp_) die("ibv_create_qp failed");
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = static_cast<uint8_t>(o.ib_port);
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("modify to INIT failed");
    if (ibv_query_gid(context_, static_cast<uint8_t>(o.ib_port), o.gid_index, &gid_)) die("ibv_query_gid failed");
    ibv_port_attr port{};
    if (ibv_query_port(context_, static_cast<uint8_t>(o.ib_port), &port)) die("ibv_query_port failed");
    mtu_ = port.active_mtu;
  }

  ~Rdma() {
    if (qp_) ibv_destroy_qp(qp_);
    if (cq_) ibv_destroy_cq(cq_);
    if (mr_) ibv_dereg_mr(mr_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (context_) ibv_close_device(context_);
  }

  Exchange local(uint32_t size, uint32_t slots, uint32_t iterations) const {
    Exchange e{};
    e.qpn = qp_->qp_num;
    e.psn = psn_;
    std::memcpy(e.gid, gid_.raw, 16);
    e.addr = reinterpret_cast<uintptr_t>(buffer_.data());
    e.rkey = mr_->rkey;
    e.size = size;
    e.slots = slots;
    e.iterations = iterations;
    return e;
  }

  void connect(const Exchange& remote) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = mtu_;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 12;
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(options_.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.port_num = static_cast<uint8_t>(options_.ib_port);
    if (ibv_modify_qp(qp_, &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("modify to RTR failed");
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.sq_psn = psn_;
    attr.max_rd_atomic = 16;
    if (ibv_modify_qp(qp_, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
      die("modify to RTS failed");
  }

  void post_recv(uint32_t slot, uint32_t size) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data()) + uint64_t{slot} * size, size, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(qp_, &wr, &bad)) die("ibv_post_recv failed");
  }

  void post_send(ibv_wr_opcode opcode, uint32_t slot, uint32_t size, const Exchange& remote, uint64_t id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data()) + uint64_t{slot} * size, size, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = opcode;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote.addr + uint64_t{slot} * size;
    wr.wr.rdma.rkey = remote.rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &wr, &bad)) die("ibv_post_send failed");
  }

  // Waits for one completion; a failed one or a timeout ends the run.
  ibv_wc wait(const Clock::time_point& deadline) {
    ibv_wc wc{};
    while (true) {
      const int n = ibv_poll_cq(cq_, 1, &wc);
      if (n < 0) die("ibv_poll_cq failed");
      if (n == 1) break;
      if (Clock::now() > deadline) die("timed out waiting for a completion");
    }
    if (wc.status != IBV_WC_SUCCESS) die(std::string("work request failed: ") + ibv_wc_status_str(wc.status));
    return wc;
  }

  std::vector<uint8_t>& buffer() { return buffer_; }

 private:
  const Options& options_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  // The first PSN of this side's requests, at random as perftest and
  // rdma_cm choose it, so that a new run's messages never match an old one's.
  const uint32_t psn_ = std::random_device{}() & 0xffffff;
  ibv_gid gid_{};
  ibv_mtu mtu_ = IBV_MTU_1024;
  std::vector<uint8_t> buffer_;
};

struct Result {
  double seconds = 0;
  std::vector<double> latencies_us;
  bool verified = false;
};

int run(const Options& o) {
  const bool client = !o.server.empty();
  const size_t bytes = size_t{o.size} * o.slots;
  Rdma rdma(o, bytes);
  const int fd = client ? tcp_connect(o.server, o.tcp_port, o.timeout_s) : tcp_accept(o.tcp_port);
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  const Exchange mine = rdma.local(o.size, o.slots, o.iterations);
  write_all(fd, &mine, sizeof mine);
  Exchange theirs{};
  read_all(fd, &theirs, sizeof theirs);
  if (theirs.size != o.size || theirs.slots != o.slots) die("the two sides disagree on --size/--slots");

  // Who holds the pattern: the writer/sender, or for READ the target.
  const bool holds_pattern = o.test == "read" ? !client : client;
  if (holds_pattern) fill(rdma.buffer(), o.seed, o.size, o.slots);
  rdma.connect(theirs);
  uint8_t ready = 1;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));

  Result result;
  if (o.mode == "lat") {
    // SEND/RECV ping-pong; latency = half the round trip.
    for (uint32_t s = 0; s < o.slots; ++s) rdma.post_recv(s, o.size);
    write_all(fd, &ready, 1);
    read_all(fd, &ready, 1);
    for (uint32_t i = 0; i < o.iterations; ++i) {
      const uint32_t slot = i % o.slots;
      const auto start = Clock::now();
      if (client) {
        rdma.post_send(IBV_WR_SEND, slot, o.size, theirs, i);
        rdma.wait(deadline);                    // our send
        const ibv_wc wc = rdma.wait(deadline);  // their reply
        if (wc.opcode != IBV_WC_RECV) die("unexpected completion while waiting for the reply");
        result.latencies_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
      } else {
        const ibv_wc wc = rdma.wait(deadline);
        if (wc.opcode != IBV_WC_RECV || wc.byte_len != o.size) die("bad request message");
        rdma.post_send(IBV_WR_SEND, slot, o.size, theirs, i);
        rdma.wait(deadline);
      }
      rdma.post_recv(slot, o.size);
    }
    result.verified = verify(rdma.buffer(), o.seed, o.size, o.slots);
  } else {
    if (!client && o.test == "send") {
      for (uint32_t i = 0; i < std::min(o.depth, o.iterations); ++i) rdma.post_recv(i % o.slots, o.size);
    }
    write_all(fd, &ready, 1);
    read_all(fd, &ready, 1);
    const auto start = Clock::now();
    if (client) {
      const ibv_wr_opcode opcode = o.test == "write"  ? IBV_WR_RDMA_WRITE
                                   : o.test == "read" ? IBV_WR_RDMA_READ
                                                      : IBV_WR_SEND;
      uint32_t posted = 0, completed = 0;
      while (completed < o.iterations) {
        while (posted < o.iterations && posted - completed < o.depth) {
          rdma.post_send(opcode, posted % o.slots, o.size, theirs, posted);
          ++posted;
        }
        rdma.wait(deadline);
        ++completed;
      }
    } else if (o.test == "send") {
      uint32_t received = 0, posted = std::min(o.depth, o.iterations);
      while (received < o.iterations) {
        const ibv_wc wc = rdma.wait(deadline);
        if (wc.byte_len != o.size) die("SEND of unexpected length");
        ++received;
        if (posted < o.iterations) {
          rdma.post_recv(static_cast<uint32_t>(wc.wr_id), o.size);
          ++posted;
        }
      }
    }
    // The client says when its last work request completed: one-sided
    // operations give the server no completion of its own to wait for.
    uint8_t done = 1;
    if (client) write_all(fd, &done, 1);
    else read_all(fd, &done, 1);
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // The side that received the data checks it; then both agree on the verdict.
    uint8_t verdict = 1;
    const bool receives_data = o.test == "read" ? client : !client;
    if (receives_data) verdict = verify(rdma.buffer(), o.seed, o.size, o.slots) ? 1 : 0;
    write_all(fd, &verdict, 1);
    uint8_t other = 0;
    read_all(fd, &other, 1);
    result.verified = verdict && other;
  }
  ::close(fd);

  nlohmann::ordered_json line = {{"test", o.test},
                                 {"mode", o.mode},
                                 {"side", client ? "client" : "server"},
                                 {"size", o.size},
                                 {"iterations", o.iterations}};
  if (o.mode == "lat") {
    std::sort(result.latencies_us.begin(), result.latencies_us.end());
    auto at = [&](double p) {
      if (result.latencies_us.empty()) return 0.0;
      return result.latencies_us[std::min<size_t>(result.latencies_us.size() - 1,
                                                  static_cast<size_t>(p * result.latencies_us.size()))];
    };
    line["lat_us_p50"] = at(0.5);
    line["lat_us_p99"] = at(0.99);
  } else {
    const double total_bits = 8.0 * o.size * o.iterations;
    line["gbps"] = result.seconds > 0 ? total_bits / result.seconds / 1e9 : 0.0;
    line["msg_rate_mpps"] = result.seconds > 0 ? o.iterations / result.seconds / 1e6 : 0.0;
  }
  line["verified"] = result.verified;
  std::printf("%s\n", line.dump().c_str());
  return result.verified ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metaroce-perf: verified RDMA bandwidth and latency over any verbs device"};
  Options o;
  app.add_option("-d,--device", o.device, "verbs device name (default: the first)");
  app.add_option("-i,--ib-port", o.ib_port, "device port")->check(CLI::Range(1, 255));
  app.add_option("-x,--gid-index", o.gid_index, "GID index")->check(CLI::Range(0, 255));
  app.add_option("-p,--port", o.tcp_port, "TCP port of the side channel");
  app.add_option("--test", o.test, "write | read | send")->check(CLI::IsMember({"write", "read", "send"}));
  app.add_option("--mode", o.mode, "bw | lat")->check(CLI::IsMember({"bw", "lat"}));
  app.add_option("-s,--size", o.size, "message size in bytes")->check(CLI::Range(1u, 1u << 30));
  app.add_option("-n,--iterations", o.iterations, "messages")->check(CLI::Range(1u, 100'000'000u));
  app.add_option("-t,--depth", o.depth, "outstanding work requests")->check(CLI::Range(1u, 4096u));
  app.add_option("--slots", o.slots, "distinct buffers the data rotates through")->check(CLI::Range(1u, 4096u));
  app.add_option("--timeout", o.timeout_s, "seconds before giving up")->check(CLI::Range(1.0, 3600.0));
  app.add_option("--seed", o.seed, "data pattern seed");
  app.add_option("server", o.server, "server address (omit to be the server)");
  CLI11_PARSE(app, argc, argv);
  if (o.mode == "lat" && o.test != "send") {
    std::fprintf(stderr, "metaroce-perf: --mode lat measures SEND ping-pong: use --test send\n");
    return 2;
  }
  if (uint64_t{o.size} * o.slots > (uint64_t{1} << 32)) {
    std::fprintf(stderr, "metaroce-perf: --size x --slots must stay below 4 GiB\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "metaroce-perf: %s\n", e.what());
    return 1;
  }
}
