// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Proves provider/verbs/ibverbs_private.h against the installed libibverbs
// (rdma-core 44, IBVERBS_PRIVATE_34):
//
//  * a test provider whose 76 context ops are distinct functions that record
//    their index; every public ibv_* entry point that dispatches to an op is
//    called through a context opened with ibv_open_device(), and must land on
//    the op at the same position: verbs_set_ops() copied each field of our
//    struct verbs_context_ops to where libibverbs dispatches it;
//  * the verbs_device fields libibverbs uses: ops (it finds alloc_context),
//    sysfs == NULL (no character device: cmd_fd == -1, our async_fd kept),
//    refcount (open takes a reference, close drops it), core_support
//    (ibv_reg_mr_iova2 masks optional access flags unless bit 0 is set);
//  * verbs_qp.comp_mask (ibv_qp_to_qp_ex) and verbs_mr.mr_type
//    (ibv_rereg_mr) where libibverbs reads them;
//  * the private functions resolve at version IBVERBS_PRIVATE_34.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ibverbs_private.h"

extern "C" size_t abi_c_sizeof_context_ops(void);
extern "C" size_t abi_c_offsetof_verbs_device_sysfs(void);

namespace {

// Offsets read from the installed libibverbs.so.1 (objdump -d): verbs_open_device
// loads device->ops at +0x298 and device->sysfs at +0x2b8, ibv_reg_mr_iova2
// tests core_support at +0x2c0, ibv_qp_to_qp_ex tests the byte at +0x160,
// verbs_set_ops reads ops offsets 0x0 .. 0x258. The runtime tests below prove
// the same facts by behaviour.
// try_driver() reads match_min/max_abi_version at +0x8/+0xc, match_table at
// +0x10, calls match_device at +0x20, alloc_device at +0x38 and
// uninit_device at +0x40; ibv_import_device() calls import_context at +0x30.
static_assert(offsetof(verbs_device_ops, match_min_abi_version) == 0x8);
static_assert(offsetof(verbs_device_ops, match_max_abi_version) == 0xc);
static_assert(offsetof(verbs_device_ops, match_table) == 0x10);
static_assert(offsetof(verbs_device_ops, static_providers) == 0x18);
static_assert(offsetof(verbs_device_ops, match_device) == 0x20);
static_assert(offsetof(verbs_device_ops, alloc_context) == 0x28);
static_assert(offsetof(verbs_device_ops, import_context) == 0x30);
static_assert(offsetof(verbs_device_ops, alloc_device) == 0x38);
static_assert(offsetof(verbs_device_ops, uninit_device) == 0x40);
static_assert(sizeof(ibv_device) == 0x298);
static_assert(offsetof(verbs_device, ops) == 0x298);
static_assert(offsetof(verbs_device, refcount) == 0x2a0);
static_assert(offsetof(verbs_device, sysfs) == 0x2b8);
static_assert(offsetof(verbs_device, core_support) == 0x2c0);
static_assert(offsetof(verbs_qp, comp_mask) == 0x160);
static_assert(sizeof(verbs_context_ops) == 76 * sizeof(void*));
static_assert(offsetof(verbs_context_ops, query_device_ex) == 58 * sizeof(void*));
static_assert(offsetof(verbs_context_ops, modify_qp) == 47 * sizeof(void*));
static_assert(offsetof(verbs_mr, mr_type) == sizeof(ibv_mr));

int g_called = -1;
std::vector<void*> g_allocs;

void* fresh() {
  void* p = std::calloc(1, 8192);
  g_allocs.push_back(p);
  return p;
}

template <typename T>
T result() {
  if constexpr (std::is_pointer_v<T>) return static_cast<T>(fresh());
  else return T{};
}

template <int N, typename Sig>
struct Rec;
template <int N, typename R, typename... A>
struct Rec<N, R (*)(A...)> {
  static R fn(A...) {
    g_called = N;
    if constexpr (!std::is_void_v<R>) return result<R>();
  }
};

// clang-format 14 re-indents this X-macro list each time it runs.
// clang-format off
#define CONTEXT_OPS(X)                                                                           \
  X(0, advise_mr) X(1, alloc_dm) X(2, alloc_mw) X(3, alloc_null_mr) X(4, alloc_parent_domain)     \
  X(5, alloc_pd) X(6, alloc_td) X(7, async_event) X(8, attach_counters_point_flow)                \
  X(9, attach_mcast) X(10, bind_mw) X(11, close_xrcd) X(12, cq_event) X(13, create_ah)            \
  X(14, create_counters) X(15, create_cq) X(16, create_cq_ex) X(17, create_flow)                  \
  X(18, create_flow_action_esp) X(19, create_qp) X(20, create_qp_ex) X(21, create_rwq_ind_table)  \
  X(22, create_srq) X(23, create_srq_ex) X(24, create_wq) X(25, dealloc_mw) X(26, dealloc_pd)     \
  X(27, dealloc_td) X(28, dereg_mr) X(29, destroy_ah) X(30, destroy_counters) X(31, destroy_cq)   \
  X(32, destroy_flow) X(33, destroy_flow_action) X(34, destroy_qp) X(35, destroy_rwq_ind_table)   \
  X(36, destroy_srq) X(37, destroy_wq) X(38, detach_mcast) /* 39 free_context: below */           \
  X(40, free_dm) X(41, get_srq_num) X(42, import_dm) X(43, import_mr) X(44, import_pd)            \
  X(45, modify_cq) X(46, modify_flow_action_esp) X(47, modify_qp) X(48, modify_qp_rate_limit)     \
  X(49, modify_srq) X(50, modify_wq) X(51, open_qp) X(52, open_xrcd) X(53, poll_cq)               \
  X(54, post_recv) X(55, post_send) X(56, post_srq_ops) X(57, post_srq_recv)                      \
  /* 58 query_device_ex, 68 reg_mr: below */                                                       \
  X(59, query_ece) X(60, query_port) X(61, query_qp) X(62, query_qp_data_in_order)                \
  X(63, query_rt_values) X(64, query_srq) X(65, read_counters) X(66, reg_dm_mr)                   \
  X(67, reg_dmabuf_mr) X(69, req_notify_cq) X(70, rereg_mr) X(71, resize_cq) X(72, set_ece)       \
  X(73, unimport_dm) X(74, unimport_mr) X(75, unimport_pd)
// clang-format on

// --- the test provider ------------------------------------------------------

struct TestContext {
  verbs_context vctx;
  int async_write_fd;
};

int g_alloc_cmd_fd = 12345;
void* g_alloc_private = nullptr;
int g_reg_mr_access = -1;
size_t g_query_device_size = 0;
const void* g_query_device_input = reinterpret_cast<const void*>(1);

void test_free_context(ibv_context* context) {
  g_called = 39;
  auto* tc = reinterpret_cast<TestContext*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  ::close(tc->async_write_fd);
  verbs_uninit_context(&tc->vctx);
  std::free(tc);
}

int test_query_device_ex(ibv_context*, const ibv_query_device_ex_input* input, ibv_device_attr_ex*, size_t attr_size) {
  g_called = 58;
  g_query_device_input = input;
  g_query_device_size = attr_size;
  return 0;
}

ibv_mr* test_reg_mr(ibv_pd*, void*, size_t, uint64_t, int access) {
  g_called = 68;
  g_reg_mr_access = access;
  return static_cast<ibv_mr*>(fresh());
}

verbs_context_ops make_ops() {
  verbs_context_ops ops{};
#define SET_OP(index, name) ops.name = &Rec<index, decltype(verbs_context_ops::name)>::fn;
  CONTEXT_OPS(SET_OP)
#undef SET_OP
  ops.free_context = test_free_context;
  ops.query_device_ex = test_query_device_ex;
  ops.reg_mr = test_reg_mr;
  return ops;
}

const verbs_context_ops g_ops = make_ops();

verbs_context* test_alloc_context(ibv_device* device, int cmd_fd, void* private_data) {
  g_alloc_cmd_fd = cmd_fd;
  g_alloc_private = private_data;
  auto* tc = static_cast<TestContext*>(_verbs_init_and_alloc_context(
      device, cmd_fd, sizeof(TestContext),
      reinterpret_cast<verbs_context*>(static_cast<uintptr_t>(offsetof(TestContext, vctx))), 0));
  if (!tc) return nullptr;
  int fds[2];
  if (::pipe(fds) != 0) {
    verbs_uninit_context(&tc->vctx);
    std::free(tc);
    return nullptr;
  }
  tc->vctx.context.async_fd = fds[0];
  tc->async_write_fd = fds[1];
  verbs_set_ops(&tc->vctx, &g_ops);
  return &tc->vctx;
}

const verbs_device_ops g_device_ops = {
    "abitest", 0, 0x7fffffff, nullptr, nullptr, nullptr, test_alloc_context, nullptr, nullptr, nullptr,
};

struct TestDevice {
  verbs_device vdev;
};

TestDevice* make_device() {
  auto* d = static_cast<TestDevice*>(std::calloc(1, sizeof(TestDevice)));
  std::strcpy(d->vdev.device.name, "abitest0");
  d->vdev.device.node_type = IBV_NODE_CA;
  d->vdev.device.transport_type = IBV_TRANSPORT_IB;
  d->vdev.ops = &g_device_ops;
  d->vdev.refcount = 1;
  d->vdev.sysfs = nullptr;
  return d;
}

int refcount(TestDevice* d) { return __atomic_load_n(&d->vdev.refcount, __ATOMIC_ACQUIRE); }

class AbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device = make_device();
    context = ibv_open_device(&device->vdev.device);
    ASSERT_NE(context, nullptr) << std::strerror(errno);
  }
  void TearDown() override {
    if (context) ibv_close_device(context);
    for (void* p : g_allocs) std::free(p);
    g_allocs.clear();
    std::free(device);
  }
  // Runs `call` and returns the index of the op it reached.
  template <typename F>
  int op_of(F&& call) {
    g_called = -1;
    call();
    return g_called;
  }
  template <typename T>
  T* object() {
    auto* p = static_cast<T*>(fresh());
    p->context = context;
    return p;
  }

  TestDevice* device = nullptr;
  ibv_context* context = nullptr;
};

