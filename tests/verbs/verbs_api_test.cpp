// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The provider through the public verbs API only (plus metaroce_dv to get
// devices): two contexts in one process on 127.0.0.1, RC QPs between them,
// data moving over real UDP sockets. The program links
// libmetaroce-preload.so before libibverbs, as LD_PRELOAD would place it, so
// the GID / pkey / completion channel calls reach the provider.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>
#include <initializer_list>
#include <string>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "ibverbs_private.h"
#include "metaroce/metaroce_dv.h"
#include "metaroce/wire.h"

// Every operator new in the process (the provider's too) counts on the
// calling thread while that thread's counter is armed: see
// SteadyStatePostAndPollDoNotAllocate.
namespace {
thread_local bool count_allocations = false;
thread_local uint64_t allocations = 0;
}  // namespace

void* operator new(size_t size) {
  if (count_allocations) ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
namespace {
// Not inlined: GCC would take free() of a pointer from operator new for a mismatch.
[[gnu::noinline]] void release(void* p) {
  if (count_allocations && p) ++allocations;
  std::free(p);
}
}  // namespace
// The provider allocates with new (std::nothrow) too: replaced alike, so
// that every delete below frees what malloc gave (ASan checks the pairing).
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  if (count_allocations) ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::seconds(10);
constexpr const char* kDevice = "mrtest0";
constexpr const char* kAddress = "127.0.0.1";

// Polls until `count` completions arrived or the deadline passed.
std::vector<ibv_wc> wait_wc(ibv_cq* cq, size_t count, std::chrono::milliseconds limit = kTimeout) {
  std::vector<ibv_wc> out;
  const auto deadline = Clock::now() + limit;
  ibv_wc wc[16];
  while (out.size() < count && Clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 16, wc);
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; ++i) out.push_back(wc[i]);
  }
  return out;
}

// Bytes waiting on a completion channel once it holds at least `bytes` or
// the deadline passed.
int wait_channel_bytes(int fd, int bytes) {
  const auto deadline = Clock::now() + kTimeout;
  int n = 0;
  while (::ioctl(fd, FIONREAD, &n) == 0 && n < bytes && Clock::now() < deadline) std::this_thread::yield();
  return n;
}

struct Buffer {
  explicit Buffer(size_t n) : bytes(n) {}
  std::vector<uint8_t> bytes;
  ibv_mr* mr = nullptr;
  uint8_t* data() { return bytes.data(); }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(bytes.data()); }
};

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  std::vector<ibv_qp*> qps;
  std::vector<std::unique_ptr<Buffer>> buffers;

  ~Side() {
    for (auto& b : buffers) {
      if (b->mr) {
        EXPECT_EQ(ibv_dereg_mr(b->mr), 0);
      }
    }
    for (ibv_qp* qp : qps) EXPECT_EQ(ibv_destroy_qp(qp), 0);
    if (scq) {
      EXPECT_EQ(ibv_destroy_cq(scq), 0);
    }
    if (rcq) {
      EXPECT_EQ(ibv_destroy_cq(rcq), 0);
    }
    if (channel) {
      EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
    }
    if (pd) {
      EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    }
    if (ctx) {
      EXPECT_EQ(ibv_close_device(ctx), 0);
    }
  }

  Buffer& buffer(size_t n, int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                        IBV_ACCESS_REMOTE_ATOMIC) {
    buffers.push_back(std::make_unique<Buffer>(n));
    Buffer& b = *buffers.back();
    b.mr = ibv_reg_mr(pd, b.data(), n, access);
    EXPECT_NE(b.mr, nullptr) << std::strerror(errno);
    return b;
  }
};

void open_side(Side& s, bool with_channel = false, const char* device = kDevice, const char* address = kAddress) {
  s.ctx = metaroce_dv_open_device(device, address, nullptr);
  ASSERT_NE(s.ctx, nullptr) << std::strerror(errno);
  s.pd = ibv_alloc_pd(s.ctx);
  ASSERT_NE(s.pd, nullptr);
  if (with_channel) {
    s.channel = ibv_create_comp_channel(s.ctx);
    ASSERT_NE(s.channel, nullptr) << std::strerror(errno);
  }
  s.scq = ibv_create_cq(s.ctx, 256, &s, nullptr, 0);
  s.rcq = ibv_create_cq(s.ctx, 256, &s, s.channel, 0);
  ASSERT_NE(s.scq, nullptr);
  ASSERT_NE(s.rcq, nullptr);
}

ibv_qp* make_qp(Side& s, int sq_sig_all = 1) {
  ibv_qp_init_attr a{};
  a.send_cq = s.scq;
  a.recv_cq = s.rcq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = sq_sig_all;
  a.cap.max_send_wr = 64;
  a.cap.max_recv_wr = 64;
  a.cap.max_send_sge = 4;
  a.cap.max_recv_sge = 4;
  a.cap.max_inline_data = 256;
  ibv_qp* qp = ibv_create_qp(s.pd, &a);
  EXPECT_NE(qp, nullptr) << std::strerror(errno);
  if (qp) s.qps.push_back(qp);
  return qp;
}

int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// Both ends number their messages from this PSN: a responder's rq_psn must
// be its requester's sq_psn (docs/spec.md 8.6), as on InfiniBand.
constexpr uint32_t kPsn = 0x123;

int to_rtr(ibv_qp* qp, ibv_context* remote_ctx, uint32_t remote_qpn) {
  union ibv_gid gid {};
  if (ibv_query_gid(remote_ctx, 1, 0, &gid) != 0) return -1;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = kPsn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kPsn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  return ibv_modify_qp(
      qp, &a,
      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

void connect(ibv_qp* a, Side& sa, ibv_qp* b, Side& sb) {
  ASSERT_EQ(to_init(a), 0);
  ASSERT_EQ(to_init(b), 0);
  ASSERT_EQ(to_rtr(a, sb.ctx, b->qp_num), 0);
  ASSERT_EQ(to_rtr(b, sa.ctx, a->qp_num), 0);
  ASSERT_EQ(to_rts(a), 0);
  ASSERT_EQ(to_rts(b), 0);
}

int post_recv(ibv_qp* qp, uint64_t wr_id, std::vector<ibv_sge> sges) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

ibv_sge sge(Buffer& b, size_t offset, uint32_t length) { return ibv_sge{b.addr() + offset, length, b.mr->lkey}; }

// Posts one RDMA WRITE or READ between `local` and `remote` at remote_offset.
int post_rdma(ibv_qp* qp, ibv_wr_opcode opcode, ibv_sge local, Buffer& remote, uint64_t wr_id = 0,
              uint64_t remote_offset = 0) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.sg_list = &local;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote.addr() + remote_offset;
  wr.wr.rdma.rkey = remote.mr->rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Posts one SEND of `length` bytes of `src` from `offset`.
void send_to(ibv_qp* qp, Buffer& src, uint32_t offset, uint32_t length, uint64_t wr_id) {
  ibv_sge s = sge(src, offset, length);
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
}

void fill(Buffer& b, uint8_t seed) {
  for (size_t i = 0; i < b.bytes.size(); ++i) b.bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open_side(a, true));
    ASSERT_NO_FATAL_FAILURE(open_side(b, true));
  }
  // One connected pair.
  void pair(int sig_all_a = 1, int sig_all_b = 1) {
    qa = make_qp(a, sig_all_a);
    qb = make_qp(b, sig_all_b);
    ASSERT_NE(qa, nullptr);
    ASSERT_NE(qb, nullptr);
    ASSERT_NO_FATAL_FAILURE(connect(qa, a, qb, b));
  }
  Side a, b;
  ibv_qp* qa = nullptr;
  ibv_qp* qb = nullptr;
};

