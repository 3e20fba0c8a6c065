// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Two processes that finish an exchange and exit at once: a ping-pong of
// one SEND each way, where each side exits the moment it has seen its last
// completion — half the time with exit() and its devices still open, half
// the time after destroying the QP and closing the device. The initiator's
// last completion is the reply's arrival, and the replier's is its send,
// which needs the initiator's ACK of that reply: the ACK must leave before
// the completion it covers is visible, and an exiting or closing process
// sends what it owes (as a NIC acknowledges what it placed, whatever the
// process does next). Repeated, since the failure it guards against is a
// race.
//
// Over loopback by default. tests/netns/exit_together.sh runs it across the
// namespace fabric: EXIT_TOGETHER_HOSTS="NETNS0=ADDR0 NETNS1=ADDR1" puts
// side i in network namespace NETNSi with its device on ADDRi.
#include <infiniband/verbs.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "metaroce/metaroce_dv.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kDevice = "mrexit0";
constexpr uint32_t kPsn = 0x4711;
constexpr size_t kBytes = 4096;
constexpr int kRepetitions = 200;

bool write_u32(int fd, uint32_t v) { return ::write(fd, &v, sizeof v) == sizeof v; }
bool read_u32(int fd, uint32_t& v) { return ::read(fd, &v, sizeof v) == sizeof v; }
bool write_gid(int fd, const ibv_gid& g) { return ::write(fd, &g, sizeof g) == sizeof g; }
bool read_gid(int fd, ibv_gid& g) { return ::read(fd, &g, sizeof g) == sizeof g; }

// Where side 0 and side 1 run: their network namespaces ("" = this one) and
// their devices' addresses.
struct Host {
  std::string netns;
  std::string address = "127.0.0.1";
};
// False when EXIT_TOGETHER_HOSTS is set but is not two NETNS=ADDR words.
bool hosts_from_env(std::array<Host, 2>& hosts) {
  const char* env = std::getenv("EXIT_TOGETHER_HOSTS");
  if (!env) return true;
  std::istringstream words(env);
  for (Host& h : hosts) {
    std::string word;
    if (!(words >> word)) return false;
    const size_t eq = word.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == word.size()) return false;
    h.netns = word.substr(0, eq);
    h.address = word.substr(eq + 1);
  }
  std::string extra;
  return !(words >> extra);
}

// Moves this (single-threaded, just forked) process into network namespace
// `name` as `ip netns exec` does.
bool enter_netns(const std::string& name) {
  if (name.empty()) return true;
  const int fd = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

bool connect_qp(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return false;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = kPsn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kPsn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

// One side, in a child process: 0 when both completions arrived.
// What a process exiting with its devices open still holds at exit(): kept
// here, as a program's globals would keep them, so that LeakSanitizer sees
// objects that were alive, not lost.
struct OpenAtExit {
  ibv_context* ctx;
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp* qp;
  ibv_mr* mrs[2];
};
OpenAtExit open_at_exit{};

int exchange_and_exit(int peer, bool initiator, bool close_first, const Host& host) {
  if (!enter_netns(host.netns)) return 9;
  ibv_context* ctx = metaroce_dv_open_device(kDevice, host.address.c_str(), nullptr);
  if (!ctx) return 10;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) return 11;
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  std::vector<uint8_t> out(kBytes, 0x5a), in(kBytes, 0);
  ibv_mr* out_mr = qp ? ibv_reg_mr(pd, out.data(), kBytes, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  ibv_mr* in_mr = out_mr ? ibv_reg_mr(pd, in.data(), kBytes, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!in_mr) return 12;
  uint32_t remote_qpn = 0;
  ibv_gid gid{}, remote_gid{};
  if (ibv_query_gid(ctx, 1, 0, &gid)) return 13;
  if (!write_u32(peer, qp->qp_num) || !write_gid(peer, gid) || !read_u32(peer, remote_qpn) ||
      !read_gid(peer, remote_gid))
    return 13;
  if (!connect_qp(qp, remote_qpn, remote_gid)) return 14;
  ibv_sge rsge{reinterpret_cast<uintptr_t>(in.data()), kBytes, in_mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  if (ibv_post_recv(qp, &rwr, &bad_recv)) return 15;
  uint32_t ready = 0;  // both receives are posted before either sends
  if (!write_u32(peer, 1) || !read_u32(peer, ready)) return 16;
  ibv_sge ssge{reinterpret_cast<uintptr_t>(out.data()), kBytes, out_mr->lkey};
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  ibv_send_wr* bad_send = nullptr;
  bool sent = false, received = false;
  if (initiator) {
    if (ibv_post_send(qp, &swr, &bad_send)) return 17;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!(sent && received)) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return 18;
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS) return 19;
      if (wc.opcode == IBV_WC_RECV) {
        received = true;
        if (!initiator && ibv_post_send(qp, &swr, &bad_send)) return 17;  // the reply
      } else {
        sent = true;
      }
    } else if (Clock::now() > deadline) {
      return 20;  // the other side never acknowledged or never sent
    }
  }
  if (in != out) return 21;
  if (!close_first) {
    open_at_exit = {ctx, pd, cq, qp, {in_mr, out_mr}};
  } else {
    if (ibv_destroy_qp(qp) || ibv_dereg_mr(in_mr) || ibv_dereg_mr(out_mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) ||
        ibv_close_device(ctx))
      return 22;
  }
  return 0;
}

TEST(ExitTogether, BothSidesSeeEveryCompletion) {
  std::array<Host, 2> hosts{};
  ASSERT_TRUE(hosts_from_env(hosts)) << "EXIT_TOGETHER_HOSTS must be \"NETNS0=ADDR0 NETNS1=ADDR1\"";
  for (int rep = 0; rep < kRepetitions; ++rep) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    const bool close_first = rep % 2 == 1;
    pid_t children[2];
    for (int side = 0; side < 2; ++side) {
      children[side] = ::fork();
      ASSERT_GE(children[side], 0);
      if (children[side] == 0) {
        ::close(fds[1 - side]);
        std::exit(exchange_and_exit(fds[side], side == 0, close_first, hosts[side]));
      }
    }
    ::close(fds[0]);
    ::close(fds[1]);
    for (int side = 0; side < 2; ++side) {
      int status = 0;
      ASSERT_EQ(::waitpid(children[side], &status, 0), children[side]);
      ASSERT_TRUE(WIFEXITED(status)) << "repetition " << rep << " side " << side;
      ASSERT_EQ(WEXITSTATUS(status), 0) << "repetition " << rep << " side " << side
                                        << (close_first ? " (closed first)" : " (exit with devices open)");
    }
  }
}

}  // namespace