TEST_F(AbiTest, OpenDeviceWithoutSysfsPassesNoCommandFd) {
  EXPECT_EQ(g_alloc_cmd_fd, -1);        // verbs_device.sysfs == NULL: no cdev opened
  EXPECT_EQ(g_alloc_private, nullptr);  // ibv_open_device passes no private data
  EXPECT_GE(context->async_fd, 0);      // ours, not replaced by the kernel's
  EXPECT_EQ(context->device, &device->vdev.device);
  EXPECT_EQ(refcount(device), 2);  // the context holds a device reference
}

TEST_F(AbiTest, VerbsOpenDevicePassesPrivateData) {
  int marker = 0;
  ibv_context* second = verbs_open_device(&device->vdev.device, &marker);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(g_alloc_private, &marker);
  EXPECT_EQ(refcount(device), 3);
  EXPECT_EQ(op_of([&] { ibv_close_device(second); }), 39);
  EXPECT_EQ(refcount(device), 2);
}

TEST_F(AbiTest, CloseDropsTheDeviceReference) {
  EXPECT_EQ(op_of([&] { ibv_close_device(context); }), 39);
  context = nullptr;
  EXPECT_EQ(refcount(device), 1);
}

TEST_F(AbiTest, EveryContextOpIsDispatchedFromItsPublicEntryPoint) {
  ibv_device_attr dattr{};
  EXPECT_EQ(op_of([&] { ibv_query_device(context, &dattr); }), 58);
  EXPECT_EQ(g_query_device_size, sizeof(ibv_device_attr));
  EXPECT_EQ(g_query_device_input, nullptr);
  ibv_device_attr_ex dattr_ex{};
  EXPECT_EQ(op_of([&] { ibv_query_device_ex(context, nullptr, &dattr_ex); }), 58);
  ibv_port_attr pattr{};
  EXPECT_EQ(op_of([&] { ibv_query_port(context, 1, &pattr); }), 60);

  ibv_pd* pd = nullptr;
  EXPECT_EQ(op_of([&] { pd = ibv_alloc_pd(context); }), 5);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(pd->context, context);
  ibv_parent_domain_init_attr pdattr{};
  pdattr.pd = pd;
  EXPECT_EQ(op_of([&] { ibv_alloc_parent_domain(context, &pdattr); }), 4);
  ibv_td_init_attr tdattr{};
  EXPECT_EQ(op_of([&] { ibv_alloc_td(context, &tdattr); }), 6);
  EXPECT_EQ(op_of([&] { ibv_dealloc_td(object<ibv_td>()); }), 27);

  char buf[64];
  ibv_mr* mr = nullptr;
  EXPECT_EQ(op_of([&] { mr = ibv_reg_mr(pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)); }), 68);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(op_of([&] { ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0); }), 70);
  EXPECT_EQ(op_of([&] { ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, 0); }), 67);
  EXPECT_EQ(op_of([&] { ibv_alloc_null_mr(pd); }), 3);
  ibv_sge sge{};
  EXPECT_EQ(op_of([&] { ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1); }), 0);
  ibv_alloc_dm_attr dmattr{};
  ibv_dm* dm = nullptr;
  EXPECT_EQ(op_of([&] { dm = ibv_alloc_dm(context, &dmattr); }), 1);
  dm->context = context;
  EXPECT_EQ(op_of([&] { ibv_reg_dm_mr(pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED); }), 66);
  EXPECT_EQ(op_of([&] { ibv_free_dm(dm); }), 40);
  EXPECT_EQ(op_of([&] { ibv_import_dm(context, 7); }), 42);
  EXPECT_EQ(op_of([&] { ibv_unimport_dm(object<ibv_dm>()); }), 73);
  EXPECT_EQ(op_of([&] { ibv_import_pd(context, 7); }), 44);
  EXPECT_EQ(op_of([&] { ibv_import_mr(pd, 7); }), 43);
  ibv_pd* other_pd = object<ibv_pd>();
  EXPECT_EQ(op_of([&] { ibv_unimport_pd(other_pd); }), 75);
  EXPECT_EQ(op_of([&] { ibv_unimport_mr(object<ibv_mr>()); }), 74);

  ibv_mw* mw = nullptr;
  EXPECT_EQ(op_of([&] { mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1); }), 2);
  mw->context = context;
  mw->type = IBV_MW_TYPE_1;
  mw->pd = pd;

  ibv_cq* cq = nullptr;
  EXPECT_EQ(op_of([&] { cq = ibv_create_cq(context, 16, nullptr, nullptr, 0); }), 15);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->context, context);  // verbs_init_cq ran
  ibv_cq_init_attr_ex cqattr{};
  cqattr.cqe = 4;
  ibv_cq_ex* cqx = nullptr;
  EXPECT_EQ(op_of([&] { cqx = ibv_create_cq_ex(context, &cqattr); }), 16);
  ASSERT_NE(cqx, nullptr);
  EXPECT_EQ(ibv_cq_ex_to_cq(cqx)->context, context);  // verbs_init_cq ran (__lib_ibv_create_cq_ex)
  ibv_wc wc[1];
  EXPECT_EQ(op_of([&] { ibv_poll_cq(cq, 1, wc); }), 53);
  EXPECT_EQ(op_of([&] { ibv_req_notify_cq(cq, 0); }), 69);
  EXPECT_EQ(op_of([&] { ibv_resize_cq(cq, 32); }), 71);
  ibv_modify_cq_attr mcq{};
  EXPECT_EQ(op_of([&] { ibv_modify_cq(cq, &mcq); }), 45);

  // ibv_get_cq_event reads the CQ handle from the channel fd, then calls cq_event.
  int chfds[2];
  ASSERT_EQ(::pipe(chfds), 0);
  ibv_comp_channel channel{context, chfds[0], 0};
  const uint64_t handle = reinterpret_cast<uintptr_t>(cq);
  ASSERT_EQ(::write(chfds[1], &handle, sizeof handle), static_cast<ssize_t>(sizeof handle));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  EXPECT_EQ(op_of([&] { EXPECT_EQ(ibv_get_cq_event(&channel, &ev_cq, &ev_ctx), 0); }), 12);
  EXPECT_EQ(ev_cq, cq);
  ::close(chfds[0]);
  ::close(chfds[1]);

  ibv_srq_init_attr srqattr{};
  ibv_srq* srq = nullptr;
  EXPECT_EQ(op_of([&] { srq = ibv_create_srq(pd, &srqattr); }), 22);
  ASSERT_NE(srq, nullptr);
  ibv_srq_init_attr_ex srqx{};
  srqx.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  srqx.pd = pd;
  srqx.cq = cq;
  EXPECT_EQ(op_of([&] { ibv_create_srq_ex(context, &srqx); }), 23);
  ibv_srq_attr sattr{};
  EXPECT_EQ(op_of([&] { ibv_modify_srq(srq, &sattr, 0); }), 49);
  EXPECT_EQ(op_of([&] { ibv_query_srq(srq, &sattr); }), 64);
  uint32_t srqn = 0;
  EXPECT_EQ(op_of([&] { ibv_get_srq_num(srq, &srqn); }), 41);
  ibv_recv_wr rwr{};
  ibv_recv_wr* bad_rwr = nullptr;
  EXPECT_EQ(op_of([&] { ibv_post_srq_recv(srq, &rwr, &bad_rwr); }), 57);
  ibv_ops_wr owr{};
  ibv_ops_wr* bad_owr = nullptr;
  EXPECT_EQ(op_of([&] { ibv_post_srq_ops(srq, &owr, &bad_owr); }), 56);

  ibv_qp_init_attr qpattr{};
  qpattr.send_cq = cq;
  qpattr.recv_cq = cq;
  qpattr.qp_type = IBV_QPT_RC;
  ibv_qp* qp = nullptr;
  EXPECT_EQ(op_of([&] { qp = ibv_create_qp(pd, &qpattr); }), 19);
  ASSERT_NE(qp, nullptr);
  // In rdma-core 44 ibv_create_qp() only dispatches: the provider fills the
  // ibv_qp (ours does, for both ibv_create_qp and ibv_create_qp_ex).
  qp->context = context;
  qp->pd = pd;
  pthread_mutex_init(&qp->mutex, nullptr);
  pthread_cond_init(&qp->cond, nullptr);
  ibv_qp_init_attr_ex qpx{};
  qpx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qpx.pd = pd;
  qpx.send_cq = cq;
  qpx.recv_cq = cq;
  qpx.qp_type = IBV_QPT_RC;
  EXPECT_EQ(op_of([&] { ibv_create_qp_ex(context, &qpx); }), 20);
  ibv_qp_open_attr oattr{};
  EXPECT_EQ(op_of([&] { ibv_open_qp(context, &oattr); }), 51);
  ibv_qp_attr qattr{};
  qattr.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(op_of([&] { ibv_modify_qp(qp, &qattr, IBV_QP_STATE); }), 47);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);  // the library keeps qp->state
  ibv_qp_init_attr qinit{};
  EXPECT_EQ(op_of([&] { ibv_query_qp(qp, &qattr, IBV_QP_STATE, &qinit); }), 61);
  ibv_qp_rate_limit_attr rl{};
  EXPECT_EQ(op_of([&] { ibv_modify_qp_rate_limit(qp, &rl); }), 48);
  EXPECT_EQ(op_of([&] { ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0); }), 62);
  ibv_ece ece{};
  EXPECT_EQ(op_of([&] { ibv_query_ece(qp, &ece); }), 59);
  ece.vendor_id = 1;  // ibv_set_ece refuses vendor_id 0 (EOPNOTSUPP) before dispatching
  EXPECT_EQ(op_of([&] { ibv_set_ece(qp, &ece); }), 72);
  ibv_send_wr swr{};
  ibv_send_wr* bad_swr = nullptr;
  EXPECT_EQ(op_of([&] { ibv_post_send(qp, &swr, &bad_swr); }), 55);
  EXPECT_EQ(op_of([&] { ibv_post_recv(qp, &rwr, &bad_rwr); }), 54);
  union ibv_gid mgid {};
  EXPECT_EQ(op_of([&] { ibv_attach_mcast(qp, &mgid, 0); }), 9);
  EXPECT_EQ(op_of([&] { ibv_detach_mcast(qp, &mgid, 0); }), 38);
  ibv_mw_bind bind{};
  EXPECT_EQ(op_of([&] { ibv_bind_mw(qp, mw, &bind); }), 10);
  EXPECT_EQ(op_of([&] { ibv_dealloc_mw(mw); }), 25);

  ibv_ah_attr ahattr{};
  ahattr.port_num = 1;
  ibv_ah* ah = nullptr;
  EXPECT_EQ(op_of([&] { ah = ibv_create_ah(pd, &ahattr); }), 13);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(op_of([&] { ibv_destroy_ah(ah); }), 29);

  ibv_flow_attr fattr{};
  ibv_flow* flow = nullptr;
  EXPECT_EQ(op_of([&] { flow = ibv_create_flow(qp, &fattr); }), 17);
  flow->context = context;
  ibv_counters_init_attr cattr{};
  ibv_counters* counters = nullptr;
  EXPECT_EQ(op_of([&] { counters = ibv_create_counters(context, &cattr); }), 14);
  counters->context = context;
  ibv_counter_attach_attr caattr{};
  EXPECT_EQ(op_of([&] { ibv_attach_counters_point_flow(counters, &caattr, flow); }), 8);
  uint64_t cvalue = 0;
  EXPECT_EQ(op_of([&] { ibv_read_counters(counters, &cvalue, 1, 0); }), 65);
  EXPECT_EQ(op_of([&] { ibv_destroy_counters(counters); }), 30);
  EXPECT_EQ(op_of([&] { ibv_destroy_flow(flow); }), 32);
  ibv_flow_action_esp_attr esp{};
  ibv_flow_action* action = nullptr;
  EXPECT_EQ(op_of([&] { action = ibv_create_flow_action_esp(context, &esp); }), 18);
  action->context = context;
  EXPECT_EQ(op_of([&] { ibv_modify_flow_action_esp(action, &esp); }), 46);
  EXPECT_EQ(op_of([&] { ibv_destroy_flow_action(action); }), 33);

  ibv_xrcd_init_attr xattr{};
  ibv_xrcd* xrcd = nullptr;
  EXPECT_EQ(op_of([&] { xrcd = ibv_open_xrcd(context, &xattr); }), 52);
  xrcd->context = context;
  EXPECT_EQ(op_of([&] { ibv_close_xrcd(xrcd); }), 11);

  ibv_wq_init_attr wqattr{};
  ibv_wq* wq = nullptr;
  EXPECT_EQ(op_of([&] { wq = ibv_create_wq(context, &wqattr); }), 24);
  ASSERT_NE(wq, nullptr);
  wq->context = context;  // the provider's job
  ibv_wq_attr wattr{};
  EXPECT_EQ(op_of([&] { ibv_modify_wq(wq, &wattr); }), 50);
  EXPECT_EQ(op_of([&] { ibv_destroy_wq(wq); }), 37);
  ibv_rwq_ind_table_init_attr rwqattr{};
  ibv_rwq_ind_table* rwq = nullptr;
  EXPECT_EQ(op_of([&] { rwq = ibv_create_rwq_ind_table(context, &rwqattr); }), 21);
  rwq->context = context;
  EXPECT_EQ(op_of([&] { ibv_destroy_rwq_ind_table(rwq); }), 35);

  ibv_values_ex values{};
  values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  EXPECT_EQ(op_of([&] { ibv_query_rt_values_ex(context, &values); }), 63);

  // async_event: ibv_get_async_event reads a kernel-format event from async_fd.
  auto* tc = reinterpret_cast<TestContext*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  ib_uverbs_async_event_desc desc{};
  desc.element = reinterpret_cast<uintptr_t>(qp);
  desc.event_type = IBV_EVENT_QP_FATAL;
  ASSERT_EQ(::write(tc->async_write_fd, &desc, sizeof desc), static_cast<ssize_t>(sizeof desc));
  ibv_async_event event{};
  EXPECT_EQ(op_of([&] { EXPECT_EQ(ibv_get_async_event(context, &event), 0); }), 7);
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(event.element.qp, qp);
  ibv_ack_async_event(&event);
  EXPECT_EQ(qp->events_completed, 1u);

  EXPECT_EQ(op_of([&] { ibv_destroy_qp(qp); }), 34);
  EXPECT_EQ(op_of([&] { ibv_destroy_srq(srq); }), 36);
  EXPECT_EQ(op_of([&] { ibv_destroy_cq(cq); }), 31);
  EXPECT_EQ(op_of([&] { ibv_dereg_mr(mr); }), 28);
  EXPECT_EQ(op_of([&] { ibv_dealloc_pd(pd); }), 26);
}