TEST(VerbsDevices, DeviceListAndIdentity) {
  metaroce_dv_device_spec specs[] = {{kDevice, kAddress}, {"mrtest1", "lo"}};
  int n = 0;
  ibv_device** list = metaroce_dv_get_device_list(specs, 2, &n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(list[2], nullptr);
  EXPECT_STREQ(ibv_get_device_name(list[0]), kDevice);
  EXPECT_STREQ(ibv_get_device_name(list[1]), "mrtest1");
  EXPECT_TRUE(metaroce_dv_is_metaroce_device(list[0]));
  EXPECT_NE(ibv_get_device_guid(list[0]), 0u);  // interposed: no sysfs node_guid
  // Same name, other address: refused.
  metaroce_dv_device_spec clash = {kDevice, "127.0.0.2"};
  EXPECT_EQ(metaroce_dv_get_device_list(&clash, 1, nullptr), nullptr);
  EXPECT_EQ(errno, EEXIST);
  metaroce_dv_device_spec bad = {"mrbad", "no-such-interface0"};
  EXPECT_EQ(metaroce_dv_get_device_list(&bad, 1, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_context* ctx = ibv_open_device(list[1]);
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(metaroce_dv_is_metaroce_context(ctx));
  const uint16_t port = metaroce_dv_home_port(ctx);
  EXPECT_GE(port, metaroce::wire::kHomePortBase);
  EXPECT_LT(port, metaroce::wire::kHomePortBase + metaroce::wire::kHomePortCount);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  metaroce_dv_free_device_list(list);
}

// ibv_open_device() of a loopback device opens with each of `accepted` in
// environment variable `name`, and fails with EINVAL with each of `refused`.
void expect_env_values(const char* name, std::initializer_list<const char*> accepted,
                       std::initializer_list<const char*> refused) {
  metaroce_dv_device_spec spec = {"mrenvval0", "lo"};
  ibv_device** list = metaroce_dv_get_device_list(&spec, 1, nullptr);
  ASSERT_NE(list, nullptr);
  for (const char* value : accepted) {
    ASSERT_EQ(setenv(name, value, 1), 0);
    ibv_context* ctx = ibv_open_device(list[0]);
    ASSERT_NE(ctx, nullptr) << name << "=" << value;
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
  for (const char* value : refused) {
    ASSERT_EQ(setenv(name, value, 1), 0);
    errno = 0;
    EXPECT_EQ(ibv_open_device(list[0]), nullptr) << name << "=" << value;
    EXPECT_EQ(errno, EINVAL) << name << "=" << value;
  }
  ASSERT_EQ(unsetenv(name), 0);
  metaroce_dv_free_device_list(list);
}

TEST(VerbsDevices, MetaroceZerocopyTakesAutoZeroOrOneAndRefusesAnythingElse) {
  expect_env_values("METAROCE_ZEROCOPY", {"auto", "0", "1"}, {"", "yes", "2"});
}

TEST(VerbsDevices, MetaroceProgressSliceTakesZeroOrTheKernelsRangeAndRefusesAnythingElse) {
  expect_env_values("METAROCE_PROGRESS_SLICE_US", {"0", "100", "100000"}, {"", "1", "99", "100001", "-5", "1ms"});
}

TEST(VerbsDevices, MetaroceProgressThreadsTakesOneToSixteenAndRefusesAnythingElse) {
  expect_env_values("METAROCE_PROGRESS_THREADS", {"1", "2", "16"}, {"", "0", "17", "-1", "two"});
}

TEST(VerbsDevices, PlanesAreValidated) {
  // One family, distinct addresses, no empty item, at most 8.
  for (const char* spec : {"127.0.0.1,::1", "127.0.0.1,127.0.0.1", "127.0.0.1,", ",127.0.0.1",
                           "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9",
                           "127.0.0.1,no-such-interface0"}) {
    metaroce_dv_device_spec bad = {"mrplanesbad", spec};
    EXPECT_EQ(metaroce_dv_get_device_list(&bad, 1, nullptr), nullptr) << spec;
    EXPECT_EQ(errno, EINVAL) << spec;
  }
  // METAROCE_DEVICES: an item without '=' is a further plane of the device before it.
  ASSERT_EQ(setenv("METAROCE_DEVICES", "mrenv0=127.0.0.1,127.0.2.1,mrenv1=127.0.0.1", 1), 0);
  int n = 0;
  ibv_device** list = metaroce_dv_get_device_list(nullptr, 0, &n);
  ASSERT_EQ(unsetenv("METAROCE_DEVICES"), 0);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 2);
  ibv_context* ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  metaroce_dv_plane planes[4]{};
  ASSERT_EQ(metaroce_dv_query_planes(ctx, planes, 4), 2);
  EXPECT_STREQ(planes[0].address, "127.0.0.1");
  EXPECT_STREQ(planes[1].address, "127.0.2.1");
  EXPECT_EQ(planes[1].up, 1u);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  ctx = ibv_open_device(list[1]);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(metaroce_dv_query_planes(ctx, nullptr, 0), 1);
  EXPECT_EQ(metaroce_dv_query_planes(ctx, nullptr, -1), -1);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  metaroce_dv_free_device_list(list);
}

// One device over two planes (loopback addresses numbered in parallel): an
// RC connection between two of its contexts spreads over both planes, and
// the planes' and paths' statistics say so.
TEST(VerbsDevices, TwoPlaneDeviceSpreadsAConnectionOverBoth) {
  constexpr const char* kPlanes = "127.0.0.1,127.0.4.1";
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(open_side(a, false, "mrplanes", kPlanes));
  ASSERT_NO_FATAL_FAILURE(open_side(b, false, "mrplanes", kPlanes));
  ibv_qp* qa = make_qp(a);
  ibv_qp* qb = make_qp(b);
  ASSERT_TRUE(qa && qb);
  metaroce_dv_path none[1];
  EXPECT_EQ(metaroce_dv_query_paths(qa, none, 1), 0);  // not connected yet
  ASSERT_NO_FATAL_FAILURE(connect(qa, a, qb, b));
  constexpr size_t kSize = 4 << 20;
  Buffer& src = a.buffer(kSize);
  Buffer& dst = b.buffer(kSize);
  fill(src, 5);
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, sge(src, 0, kSize), dst), 0);
  const auto wc = wait_wc(a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(src.bytes, dst.bytes);

  metaroce_dv_path paths[64];
  const int count = metaroce_dv_query_paths(qa, paths, 64);
  ASSERT_EQ(count, 4);  // the default 4 paths, 2 per plane
  uint64_t plane_packets[2] = {0, 0};
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(paths[i].path, i);
    EXPECT_EQ(paths[i].plane, i % 2);
    EXPECT_EQ(paths[i].health, uint32_t{METAROCE_DV_PATH_ACTIVE});
    plane_packets[paths[i].plane] += paths[i].packets_sent;
  }
  metaroce_dv_plane planes[2];
  ASSERT_EQ(metaroce_dv_query_planes(a.ctx, planes, 2), 2);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(planes[k].up, 1u);
    EXPECT_EQ(planes[k].paths, 2u);
    EXPECT_EQ(planes[k].active_paths, 2u);
    EXPECT_GT(planes[k].packets_sent, 0u) << "plane " << k;
    EXPECT_EQ(planes[k].packets_sent, plane_packets[k]) << "plane " << k;
  }
  EXPECT_GE(planes[0].bytes_sent + planes[1].bytes_sent, kSize);
}

TEST(VerbsDevices, OptionsAreValidated) {
  metaroce_dv_options o{};
  o.comp_mask = METAROCE_DV_OPT_PATHS | METAROCE_DV_OPT_PROFILE | METAROCE_DV_OPT_MTU;
  o.paths = 2;
  o.profile = METAROCE_DV_PROFILE_ROCEV2;
  o.mtu = 1024;
  ibv_context* ctx = metaroce_dv_open_device(kDevice, kAddress, &o);
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &p), 0);
  EXPECT_EQ(p.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  o.comp_mask = METAROCE_DV_OPT_PATHS;
  o.paths = 0;
  EXPECT_EQ(metaroce_dv_open_device(kDevice, kAddress, &o), nullptr);
}

TEST_F(VerbsTest, DeviceAndPortAttributes) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(a.ctx, &d), 0);
  EXPECT_EQ(d.phys_port_cnt, 1);
  EXPECT_GE(d.max_qp_wr, 1024);
  EXPECT_EQ(d.max_sge, 8);
  EXPECT_EQ(d.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(d.max_qp_rd_atom, 16);
  EXPECT_EQ(d.node_guid, ibv_get_device_guid(a.ctx->device));
  ibv_device_attr_ex dx{};
  ASSERT_EQ(ibv_query_device_ex(a.ctx, nullptr, &dx), 0);
  EXPECT_EQ(dx.orig_attr.max_qp, d.max_qp);
  EXPECT_EQ(dx.phys_port_cnt_ex, 1u);

  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(a.ctx, 1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(p.gid_tbl_len, 1);
  EXPECT_NE(ibv_query_port(a.ctx, 2, &p), 0);

  union ibv_gid gid {};
  ASSERT_EQ(ibv_query_gid(a.ctx, 1, 0, &gid), 0);
  const uint8_t expected[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(gid.raw, expected, 16), 0);
  EXPECT_NE(ibv_query_gid(a.ctx, 1, 1, &gid), 0);
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(a.ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(std::memcmp(e.gid.raw, expected, 16), 0);
  ibv_gid_entry table[4];
  EXPECT_EQ(ibv_query_gid_table(a.ctx, table, 4, 0), 1);
  ibv_gid_type_sysfs type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
  EXPECT_EQ(ibv_query_gid_type(a.ctx, 1, 0, &type), 0);
  EXPECT_EQ(type, IBV_GID_TYPE_SYSFS_ROCE_V2);
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(a.ctx, 1, 0, &pkey), 0);
  EXPECT_EQ(pkey, htobe16(0xffff));
  EXPECT_EQ(ibv_get_pkey_index(a.ctx, 1, htobe16(0xffff)), 0);
}

TEST_F(VerbsTest, InterposedCallsReplaceKernelOnlyOnes) {
  // libibverbs' own versions of these fail for a device without a kernel
  // (no sysfs, cmd_fd -1); the program's calls land on the preload's.
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  using QueryGid = int (*)(ibv_context*, uint8_t, int, union ibv_gid*);
  using CreateChannel = ibv_comp_channel* (*)(ibv_context*);
  auto lib_query_gid = reinterpret_cast<QueryGid>(dlvsym(lib, "ibv_query_gid", "IBVERBS_1.1"));
  auto lib_create_channel = reinterpret_cast<CreateChannel>(dlvsym(lib, "ibv_create_comp_channel", "IBVERBS_1.0"));
  ASSERT_NE(lib_query_gid, nullptr);
  ASSERT_NE(lib_create_channel, nullptr);
  union ibv_gid gid {};
  EXPECT_NE(lib_query_gid(a.ctx, 1, 0, &gid), 0);
  EXPECT_EQ(lib_create_channel(a.ctx), nullptr);
  // The default-scope definitions are ours.
  EXPECT_NE(dlvsym(RTLD_DEFAULT, "ibv_query_gid", "IBVERBS_1.1"), reinterpret_cast<void*>(lib_query_gid));
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "ibv_query_gid", "IBVERBS_1.1"), reinterpret_cast<void*>(&ibv_query_gid));
  dlclose(lib);
}

TEST_F(VerbsTest, SendWithImmediateAndEveryWcField) {
  pair();
  Buffer& src = a.buffer(6000);
  Buffer& dst = b.buffer(8192);
  fill(src, 3);
  ASSERT_EQ(post_recv(qb, 0xb0b, {sge(dst, 0, 100), sge(dst, 4096, 4096)}), 0);
  ibv_sge s[2] = {sge(src, 0, 50), sge(src, 1000, 4000)};
  ibv_send_wr wr{};
  wr.wr_id = 0xa11ce;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.sg_list = s;
  wr.num_sge = 2;
  wr.imm_data = htobe32(0xdeadbeef);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);

  const auto rw = wait_wc(b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].wr_id, 0xb0bu);
  EXPECT_EQ(rw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rw[0].vendor_err, 0u);
  EXPECT_EQ(rw[0].byte_len, 4050u);
  EXPECT_EQ(rw[0].imm_data, htobe32(0xdeadbeef));
  EXPECT_EQ(rw[0].wc_flags & IBV_WC_WITH_IMM, IBV_WC_WITH_IMM);
  EXPECT_EQ(rw[0].qp_num, qb->qp_num);
  EXPECT_EQ(rw[0].src_qp, qa->qp_num);
  EXPECT_EQ(rw[0].pkey_index, 0);
  EXPECT_EQ(rw[0].slid, 0);
  EXPECT_EQ(rw[0].sl, 0);
  EXPECT_EQ(rw[0].dlid_path_bits, 0);
  const auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 0xa11ceu);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sw[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sw[0].qp_num, qa->qp_num);
  EXPECT_EQ(sw[0].vendor_err, 0u);
  EXPECT_EQ(sw[0].wc_flags & IBV_WC_WITH_IMM, 0);
  // Scattered into two SGEs: 50 + 1000..4999 -> dst[0..99] then dst[4096..].
  std::vector<uint8_t> sent(src.data(), src.data() + 50);
  sent.insert(sent.end(), src.data() + 1000, src.data() + 5000);
  std::vector<uint8_t> got(dst.data(), dst.data() + 100);
  got.insert(got.end(), dst.data() + 4096, dst.data() + 4096 + 3950);
  EXPECT_EQ(got, sent);
}

TEST_F(VerbsTest, RdmaWriteAndWriteWithImmediate) {
  pair();
  constexpr size_t kSize = 1 << 20;
  Buffer& src = a.buffer(kSize);
  Buffer& dst = b.buffer(kSize);
  fill(src, 9);
  ibv_sge s = sge(src, 0, kSize);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sw[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(sw[0].wr_id, 1u);
  EXPECT_EQ(src.bytes, dst.bytes);

  // With immediate: consumes a receive on the target, which reports it.
  fill(src, 77);
  ASSERT_EQ(post_recv(qb, 42, {}), 0);
  s = sge(src, 0, 4096 * 3 + 17);
  wr.wr_id = 2;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htobe32(0x01020304);
  wr.wr.rdma.remote_addr = dst.addr() + 8;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  const auto rw = wait_wc(b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(rw[0].wr_id, 42u);
  EXPECT_EQ(rw[0].imm_data, htobe32(0x01020304));
  EXPECT_TRUE(rw[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(rw[0].byte_len, 4096u * 3 + 17);
  EXPECT_EQ(rw[0].src_qp, qa->qp_num);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(dst.data() + 8, src.data(), 4096 * 3 + 17), 0);
}

TEST_F(VerbsTest, RdmaRead) {
  pair();
  constexpr size_t kSize = 256 * 1024 + 123;
  Buffer& remote = b.buffer(kSize);
  Buffer& local = a.buffer(kSize);
  fill(remote, 21);
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_READ, sge(local, 0, kSize), remote, 7), 0);
  const auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sw[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(sw[0].byte_len, kSize);
  EXPECT_EQ(local.bytes, remote.bytes);
}

TEST_F(VerbsTest, Atomics) {
  pair();
  Buffer& remote = b.buffer(64);
  Buffer& result = a.buffer(64);
  uint64_t value = 1000;
  std::memcpy(remote.data() + 8, &value, 8);
  ibv_sge s = sge(result, 0, 8);
  ibv_send_wr wr{};
  wr.wr_id = 10;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = remote.addr() + 8;
  wr.wr.atomic.rkey = remote.mr->rkey;
  wr.wr.atomic.compare_add = 5;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sw[0].opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(sw[0].byte_len, 8u);
  uint64_t old = 0;
  std::memcpy(&old, result.data(), 8);
  EXPECT_EQ(old, 1000u);
  std::memcpy(&value, remote.data() + 8, 8);
  EXPECT_EQ(value, 1005u);

  // Compare-and-swap: a match swaps, a mismatch only returns the value.
  wr.wr_id = 11;
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 1005;
  wr.wr.atomic.swap = 77;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sw[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&old, result.data(), 8);
  EXPECT_EQ(old, 1005u);
  std::memcpy(&value, remote.data() + 8, 8);
  EXPECT_EQ(value, 77u);
  wr.wr_id = 12;
  wr.wr.atomic.compare_add = 1;  // no match
  wr.wr.atomic.swap = 99;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  std::memcpy(&old, result.data(), 8);
  EXPECT_EQ(old, 77u);
  std::memcpy(&value, remote.data() + 8, 8);
  EXPECT_EQ(value, 77u);

  // Misaligned target: refused at post time.
  wr.wr.atomic.remote_addr = remote.addr() + 4;
  EXPECT_EQ(ibv_post_send(qa, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(VerbsTest, InlineSendCopiesAtPostTime) {
  pair();
  Buffer& dst = b.buffer(256);
  uint8_t payload[200];
  for (int i = 0; i < 200; ++i) payload[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(post_recv(qb, 1, {sge(dst, 0, 256)}), 0);
  ibv_sge s{reinterpret_cast<uintptr_t>(payload), sizeof payload, 0 /* lkey unused for inline */};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  std::memset(payload, 0xee, sizeof payload);  // the caller owns the buffer again
  const auto rw = wait_wc(b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw[0].byte_len, 200u);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(dst.bytes[i], i);
  EXPECT_EQ(wait_wc(a.scq, 1).size(), 1u);

  // Longer than max_inline_data: refused.
  std::vector<uint8_t> big(8192);
  ibv_qp_attr qattr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qa, &qattr, IBV_QP_CAP, &init), 0);
  EXPECT_GE(init.cap.max_inline_data, 256u);
  s = {reinterpret_cast<uintptr_t>(big.data()), init.cap.max_inline_data + 1, 0};
  EXPECT_EQ(ibv_post_send(qa, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(VerbsTest, UnsignaledAndSqSigAll) {
  pair(/*sig_all_a=*/0);
  Buffer& src = a.buffer(4096);
  Buffer& dst = b.buffer(4096);
  std::vector<ibv_send_wr> wrs(10);
  std::vector<ibv_sge> sges(10);
  for (int i = 0; i < 10; ++i) {
    sges[i] = sge(src, static_cast<size_t>(i) * 100, 100);
    wrs[i].wr_id = static_cast<uint64_t>(i);
    wrs[i].opcode = IBV_WR_RDMA_WRITE;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].wr.rdma.remote_addr = dst.addr() + static_cast<uint64_t>(i) * 100;
    wrs[i].wr.rdma.rkey = dst.mr->rkey;
    wrs[i].next = i < 9 ? &wrs[i + 1] : nullptr;
  }
  wrs[9].send_flags = IBV_SEND_SIGNALED;  // only the last one
  fill(src, 1);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qa, wrs.data(), &bad), 0);
  auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 9u);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 1000), 0);
  // A signaled write posted next is the next completion: the unsignaled
  // ones before it left none.
  ibv_send_wr next = wrs[9];
  next.wr_id = 10;
  next.next = nullptr;
  ASSERT_EQ(ibv_post_send(qa, &next, &bad), 0);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 10u);

  // sq_sig_all = 1: every WR completes, signaled or not.
  ibv_qp* qa2 = make_qp(a, 1);
  ibv_qp* qb2 = make_qp(b, 1);
  ASSERT_NO_FATAL_FAILURE(connect(qa2, a, qb2, b));
  for (auto& w : wrs) w.send_flags = 0;
  wrs[2].next = nullptr;
  ASSERT_EQ(ibv_post_send(qa2, wrs.data(), &bad), 0);
  sw = wait_wc(a.scq, 3);
  ASSERT_EQ(sw.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sw[i].wr_id, static_cast<uint64_t>(i));  // in posting order
    EXPECT_EQ(sw[i].qp_num, qa2->qp_num);
  }
}