TEST_F(AbiTest, CoreSupportGatesOptionalAccessFlags) {
  ibv_pd* pd = ibv_alloc_pd(context);
  char buf[64];
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
  device->vdev.core_support = 0;
  ibv_reg_mr_iova2(pd, buf, sizeof buf, reinterpret_cast<uintptr_t>(buf), static_cast<unsigned>(access));
  EXPECT_EQ(g_reg_mr_access, IBV_ACCESS_LOCAL_WRITE);  // optional flag masked
  device->vdev.core_support = IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS;
  ibv_reg_mr_iova2(pd, buf, sizeof buf, reinterpret_cast<uintptr_t>(buf), static_cast<unsigned>(access));
  EXPECT_EQ(g_reg_mr_access, access);  // passed through
  device->vdev.core_support = 0;
}

TEST_F(AbiTest, VerbsQpCompMaskSelectsQpEx) {
  auto* vqp = static_cast<verbs_qp*>(fresh());
  EXPECT_EQ(ibv_qp_to_qp_ex(&vqp->qp), nullptr);
  vqp->comp_mask = VERBS_QP_EX;
  EXPECT_EQ(ibv_qp_to_qp_ex(&vqp->qp), &vqp->qp_ex);
}

TEST_F(AbiTest, VerbsMrTypeIsWhereRereg_mrReadsIt) {
  ibv_pd* pd = ibv_alloc_pd(context);
  auto* vmr = static_cast<verbs_mr*>(fresh());
  vmr->ibv_mr.context = context;
  vmr->mr_type = IBV_MR_TYPE_NULL_MR;
  EXPECT_EQ(op_of([&] {
              EXPECT_EQ(ibv_rereg_mr(&vmr->ibv_mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
            }),
            -1);  // refused by the library: the op never ran
  vmr->mr_type = IBV_MR_TYPE_MR;
  EXPECT_EQ(op_of([&] { ibv_rereg_mr(&vmr->ibv_mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0); }), 70);
}

TEST(AbiSymbols, PrivateFunctionsResolveAtIbverbsPrivate34) {
  struct Sym {
    const char* name;
    void* linked;
  } syms[] = {
      {"verbs_register_driver_34", reinterpret_cast<void*>(&verbs_register_driver_34)},
      {"_verbs_init_and_alloc_context", reinterpret_cast<void*>(&_verbs_init_and_alloc_context)},
      {"verbs_uninit_context", reinterpret_cast<void*>(&verbs_uninit_context)},
      {"verbs_set_ops", reinterpret_cast<void*>(&verbs_set_ops)},
      {"verbs_init_cq", reinterpret_cast<void*>(&verbs_init_cq)},
      {"verbs_open_device", reinterpret_cast<void*>(&verbs_open_device)},
      {"ibv_query_gid_type", reinterpret_cast<void*>(&ibv_query_gid_type)},
  };
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  for (const Sym& s : syms) {
    void* versioned = dlvsym(lib, s.name, "IBVERBS_PRIVATE_34");
    EXPECT_NE(versioned, nullptr) << s.name;
    EXPECT_EQ(versioned, s.linked) << s.name;
  }
  dlclose(lib);
}

// What the provider does: its constructor registers the ops (libibverbs
// lists them as a driver, tried only on sysfs devices, which this test never
// lists), and then opens devices whose ops are the same struct.
TEST_F(AbiTest, RegisteredOpsStillOpenDevices) {
  verbs_register_driver_34(&g_device_ops);
  g_alloc_cmd_fd = 12345;
  ibv_context* second = ibv_open_device(&device->vdev.device);
  ASSERT_NE(second, nullptr) << std::strerror(errno);
  EXPECT_EQ(g_alloc_cmd_fd, -1);  // alloc_context ran
  EXPECT_EQ(device->vdev.ops, &g_device_ops);
  EXPECT_EQ(refcount(device), 3);
  EXPECT_EQ(op_of([&] { ibv_close_device(second); }), 39);
  EXPECT_EQ(refcount(device), 2);
}

TEST(AbiC, HeaderCompilesAsC) {
  EXPECT_EQ(abi_c_sizeof_context_ops(), sizeof(verbs_context_ops));
  EXPECT_EQ(abi_c_offsetof_verbs_device_sysfs(), offsetof(verbs_device, sysfs));
}

}  // namespace