TEST_F(VerbsTest, CompletionChannelWakesTheWaiter) {
  pair();
  Buffer& src = a.buffer(64);
  Buffer& dst = b.buffer(64);
  ASSERT_EQ(ibv_req_notify_cq(b.rcq, 0), 0);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(post_recv(qb, static_cast<uint64_t>(round), {sge(dst, 0, 64)}), 0);
    ASSERT_NO_FATAL_FAILURE(send_to(qa, src, 0, 64, 0));
    pollfd pfd{b.channel->fd, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 10000), 1) << "no completion event";
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(b.channel, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, b.rcq);
    EXPECT_EQ(ev_ctx, &b);
    ibv_ack_cq_events(ev_cq, 1);
    ASSERT_EQ(ibv_req_notify_cq(b.rcq, 0), 0);  // re-arm, then drain
    const auto rw = wait_wc(b.rcq, 1);
    ASSERT_EQ(rw.size(), 1u);
    EXPECT_EQ(rw[0].wr_id, static_cast<uint64_t>(round));
    EXPECT_EQ(wait_wc(a.scq, 1).size(), 1u);
  }
  // Not armed: no event.
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  pollfd pfd{b.channel->fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) == 1) {
    ASSERT_EQ(ibv_get_cq_event(b.channel, &ev_cq, &ev_ctx), 0);  // the last re-arm is still pending
    ibv_ack_cq_events(ev_cq, 1);
  }
  // A channel in use cannot be destroyed.
  EXPECT_EQ(ibv_destroy_comp_channel(b.channel), EBUSY);
}

// A CQ destroyed with an event on the channel that nobody has read: the
// event goes with it (as the kernel drops it), and another CQ's event on the
// same channel stays. Gloo's device thread waits on one channel for all its
// pairs' CQs while the main thread destroys pairs; an event that outlived
// its CQ handed it a freed CQ and a freed cq_context.
TEST_F(VerbsTest, EventOfADestroyedCqIsDiscarded) {
  pair();
  ibv_cq* doomed = ibv_create_cq(b.ctx, 16, nullptr, b.channel, 0);
  ASSERT_NE(doomed, nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = b.scq;
  init.recv_cq = doomed;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qd = ibv_create_qp(b.pd, &init);
  ASSERT_NE(qd, nullptr);
  ibv_qp* qa2 = make_qp(a);
  ASSERT_NE(qa2, nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(qa2, a, qd, b));
  Buffer& src = a.buffer(64);
  Buffer& dst = b.buffer(128);
  ASSERT_EQ(ibv_req_notify_cq(doomed, 0), 0);
  ASSERT_EQ(ibv_req_notify_cq(b.rcq, 0), 0);
  // One message to each CQ. The receiver's completion, and with it the
  // event, is released once its ACK is with the kernel, so the sender may
  // see its completion before the event is on the channel.
  for (auto [sender, receiver, offset] : {std::tuple{qa2, qd, 0}, std::tuple{qa, qb, 64}}) {
    ASSERT_EQ(post_recv(receiver, 1, {sge(dst, static_cast<size_t>(offset), 64)}), 0);
    ASSERT_NO_FATAL_FAILURE(send_to(sender, src, 0, 64, 0));
    ASSERT_EQ(wait_wc(a.scq, 1).size(), 1u);
  }
  int bytes = wait_channel_bytes(b.channel->fd, 16);
  ASSERT_EQ(bytes, 16) << "two events on the channel";
  ASSERT_EQ(wait_wc(doomed, 1).size(), 1u);  // polling takes no event
  ASSERT_EQ(ibv_destroy_qp(qd), 0);
  ASSERT_EQ(ibv_destroy_cq(doomed), 0);
  ASSERT_EQ(::ioctl(b.channel->fd, FIONREAD, &bytes), 0);
  EXPECT_EQ(bytes, 8) << "the destroyed CQ's event is still on the channel";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(b.channel, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, b.rcq);
  EXPECT_EQ(ev_ctx, &b);
  ibv_ack_cq_events(ev_cq, 1);
  ASSERT_EQ(wait_wc(b.rcq, 1).size(), 1u);
  ASSERT_EQ(::ioctl(b.channel->fd, FIONREAD, &bytes), 0);
  EXPECT_EQ(bytes, 0);
}

TEST_F(VerbsTest, BadLkeyIsALocalProtectionError) {
  pair();
  Buffer& src = a.buffer(64);
  Buffer& dst = b.buffer(64);
  // Reported as a completion, not at post.
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, ibv_sge{src.addr(), 64, src.mr->lkey + 0x1000}, dst, 99), 0);
  auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 99u);
  EXPECT_EQ(sw[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(sw[0].qp_num, qa->qp_num);
  // The QP is in error now: later work is flushed.
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qa, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, sge(src, 0, 64), dst, 100), 0);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 100u);
  EXPECT_EQ(sw[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(VerbsTest, RemoteAccessErrors) {
  pair();
  Buffer& src = a.buffer(4096);
  Buffer& readonly = b.buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, sge(src, 0, 64), readonly, 1), 0);
  auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_REM_ACCESS_ERR);

  // Out of bounds read on a fresh pair.
  qa = make_qp(a);
  qb = make_qp(b);
  ASSERT_NO_FATAL_FAILURE(connect(qa, a, qb, b));
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_READ, sge(src, 0, 128), readonly, 2, 4096 - 64), 0);
  sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 2u);
  EXPECT_EQ(sw[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(VerbsTest, ModifyQpStateMachine) {
  ibv_qp* qp = make_qp(a);
  ibv_qp* peer = make_qp(b);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  // RESET -> RTS is not a transition.
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);
  // RESET -> INIT without the required attributes.
  attr = {};
  attr.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);
  // ... with one that does not belong to it.
  attr.port_num = 1;
  EXPECT_EQ(
      ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN),
      EINVAL);
  // ... with a bad port.
  attr.port_num = 2;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
  ASSERT_EQ(to_init(qp), 0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  // INIT -> RTS skips RTR.
  EXPECT_EQ(to_rts(qp), EINVAL);
  // INIT -> RTR without MIN_RNR_TIMER.
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN), EINVAL);
  ASSERT_EQ(to_init(peer), 0);
  ASSERT_EQ(to_rtr(qp, b.ctx, peer->qp_num), 0);
  ASSERT_EQ(to_rts(qp), 0);
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
  // RTS -> RTS with an optional attribute.
  attr = {};
  attr.min_rnr_timer = 5;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_MIN_RNR_TIMER), 0);
  // RTS -> SQD is not supported.
  attr.qp_state = IBV_QPS_SQD;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);

  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_TIMEOUT, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr.dest_qp_num, peer->qp_num);
  EXPECT_EQ(attr.timeout, 14);
  EXPECT_EQ(attr.retry_cnt, 7);
  EXPECT_EQ(attr.sq_psn, kPsn);
  EXPECT_EQ(attr.rq_psn, kPsn);
  EXPECT_EQ(attr.min_rnr_timer, 5);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(attr.ah_attr.is_global, 1);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.send_cq, a.scq);
  EXPECT_EQ(init.sq_sig_all, 1);

  // Any state -> ERR -> RESET -> INIT again.
  attr = {};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  attr.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  ASSERT_EQ(to_init(qp), 0);
  // Posting to a QP that is not RTS fails at post time.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(VerbsTest, QpNumbersEncodeTheHomePort) {
  const int threads = metaroce_dv_progress_threads(a.ctx);
  ASSERT_GE(threads, 1);
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < 2 * threads; ++i) qps.push_back(make_qp(a));
  const uint16_t port = metaroce_dv_home_port(a.ctx);
  const uint32_t slot = port - metaroce::wire::kHomePortBase;
  EXPECT_EQ(qps[0]->qp_num, (slot << metaroce::wire::kQpnIndexBits) | 1);
  // QPs go to the progress threads round-robin, each numbering its own from
  // its home port.
  EXPECT_EQ(qps[static_cast<size_t>(threads)]->qp_num, qps[0]->qp_num + 1);
  for (int i = 1; i < threads; ++i)
    EXPECT_NE(qps[static_cast<size_t>(i)]->qp_num >> metaroce::wire::kQpnIndexBits, slot);
  EXPECT_NE(metaroce_dv_home_port(a.ctx), metaroce_dv_home_port(b.ctx));
}

TEST_F(VerbsTest, CreateQpRejectsWhatIsNotSupported) {
  ibv_qp_init_attr attr{};
  attr.send_cq = a.scq;
  attr.recv_cq = a.rcq;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  for (const ibv_qp_type type : {IBV_QPT_UC, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND}) {
    attr.qp_type = type;
    EXPECT_EQ(ibv_create_qp(a.pd, &attr), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
  }
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_sge = 9;
  EXPECT_EQ(ibv_create_qp(a.pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.cap.max_send_sge = 1;
  attr.cap.max_send_wr = 1u << 20;
  EXPECT_EQ(ibv_create_qp(a.pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.cap.max_send_wr = 4;
  attr.send_cq = b.scq;  // another context's CQ
  EXPECT_EQ(ibv_create_qp(a.pd, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Memory registration rules.
  char buf[64];
  EXPECT_EQ(ibv_reg_mr(a.pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_REMOTE_WRITE)),
            nullptr);  // needs LOCAL_WRITE
  EXPECT_EQ(errno, EINVAL);
  // A clear EOPNOTSUPP for what is not supported: on-demand paging, memory
  // windows, dma-buf regions, ECE.
  EXPECT_EQ(ibv_reg_mr(a.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_alloc_mw(a.pd, IBV_MW_TYPE_1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_reg_dmabuf_mr(a.pd, 0, sizeof buf, 0, 3, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_qp* qp = make_qp(a);
  ASSERT_NE(qp, nullptr);
  ibv_ece ece{};
  EXPECT_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_set_ece(qp, &ece), EOPNOTSUPP);
}

// --- what UCX, Open MPI and libfabric use: SRQ, UD + AH, extended CQs,
// async events ---------------------------------------------------------------

// Reads one async event within the timeout.
bool next_async_event(ibv_context* ctx, ibv_async_event& event) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  if (::poll(&pfd, 1, 10000) != 1) return false;
  return ibv_get_async_event(ctx, &event) == 0;
}

TEST_F(VerbsTest, DeviceReportsSrqAndAddressHandles) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(a.ctx, &d), 0);
  EXPECT_GT(d.max_srq, 0);
  EXPECT_GE(d.max_srq_wr, 4096);
  EXPECT_EQ(d.max_srq_sge, 8);
  EXPECT_GT(d.max_ah, 0);
  EXPECT_TRUE(d.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
}

TEST_F(VerbsTest, SharedReceiveQueueFeedsSeveralRcQps) {
  ibv_srq_init_attr sattr{};
  sattr.attr.max_wr = 8;
  sattr.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(b.pd, &sattr);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  ibv_qp* senders[2];
  ibv_qp* receivers[2];
  for (int i = 0; i < 2; ++i) {
    senders[i] = make_qp(a);
    ibv_qp_init_attr qattr{};
    qattr.send_cq = b.scq;
    qattr.recv_cq = b.rcq;
    qattr.srq = srq;
    qattr.qp_type = IBV_QPT_RC;
    qattr.sq_sig_all = 1;
    qattr.cap.max_send_wr = 8;
    qattr.cap.max_send_sge = 1;
    receivers[i] = ibv_create_qp(b.pd, &qattr);
    ASSERT_NE(receivers[i], nullptr) << std::strerror(errno);
    b.qps.push_back(receivers[i]);
    EXPECT_EQ(receivers[i]->srq, srq);
    ASSERT_NO_FATAL_FAILURE(connect(senders[i], a, receivers[i], b));
  }
  Buffer& src = a.buffer(4 * 1024);
  fill(src, 3);
  Buffer& dst = b.buffer(8 * 1024);
  // An SRQ-attached QP has no receive queue of its own.
  EXPECT_EQ(post_recv(receivers[0], 1, {sge(dst, 0, 64)}), EINVAL);
  for (uint32_t i = 0; i < 4; ++i) {
    ibv_sge s = sge(dst, i * 1024, 1024);
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 8u);
  EXPECT_EQ(q.srq_limit, 0u);
  // Armed at 3 of 4: the second receive taken leaves 2 and fires it once.
  q.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT), 0);
  q.srq_limit = 9;
  EXPECT_EQ(ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT), EINVAL);  // above max_wr
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);

  // Four messages over two QPs take the SRQ's WQEs in order.
  for (uint32_t i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(send_to(senders[i % 2], src, i * 1024, 1024, i));
  const auto rw = wait_wc(b.rcq, 4);
  ASSERT_EQ(rw.size(), 4u);
  std::vector<uint32_t> qpns;
  for (const ibv_wc& wc : rw) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 1024u);
    qpns.push_back(wc.qp_num);
    // Each message landed whole in the buffer of the WQE it consumed.
    const uint32_t slot = static_cast<uint32_t>(wc.wr_id - 100);
    ASSERT_LT(slot, 4u);
  }
  EXPECT_NE(std::find(qpns.begin(), qpns.end(), receivers[0]->qp_num), qpns.end());
  EXPECT_NE(std::find(qpns.begin(), qpns.end(), receivers[1]->qp_num), qpns.end());
  std::vector<uint8_t> got(dst.bytes.begin(), dst.bytes.begin() + 4096);
  std::sort(got.begin(), got.end());
  std::vector<uint8_t> want(src.bytes.begin(), src.bytes.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(wait_wc(a.scq, 4).size(), 4u);

  ibv_async_event event{};
  ASSERT_TRUE(next_async_event(b.ctx, event));
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq);
  ibv_ack_async_event(&event);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);  // disarmed

  // A receiver moved to error tells that it takes no more WQEs.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(receivers[0], &err, IBV_QP_STATE), 0);
  ASSERT_TRUE(next_async_event(b.ctx, event));
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(event.element.qp, receivers[0]);
  ibv_ack_async_event(&event);
  for (ibv_qp* qp : receivers) {
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    b.qps.erase(std::find(b.qps.begin(), b.qps.end(), qp));
  }
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// A WRITE to a responder that stopped answering (its QP reset) fails with
// RETRY_EXC_ERR after retry_cnt + 1 timeouts, and the provider says on
// stderr what the timer saw: the message, how much of it was acknowledged,
// and the paths.
TEST_F(VerbsTest, RetryExhaustionIsReportedOnStderr) {
  pair();
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qb, &reset, IBV_QP_STATE), 0);
  Buffer& src = a.buffer(3000);
  Buffer& dst = b.buffer(3000);
  testing::internal::CaptureStderr();
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, sge(src, 0, 3000), dst, 7), 0);
  const auto wc = wait_wc(a.scq, 1);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  char qp[128];
  std::snprintf(qp, sizeof qp, "QP 0x%x: transport retry counter exceeded (8 timeouts without progress, the last ",
                qa->qp_num);
  EXPECT_NE(err.find(qp), std::string::npos) << err;
  EXPECT_NE(err.find(" WRITE of 3000 bytes, attempt 0: 1 of 1 chunks sent"), std::string::npos) << err;
  EXPECT_NE(err.find("0 acknowledged (0 in any attempt)"), std::string::npos) << err;
  // b's QP was reset: a never heard anything from it.
  EXPECT_NE(err.find("; nothing ever heard from the peer;"), std::string::npos) << err;
  EXPECT_NE(err.find("[path 0 "), std::string::npos) << err;
}

// UCX flushes an RC QP with a zero-length RDMA WRITE whose rkey and address
// are 0: no memory is touched, so none is checked (IB spec 9.7.4.1.6).
TEST_F(VerbsTest, ZeroLengthRdmaChecksNoKey) {
  pair();
  for (const ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE}) {
    ibv_send_wr wr{};
    wr.wr_id = op;
    wr.opcode = op;
    wr.num_sge = 0;
    wr.wr.rdma.remote_addr = 0;
    wr.wr.rdma.rkey = 0;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
    const auto sw = wait_wc(a.scq, 1);
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(sw[0].status);
    EXPECT_EQ(sw[0].byte_len, 0u);
  }
}

TEST_F(VerbsTest, QpThatFailsReportsQpFatal) {
  pair();
  Buffer& src = a.buffer(64);
  Buffer& dst = b.buffer(64);
  // A bad lkey fails the QP.
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, ibv_sge{src.addr(), 64, src.mr->lkey + 0x1000}, dst), 0);
  ASSERT_EQ(wait_wc(a.scq, 1).size(), 1u);
  ibv_async_event event{};
  ASSERT_TRUE(next_async_event(a.ctx, event));
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(event.element.qp, qa);
  ibv_ack_async_event(&event);
  // Moving a QP to error by request is no fatal event.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qb, &err, IBV_QP_STATE), 0);
  pollfd pfd{b.ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 100), 0);
}

// As the kernel does: destroying a QP drops its events that nobody has read
// (ibv_get_async_event never names a destroyed QP), and leaves other QPs'.
TEST_F(VerbsTest, DestroyingAQpDropsItsUnreadEvents) {
  pair();
  ibv_qp* qc = make_qp(a);
  ibv_qp* qd = make_qp(b);
  ASSERT_NO_FATAL_FAILURE(connect(qc, a, qd, b));
  Buffer& src = a.buffer(64);
  Buffer& dst = b.buffer(64);
  // A bad lkey fails each QP: QP_FATAL for qa, then for qc, neither read.
  for (ibv_qp* qp : {qa, qc}) {
    ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, ibv_sge{src.addr(), 64, src.mr->lkey + 0x1000}, dst), 0);
    ASSERT_EQ(wait_wc(a.scq, 1).size(), 1u);
  }
  ASSERT_EQ(ibv_destroy_qp(qa), 0);
  a.qps.erase(std::find(a.qps.begin(), a.qps.end(), qa));
  ibv_async_event event{};
  ASSERT_TRUE(next_async_event(a.ctx, event));
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(event.element.qp, qc);
  ibv_ack_async_event(&event);
  pollfd pfd{a.ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 100), 0);
}

struct UdPair {
  ibv_qp* qp = nullptr;
  ibv_ah* ah = nullptr;  // to the other side
};

ibv_qp* make_ud_qp(Side& s, uint32_t qkey) {
  ibv_qp_init_attr qattr{};
  qattr.send_cq = s.scq;
  qattr.recv_cq = s.rcq;
  qattr.qp_type = IBV_QPT_UD;
  qattr.sq_sig_all = 1;
  qattr.cap.max_send_wr = 16;
  qattr.cap.max_recv_wr = 16;
  qattr.cap.max_send_sge = 1;
  qattr.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(s.pd, &qattr);
  EXPECT_NE(qp, nullptr) << std::strerror(errno);
  if (!qp) return nullptr;
  s.qps.push_back(qp);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qkey = qkey;
  // A UD QP takes a Q_Key, not access flags, at INIT.
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  attr.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  return qp;
}

ibv_ah* make_ah(Side& from, Side& to) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  EXPECT_EQ(ibv_query_gid(to.ctx, 1, 0, &ah.grh.dgid), 0);
  ah.port_num = 1;
  ibv_ah* h = ibv_create_ah(from.pd, &ah);
  EXPECT_NE(h, nullptr) << std::strerror(errno);
  return h;
}

int ud_send(ibv_qp* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t qkey, ibv_sge s, uint64_t wr_id,
            bool with_imm = false) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  wr.imm_data = htobe32(0xfeedf00d);
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

TEST_F(VerbsTest, UdSendArrivesWithAGrhAndImmediate) {
  constexpr uint32_t kQkey = 0x11111111;
  ibv_qp* ua = make_ud_qp(a, kQkey);
  ibv_qp* ub = make_ud_qp(b, kQkey);
  ASSERT_NE(ua, nullptr);
  ASSERT_NE(ub, nullptr);
  ibv_ah* to_b = make_ah(a, b);
  ASSERT_NE(to_b, nullptr);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(a.ctx, 1, &port), 0);
  const uint32_t mtu = 128u << port.active_mtu;
  Buffer& src = a.buffer(mtu + 1);
  fill(src, 9);
  Buffer& dst = b.buffer(2 * (40 + mtu));
  ASSERT_EQ(post_recv(ub, 7, {sge(dst, 0, 40 + mtu)}), 0);
  ASSERT_EQ(post_recv(ub, 8, {sge(dst, 40 + mtu, 40 + mtu)}), 0);
  // A message is at most the port's MTU.
  EXPECT_EQ(ud_send(ua, to_b, ub->qp_num, kQkey, sge(src, 0, mtu + 1), 1), EINVAL);
  ASSERT_EQ(ud_send(ua, to_b, ub->qp_num, kQkey, sge(src, 0, mtu), 2, true), 0);
  const auto rw = wait_wc(b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw[0].wr_id, 7u);
  EXPECT_EQ(rw[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rw[0].byte_len, 40 + mtu);
  EXPECT_EQ(rw[0].src_qp, ua->qp_num);
  EXPECT_EQ(rw[0].qp_num, ub->qp_num);
  EXPECT_EQ(rw[0].wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM), unsigned{IBV_WC_GRH | IBV_WC_WITH_IMM});
  EXPECT_EQ(be32toh(rw[0].imm_data), 0xfeedf00du);
  EXPECT_EQ(std::memcmp(dst.data() + 40, src.data(), mtu), 0);
  // The GRH: an IPv6 header whose GIDs are the datagram's addresses, as
  // ibv_create_ah_from_wc() reads it to answer.
  ibv_grh grh{};
  std::memcpy(&grh, dst.data(), sizeof grh);
  EXPECT_EQ(be32toh(grh.version_tclass_flow) >> 28, 6u);
  union ibv_gid gid_a {};
  union ibv_gid gid_b {};
  ASSERT_EQ(ibv_query_gid(a.ctx, 1, 0, &gid_a), 0);
  ASSERT_EQ(ibv_query_gid(b.ctx, 1, 0, &gid_b), 0);
  EXPECT_EQ(std::memcmp(grh.sgid.raw, gid_a.raw, 16), 0);
  EXPECT_EQ(std::memcmp(grh.dgid.raw, gid_b.raw, 16), 0);
  ibv_wc wc = rw[0];
  ibv_ah* back = ibv_create_ah_from_wc(b.pd, &wc, &grh, 1);
  ASSERT_NE(back, nullptr) << std::strerror(errno);
  Buffer& reply = b.buffer(16);
  Buffer& reply_dst = a.buffer(56);
  ASSERT_EQ(post_recv(ua, 9, {sge(reply_dst, 0, 56)}), 0);
  ASSERT_EQ(ud_send(ub, back, wc.src_qp, kQkey, sge(reply, 0, 16), 3), 0);
  const auto replies = wait_wc(a.rcq, 1);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].byte_len, 56u);
  EXPECT_EQ(replies[0].src_qp, ub->qp_num);
  EXPECT_EQ(wait_wc(a.scq, 1).size(), 1u);
  EXPECT_EQ(wait_wc(b.scq, 1).size(), 1u);
  // Another Q_Key is dropped: the second receive stays posted until a
  // datagram with the right one comes. (A wr Q_Key with the high bit set
  // means the sending QP's own.)
  ASSERT_EQ(ud_send(ua, to_b, ub->qp_num, kQkey + 1, sge(src, 0, 8), 4), 0);
  ASSERT_EQ(ud_send(ua, to_b, ub->qp_num, 0x80000000u, sge(src, 0, 8), 5), 0);
  const auto second = wait_wc(b.rcq, 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].wr_id, 8u);
  EXPECT_EQ(second[0].byte_len, 48u);
  EXPECT_EQ(wait_wc(a.scq, 2).size(), 2u);
  // A later datagram (with an immediate) fills the next receive: nothing
  // else completed on B in between.
  ASSERT_EQ(post_recv(ub, 9, {sge(dst, 0, 40 + mtu)}), 0);
  ASSERT_EQ(ud_send(ua, to_b, ub->qp_num, kQkey, sge(src, 0, 8), 6, true), 0);
  const auto third = wait_wc(b.rcq, 1);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].wr_id, 9u);
  EXPECT_NE(third[0].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(wait_wc(a.scq, 1).size(), 1u);
  EXPECT_EQ(ibv_destroy_ah(back), 0);
  EXPECT_EQ(ibv_destroy_ah(to_b), 0);
}

TEST_F(VerbsTest, ExtendedCqReadsEveryField) {
  ibv_cq_init_attr_ex cattr{};
  cattr.cqe = 64;
  cattr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
  cattr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  cattr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  ibv_cq_ex* cq = ibv_create_cq_ex(b.ctx, &cattr);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  ibv_cq_init_attr_ex timestamps = cattr;
  timestamps.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  EXPECT_EQ(ibv_create_cq_ex(b.ctx, &timestamps), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  qa = make_qp(a);
  ibv_qp_init_attr qattr{};
  qattr.send_cq = b.scq;
  qattr.recv_cq = ibv_cq_ex_to_cq(cq);
  qattr.qp_type = IBV_QPT_RC;
  qattr.cap.max_send_wr = 8;
  qattr.cap.max_recv_wr = 8;
  qattr.cap.max_send_sge = 1;
  qattr.cap.max_recv_sge = 1;
  qb = ibv_create_qp(b.pd, &qattr);
  ASSERT_NE(qb, nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(qa, a, qb, b));
  Buffer& src = a.buffer(256);
  Buffer& dst = b.buffer(3 * 256);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post_recv(qb, 10 + i, {sge(dst, i * 256, 256)}), 0);
  for (uint32_t i = 0; i < 3; ++i) {
    ibv_sge s = sge(src, 0, 100 + i);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htobe32(0x1000 + i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qa, &wr, &bad), 0);
  }
  std::vector<uint64_t> ids;
  const auto deadline = Clock::now() + kTimeout;
  ibv_poll_cq_attr pattr{};
  while (ids.size() < 3 && Clock::now() < deadline) {
    int rc = ibv_start_poll(cq, &pattr);
    if (rc == ENOENT) continue;
    ASSERT_EQ(rc, 0);
    do {
      const uint32_t i = static_cast<uint32_t>(cq->wr_id - 10);
      EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
      EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_RECV);
      EXPECT_EQ(ibv_wc_read_byte_len(cq), 100 + i);
      EXPECT_EQ(be32toh(ibv_wc_read_imm_data(cq)), 0x1000 + i);
      EXPECT_EQ(ibv_wc_read_qp_num(cq), qb->qp_num);
      EXPECT_EQ(ibv_wc_read_src_qp(cq), qa->qp_num);
      EXPECT_EQ(ibv_wc_read_wc_flags(cq), unsigned{IBV_WC_WITH_IMM});
      ids.push_back(cq->wr_id);
    } while ((rc = ibv_next_poll(cq)) == 0);
    EXPECT_EQ(rc, ENOENT);
    ibv_end_poll(cq);
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(ibv_start_poll(cq, &pattr), ENOENT);
  EXPECT_EQ(wait_wc(a.scq, 3).size(), 3u);
  EXPECT_EQ(ibv_destroy_qp(qb), 0);
  qb = nullptr;
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

TEST_F(VerbsTest, CqInUseCannotBeDestroyed) {
  ibv_qp* qp = make_qp(a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(a.scq), EBUSY);
}

TEST_F(VerbsTest, SendBeforeReceiveIsRetried) {
  pair();
  Buffer& src = a.buffer(128);
  Buffer& dst = b.buffer(128);
  fill(src, 5);
  ASSERT_NO_FATAL_FAILURE(send_to(qa, src, 0, 128, 3));
  // No receive yet: receiver-not-ready, retried (rnr_retry = 7: forever).
  // A bounded absence check: verbs show no event for an RNR retry.
  EXPECT_EQ(wait_wc(a.scq, 1, std::chrono::milliseconds(30)).size(), 0u);
  ASSERT_EQ(post_recv(qb, 4, {sge(dst, 0, 128)}), 0);
  const auto sw = wait_wc(a.scq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wait_wc(b.rcq, 1).size(), 1u);
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST_F(VerbsTest, WorkRequestApi) {
  ibv_qp_init_attr_ex ax{};
  ax.send_cq = a.scq;
  ax.recv_cq = a.rcq;
  ax.qp_type = IBV_QPT_RC;
  ax.cap.max_send_wr = 16;
  ax.cap.max_recv_wr = 16;
  ax.cap.max_send_sge = 2;
  ax.cap.max_recv_sge = 2;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ax.pd = a.pd;
  ax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                      IBV_QP_EX_WITH_RDMA_READ;
  qa = ibv_create_qp_ex(a.ctx, &ax);
  ASSERT_NE(qa, nullptr) << std::strerror(errno);
  a.qps.push_back(qa);
  EXPECT_EQ(qa->context, a.ctx);
  EXPECT_EQ(qa->pd, a.pd);
  EXPECT_EQ(qa->state, IBV_QPS_RESET);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(qa);
  ASSERT_NE(qx, nullptr);
  qb = make_qp(b);
  ASSERT_NO_FATAL_FAILURE(connect(qa, a, qb, b));

  Buffer& src = a.buffer(8192);
  Buffer& dst = b.buffer(8192);
  Buffer& counter = b.buffer(8);
  Buffer& old = a.buffer(8);
  fill(src, 33);
  uint64_t start = 40;
  std::memcpy(counter.data(), &start, 8);
  ASSERT_EQ(post_recv(qb, 77, {sge(dst, 4096, 4096)}), 0);
  char message[] = "inline hello";

  ibv_wr_start(qx);
  qx->wr_id = 1;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, dst.mr->rkey, dst.addr());
  ibv_wr_set_sge(qx, src.mr->lkey, src.addr(), 4096);
  qx->wr_id = 2;
  qx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send_imm(qx, htobe32(0xabcd));
  ibv_wr_set_inline_data(qx, message, sizeof message);
  qx->wr_id = 3;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_fetch_add(qx, counter.mr->rkey, counter.addr(), 2);
  ibv_wr_set_sge(qx, old.mr->lkey, old.addr(), 8);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  std::memset(message, 0, sizeof message);

  const auto sw = wait_wc(a.scq, 3);
  ASSERT_EQ(sw.size(), 3u);
  EXPECT_EQ(sw[0].wr_id, 1u);
  EXPECT_EQ(sw[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(sw[1].wr_id, 2u);
  EXPECT_EQ(sw[1].opcode, IBV_WC_SEND);
  EXPECT_EQ(sw[2].wr_id, 3u);
  EXPECT_EQ(sw[2].opcode, IBV_WC_FETCH_ADD);
  for (const ibv_wc& w : sw) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  const auto rw = wait_wc(b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].imm_data, htobe32(0xabcd));
  EXPECT_EQ(std::memcmp(dst.data() + 4096, "inline hello", 13), 0);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 4096), 0);
  uint64_t v = 0;
  std::memcpy(&v, old.data(), 8);
  EXPECT_EQ(v, 40u);
  std::memcpy(&v, counter.data(), 8);
  EXPECT_EQ(v, 42u);

  // An unsupported builder fails the batch; abort discards it.
  ibv_wr_start(qx);
  qx->wr_id = 9;
  ibv_wr_send_inv(qx, 1);
  EXPECT_EQ(ibv_wr_complete(qx), EOPNOTSUPP);
  ibv_wr_start(qx);
  ibv_wr_send(qx);
  ibv_wr_abort(qx);
  // A write posted next is the next completion: the refused and the
  // aborted batches posted nothing.
  ibv_wr_start(qx);
  qx->wr_id = 10;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, dst.mr->rkey, dst.addr());
  ibv_wr_set_sge(qx, src.mr->lkey, src.addr(), 64);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  const auto next = wait_wc(a.scq, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].wr_id, 10u);
  EXPECT_EQ(next[0].opcode, IBV_WC_RDMA_WRITE);
}

TEST_F(VerbsTest, ManyQueuePairsAtOnce) {
  constexpr int kPairs = 8;
  constexpr size_t kSize = 64 * 1024;
  std::vector<ibv_qp*> as, bs;
  for (int i = 0; i < kPairs; ++i) {
    as.push_back(make_qp(a));
    bs.push_back(make_qp(b));
    ASSERT_NO_FATAL_FAILURE(connect(as.back(), a, bs.back(), b));
  }
  Buffer& src = a.buffer(kSize * kPairs);
  Buffer& dst = b.buffer(kSize * kPairs);
  fill(src, 11);
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(post_recv(bs[i], static_cast<uint64_t>(i), {sge(dst, i * kSize, kSize)}), 0);
    ASSERT_NO_FATAL_FAILURE(
        send_to(as[i], src, static_cast<uint32_t>(i * kSize), static_cast<uint32_t>(kSize), static_cast<uint64_t>(i)));
  }
  const auto rw = wait_wc(b.rcq, kPairs);
  ASSERT_EQ(rw.size(), static_cast<size_t>(kPairs));
  for (const ibv_wc& w : rw) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wait_wc(a.scq, kPairs).size(), static_cast<size_t>(kPairs));
  EXPECT_EQ(src.bytes, dst.bytes);
}

// The application's thread runs the engine in post and poll (and sends what
// they made due itself): once its queues reached their working depth, none
// of that may allocate, as a NIC's work and completion queues do not.
// perftest -D calls fopen in its SIGALRM handler: a signal landing inside
// malloc deadlocked it (ring_queue.h).
TEST_F(VerbsTest, SteadyStatePostAndPollDoNotAllocate) {
  pair();
  constexpr uint32_t kSize = 64 * 1024;
  constexpr uint32_t kInline = 64;
  Buffer& src = a.buffer(kSize);
  Buffer& dst = b.buffer(kSize);
  Buffer& back = a.buffer(kSize);
  fill(src, 5);
  ibv_sge write_sge = sge(src, 0, kSize);
  ibv_sge read_sge = sge(back, 0, kSize);
  ibv_sge send_sge = sge(src, 0, kInline);
  ibv_sge recv_sge = sge(dst, 0, kSize);
  ibv_send_wr wrs[3]{};
  wrs[0].opcode = IBV_WR_RDMA_WRITE;
  wrs[0].sg_list = &write_sge;
  wrs[0].wr.rdma = {dst.addr(), dst.mr->rkey};
  wrs[1].opcode = IBV_WR_RDMA_READ;
  wrs[1].sg_list = &read_sge;
  wrs[1].wr.rdma = {dst.addr(), dst.mr->rkey};
  wrs[2].opcode = IBV_WR_SEND;
  wrs[2].send_flags = IBV_SEND_INLINE;
  wrs[2].sg_list = &send_sge;
  for (int i = 0; i < 2; ++i) wrs[i].next = &wrs[i + 1];
  for (ibv_send_wr& wr : wrs) wr.num_sge = 1;
  ibv_recv_wr recv{};
  recv.sg_list = &recv_sge;
  recv.num_sge = 1;

  // One round: a receive, then a WRITE, a READ and an inline SEND, polled
  // until all four complete. Returns false on an error or after 10 s.
  const auto round = [&] {
    ibv_recv_wr* bad_recv = nullptr;
    ibv_send_wr* bad_send = nullptr;
    if (ibv_post_recv(qb, &recv, &bad_recv) != 0 || ibv_post_send(qa, wrs, &bad_send) != 0) return false;
    int sends = 0, recvs = 0;
    ibv_wc wc[8];
    const auto deadline = Clock::now() + kTimeout;
    while ((sends < 3 || recvs < 1) && Clock::now() < deadline) {
      const int n = ibv_poll_cq(a.scq, 8, wc);
      const int m = ibv_poll_cq(b.rcq, 8, wc + 4);
      for (int i = 0; i < n; ++i) sends += wc[i].status == IBV_WC_SUCCESS ? 1 : 100;
      for (int i = 0; i < m; ++i) recvs += wc[4 + i].status == IBV_WC_SUCCESS ? 1 : 100;
    }
    return sends == 3 && recvs == 1;
  };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(round()) << "warm-up round " << i;

  count_allocations = true;
  allocations = 0;
  bool ok = true;
  for (int i = 0; i < 500 && ok; ++i) ok = round();
  count_allocations = false;
  ASSERT_TRUE(ok);
  EXPECT_EQ(allocations, 0u) << "allocations or frees by 500 rounds of post and poll";
  EXPECT_EQ(std::memcmp(back.data(), src.data(), kSize), 0);

  // The count sees the provider's allocations: creating a CQ makes some.
  count_allocations = true;
  allocations = 0;
  ibv_cq* cq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  count_allocations = false;
  ASSERT_NE(cq, nullptr);
  EXPECT_GT(allocations, 0u);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// Signals the application directs at its process (alarm(), SIGINT) reach
// its own threads, never one the provider started: each of those blocks them.
TEST_F(VerbsTest, ProviderThreadsBlockAsynchronousSignals) {
  pair();
  const std::string self = std::to_string(gettid());
  int threads = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (task.path().filename() == self) continue;
    std::ifstream status(task.path() / "status");
    std::string line;
    uint64_t blocked = 0;
    while (std::getline(status, line))
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    for (int sig : {SIGALRM, SIGINT, SIGTERM, SIGCHLD, SIGUSR1})
      EXPECT_TRUE(blocked & (uint64_t{1} << (sig - 1)))
          << "thread " << task.path().filename() << " takes signal " << sig;
    ++threads;
  }
  EXPECT_GE(threads, 2) << "each context runs a progress thread";
}

// Two contexts with two progress threads each (METAROCE_PROGRESS_THREADS,
// read when a context opens): QPs alternate between the threads, while CQs,
// memory regions and atomics span both (docs/verbs.md, "Progress threads").
class ProgressThreadsTest : public ::testing::Test {
 protected:
  class ThreadsFromEnv {
   public:
    ThreadsFromEnv() {
      if (const char* old = std::getenv(kName)) old_ = old;
      setenv(kName, "2", 1);
    }
    ~ThreadsFromEnv() {
      if (old_.empty()) unsetenv(kName);
      else setenv(kName, old_.c_str(), 1);
    }

   private:
    static constexpr const char* kName = "METAROCE_PROGRESS_THREADS";
    std::string old_;
  };

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open_side(a));
    ASSERT_NO_FATAL_FAILURE(open_side(b));
    ASSERT_EQ(metaroce_dv_progress_threads(a.ctx), 2);
    ASSERT_EQ(metaroce_dv_progress_threads(b.ctx), 2);
    for (int i = 0; i < 2; ++i) {
      qa[i] = make_qp(a);
      qb[i] = make_qp(b);
      ASSERT_NE(qa[i], nullptr);
      ASSERT_NE(qb[i], nullptr);
    }
    // Each on its own progress thread's home port.
    ASSERT_NE(qa[0]->qp_num >> metaroce::wire::kQpnIndexBits, qa[1]->qp_num >> metaroce::wire::kQpnIndexBits);
    ASSERT_NE(qb[0]->qp_num >> metaroce::wire::kQpnIndexBits, qb[1]->qp_num >> metaroce::wire::kQpnIndexBits);
    // Crossed: a's first thread talks to b's second and the other way round.
    ASSERT_NO_FATAL_FAILURE(connect(qa[0], a, qb[1], b));
    ASSERT_NO_FATAL_FAILURE(connect(qa[1], a, qb[0], b));
  }

  ThreadsFromEnv env_;  // first: the contexts open with it
  Side a, b;
  ibv_qp* qa[2] = {};
  ibv_qp* qb[2] = {};
};

TEST_F(ProgressThreadsTest, OneCqAndOneMemoryRegionServeBothThreads) {
  constexpr size_t kHalf = 1 << 20;
  Buffer& local = a.buffer(2 * kHalf);
  Buffer& remote = b.buffer(2 * kHalf);
  fill(local, 3);
  ASSERT_EQ(post_rdma(qa[0], IBV_WR_RDMA_WRITE, sge(local, 0, kHalf), remote, 100, 0), 0);
  ASSERT_EQ(post_rdma(qa[1], IBV_WR_RDMA_WRITE, sge(local, kHalf, kHalf), remote, 101, kHalf), 0);
  const std::vector<ibv_wc> wc = wait_wc(a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  std::vector<uint32_t> qpns;
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    qpns.push_back(w.qp_num);
  }
  std::sort(qpns.begin(), qpns.end());
  EXPECT_EQ(qpns,
            (std::vector<uint32_t>{std::min(qa[0]->qp_num, qa[1]->qp_num), std::max(qa[0]->qp_num, qa[1]->qp_num)}));
  EXPECT_EQ(local.bytes, remote.bytes);

  // Receives of both threads' QPs complete on b's one receive CQ.
  Buffer& inbox = b.buffer(64);
  ASSERT_EQ(post_recv(qb[0], 1, {sge(inbox, 0, 32)}), 0);
  ASSERT_EQ(post_recv(qb[1], 2, {sge(inbox, 32, 32)}), 0);
  for (ibv_qp* qp : qa) ASSERT_NO_FATAL_FAILURE(send_to(qp, local, 0, 32, 0));
  const std::vector<ibv_wc> received = wait_wc(b.rcq, 2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_NE(received[0].qp_num, received[1].qp_num);
  EXPECT_EQ(std::memcmp(inbox.data(), local.data(), 32), 0);
  EXPECT_EQ(std::memcmp(inbox.data() + 32, local.data(), 32), 0);
}

TEST_F(ProgressThreadsTest, AtomicsFromBothThreadsAreAtomicTogether) {
  constexpr uint64_t kEach = 400;
  constexpr uint64_t kDepth = 8;
  Buffer& counter = b.buffer(8);
  std::memset(counter.data(), 0, 8);
  Buffer& results = a.buffer(2 * kEach * 8);
  uint64_t posted[2] = {0, 0};
  uint64_t done = 0;
  const auto deadline = Clock::now() + kTimeout;
  while (done < 2 * kEach && Clock::now() < deadline) {
    for (int q = 0; q < 2; ++q) {
      while (posted[q] < kEach && posted[q] - (done / 2) < kDepth) {
        const uint64_t slot = static_cast<uint64_t>(q) * kEach + posted[q];
        ibv_sge s = sge(results, slot * 8, 8);
        ibv_send_wr wr{};
        wr.wr_id = slot;
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.wr.atomic.remote_addr = counter.addr();
        wr.wr.atomic.rkey = counter.mr->rkey;
        wr.wr.atomic.compare_add = 1;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qa[q], &wr, &bad), 0);
        ++posted[q];
      }
    }
    ibv_wc wc[16];
    const int n = ibv_poll_cq(a.scq, 16, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
    done += static_cast<uint64_t>(n);
  }
  ASSERT_EQ(done, 2 * kEach);
  uint64_t total = 0;
  std::memcpy(&total, counter.data(), 8);
  EXPECT_EQ(total, 2 * kEach);
  // Every value the counter held was fetched exactly once.
  std::vector<uint64_t> fetched(2 * kEach);
  std::memcpy(fetched.data(), results.data(), fetched.size() * 8);
  std::sort(fetched.begin(), fetched.end());
  std::vector<uint64_t> every(2 * kEach);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(fetched, every);
}

TEST_F(ProgressThreadsTest, ACqUsedOnEitherThreadCannotBeDestroyed) {
  ibv_cq* cq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  ibv_qp* first = ibv_create_qp(a.pd, &attr);   // the first thread's (SetUp made two)
  ibv_qp* second = ibv_create_qp(a.pd, &attr);  // the second's
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->qp_num >> metaroce::wire::kQpnIndexBits, qa[0]->qp_num >> metaroce::wire::kQpnIndexBits);
  EXPECT_EQ(ibv_destroy_qp(first), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(second), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(ProgressThreadsTest, ADeregisteredRegionIsGoneForBothThreads) {
  Buffer& local = a.buffer(4096);
  auto remote = std::make_unique<Buffer>(4096);
  remote->mr = ibv_reg_mr(b.pd, remote->data(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(remote->mr, nullptr);
  for (int q = 0; q < 2; ++q) {
    ASSERT_EQ(post_rdma(qa[q], IBV_WR_RDMA_WRITE, sge(local, 0, 4096), *remote, static_cast<uint64_t>(q)), 0);
    const std::vector<ibv_wc> wc = wait_wc(a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  }
  const uint32_t rkey = remote->mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(remote->mr), 0);
  remote->mr = nullptr;
  for (int q = 0; q < 2; ++q) {
    ibv_sge s = sge(local, 0, 64);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote->addr();
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qa[q], &wr, &bad), 0);
    const std::vector<ibv_wc> wc = wait_wc(a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << "QP " << q;
  }
}

}  // namespace
