// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// kmod/'s logic (ids.c, qp_state.c, abi.c) compiled against the mock kernel
// of tests/kmod/mock and run in user space: QP numbering and port slots,
// the modify_qp state machine, and the private ABI's size/version checks.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <iterator>
#include <set>

extern "C" {
#include "mroce_logic.h"
}
#include "qp_rules.h"  // the provider's side (provider/verbs/qp_rules.h)

namespace {

// The ABI structs are pinned: both sides read them by these sizes.
static_assert(sizeof(metaroce_alloc_ucontext_req) == 8);
static_assert(sizeof(metaroce_alloc_ucontext_resp) == 24);
static_assert(offsetof(metaroce_alloc_ucontext_resp, port_slot) == 4);
static_assert(offsetof(metaroce_alloc_ucontext_resp, node_guid) == 16);

// --- ids.c ----------------------------------------------------------------------

TEST(KmodIds, AllocatesFromTheMinimumUpwards) {
  mroce_id_pool pool;
  mroce_id_pool_init(&pool, 1, 4095);
  EXPECT_EQ(mroce_id_alloc(&pool), 1);
  EXPECT_EQ(mroce_id_alloc(&pool), 2);
  EXPECT_EQ(mroce_id_alloc(&pool), 3);
  EXPECT_EQ(pool.count, 3u);
}

TEST(KmodIds, ReusesAReleasedIdAsLateAsPossible) {
  mroce_id_pool pool;
  mroce_id_pool_init(&pool, 1, 8);
  for (int i = 1; i <= 4; ++i) ASSERT_EQ(mroce_id_alloc(&pool), i);
  ASSERT_EQ(mroce_id_free(&pool, 2), 0);
  // Next-fit: 5..8 first, then the wrap finds 2.
  for (int i = 5; i <= 8; ++i) EXPECT_EQ(mroce_id_alloc(&pool), i);
  EXPECT_EQ(mroce_id_alloc(&pool), 2);
  EXPECT_EQ(mroce_id_alloc(&pool), -ENOSPC);
}

TEST(KmodIds, ExhaustsAtTheMaximumWithBoundedWork) {
  mroce_id_pool pool;
  mroce_id_pool_init(&pool, METAROCE_SLOT_MIN, METAROCE_SLOT_MAX);
  std::set<int> seen;
  for (int i = 0; i < METAROCE_SLOT_MAX; ++i) {
    const int id = mroce_id_alloc(&pool);
    ASSERT_GE(id, METAROCE_SLOT_MIN);
    ASSERT_LE(id, METAROCE_SLOT_MAX);
    ASSERT_TRUE(seen.insert(id).second) << "id " << id << " handed out twice";
  }
  mock_find_calls = 0;
  EXPECT_EQ(mroce_id_alloc(&pool), -ENOSPC);
  EXPECT_EQ(mock_find_calls, 0u);  // a full pool answers without scanning
  ASSERT_EQ(mroce_id_free(&pool, 77), 0);
  mock_find_calls = 0;
  EXPECT_EQ(mroce_id_alloc(&pool), 77);
  EXPECT_LE(mock_find_calls, 2u);  // at most the two scans of one wrap
}

TEST(KmodIds, RefusesToFreeWhatIsNotAllocated) {
  mroce_id_pool pool;
  mroce_id_pool_init(&pool, 1, 4095);
  const int id = mroce_id_alloc(&pool);
  EXPECT_EQ(mroce_id_free(&pool, 0), -EINVAL);     // below the minimum (slot 0 is reserved)
  EXPECT_EQ(mroce_id_free(&pool, 4096), -EINVAL);  // above the maximum
  EXPECT_EQ(mroce_id_free(&pool, 9), -EINVAL);     // never allocated
  EXPECT_EQ(mroce_id_free(&pool, static_cast<u32>(id)), 0);
  EXPECT_EQ(mroce_id_free(&pool, static_cast<u32>(id)), -EINVAL);  // twice
  EXPECT_EQ(pool.count, 0u);
}

TEST(KmodIds, ClampsThePoolToItsBitmap) {
  mroce_id_pool pool;
  mroce_id_pool_init(&pool, 1, 1u << 20);
  EXPECT_EQ(pool.max, MROCE_ID_POOL_BITS - 1u);
}

TEST(KmodQpn, EncodesTheHomePortOfItsContext) {
  // A peer finds a QP's home port from its number alone: 4792 + (qpn >> 12).
  for (u32 slot : {1u, 2u, 77u, 4095u}) {
    for (u32 index : {1u, 2u, 4095u}) {
      const u32 qpn = mroce_qpn(slot, index);
      EXPECT_EQ(METAROCE_HOME_PORT_BASE + (qpn >> METAROCE_QPN_INDEX_BITS), METAROCE_HOME_PORT_BASE + slot);
      EXPECT_EQ(qpn & 0xfff, index);
      EXPECT_LE(qpn, 0xffffffu);  // 24-bit
      EXPECT_GE(qpn, 4097u);      // never 0 or 1, the IB special QPs
    }
  }
}

// --- qp_state.c -------------------------------------------------------------------

constexpr int kToInit = IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS;
constexpr int kToRtr = IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN | IB_QP_RQ_PSN |
                       IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER;
constexpr int kToRts = IB_QP_STATE | IB_QP_SQ_PSN | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
                       IB_QP_MAX_QP_RD_ATOMIC;

ib_qp_attr good_attr(ib_qp_state to) {
  ib_qp_attr a{};
  a.qp_state = to;
  a.port_num = 1;
  a.pkey_index = 0;
  a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
  a.path_mtu = IB_MTU_4096;
  a.dest_qp_num = mroce_qpn(3, 1);
  a.rq_psn = 0x123456;
  a.sq_psn = 0x654321;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.min_rnr_timer = 12;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  return a;
}

int step(ib_qp_state record, ib_qp_state to, int mask, ib_qp_state* next) {
  const ib_qp_attr a = good_attr(to);
  return mroce_qp_modify_check(IB_QPT_RC, record, &a, mask, next);
}

TEST(KmodQpState, WalksResetInitRtrRts) {
  ib_qp_state s = IB_QPS_RESET;
  ASSERT_EQ(step(s, IB_QPS_INIT, kToInit, &s), 0);
  EXPECT_EQ(s, IB_QPS_INIT);
  ASSERT_EQ(step(s, IB_QPS_RTR, kToRtr, &s), 0);
  EXPECT_EQ(s, IB_QPS_RTR);
  ASSERT_EQ(step(s, IB_QPS_RTS, kToRts, &s), 0);
  EXPECT_EQ(s, IB_QPS_RTS);
  // RTS -> RTS with an optional attribute, then to ERR and back to RESET.
  ASSERT_EQ(step(s, IB_QPS_RTS, IB_QP_STATE | IB_QP_MIN_RNR_TIMER, &s), 0);
  ASSERT_EQ(step(s, IB_QPS_ERR, IB_QP_STATE, &s), 0);
  EXPECT_EQ(s, IB_QPS_ERR);
  ASSERT_EQ(step(s, IB_QPS_RESET, IB_QP_STATE, &s), 0);
  EXPECT_EQ(s, IB_QPS_RESET);
}

TEST(KmodQpState, RefusesSkippedAndBackwardTransitions) {
  ib_qp_state s = IB_QPS_RESET;
  EXPECT_EQ(step(IB_QPS_RESET, IB_QPS_RTR, kToRtr, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_RESET, IB_QPS_RTS, kToRts, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_INIT, IB_QPS_RTS, kToRts, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_RTS, IB_QPS_RTR, kToRtr, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_RTR, IB_QPS_INIT, kToInit, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_RTS, IB_QPS_SQD, IB_QP_STATE, &s), -EINVAL);  // SQD: not supported
  EXPECT_EQ(step(IB_QPS_SQD, IB_QPS_RTS, IB_QP_STATE, &s), -EINVAL);
  EXPECT_EQ(s, IB_QPS_RESET);  // untouched on refusal
}

TEST(KmodQpState, NeedsExactlyTheRequiredAndOptionalAttributes) {
  ib_qp_state s = IB_QPS_RESET;
  EXPECT_EQ(step(IB_QPS_RESET, IB_QPS_INIT, kToInit & ~IB_QP_PORT, &s), -EINVAL);  // missing
  EXPECT_EQ(step(IB_QPS_RESET, IB_QPS_INIT, kToInit | IB_QP_DEST_QPN, &s), -EINVAL);  // extra
  EXPECT_EQ(step(IB_QPS_INIT, IB_QPS_RTR, kToRtr & ~IB_QP_AV, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_RTR, IB_QPS_RTS, kToRts & ~IB_QP_SQ_PSN, &s), -EINVAL);
  EXPECT_EQ(step(IB_QPS_INIT, IB_QPS_RTR, kToRtr | IB_QP_PKEY_INDEX, &s), 0);  // optional
}

TEST(KmodQpState, CurrentStateMustBeTheRecordOrError) {
  ib_qp_state s = IB_QPS_RESET;
  ib_qp_attr a = good_attr(IB_QPS_RESET);
  a.cur_qp_state = IB_QPS_INIT;  // a lie: the record says RTS
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_RC, IB_QPS_RTS, &a, IB_QP_STATE | IB_QP_CUR_STATE, &s), -EINVAL);
  // The user-space data path may have failed the QP: ERR is accepted.
  a.cur_qp_state = IB_QPS_ERR;
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_RC, IB_QPS_RTS, &a, IB_QP_STATE | IB_QP_CUR_STATE, &s), 0);
  EXPECT_EQ(s, IB_QPS_RESET);
}

TEST(KmodQpState, UdTakesAQkeyAndNoPeer) {
  constexpr int kUdInit = IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY;
  ib_qp_state s = IB_QPS_RESET;
  ib_qp_attr a = good_attr(IB_QPS_INIT);
  a.qkey = 0x11111111;
  // RC's INIT attributes are not UD's, and the reverse.
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, kToInit, &s), -EINVAL);
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_RC, s, &a, kUdInit, &s), -EINVAL);
  ASSERT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, kUdInit, &s), 0);
  EXPECT_EQ(s, IB_QPS_INIT);
  a.qp_state = IB_QPS_RTR;
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, kToRtr, &s), -EINVAL);  // no AV, peer or PSN
  ASSERT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, IB_QP_STATE, &s), 0);
  a.qp_state = IB_QPS_RTS;
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, IB_QP_STATE, &s), -EINVAL);  // needs sq_psn
  ASSERT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, IB_QP_STATE | IB_QP_SQ_PSN | IB_QP_QKEY, &s), 0);
  EXPECT_EQ(s, IB_QPS_RTS);
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_UD, s, &a, IB_QP_STATE | IB_QP_TIMEOUT, &s), -EINVAL);
  // Other types have no state machine here.
  a.qp_state = IB_QPS_INIT;
  s = IB_QPS_RESET;
  EXPECT_EQ(mroce_qp_modify_check(IB_QPT_UC, s, &a, kToInit, &s), -EINVAL);
}

TEST(KmodQpState, ChecksAttributeValues) {
  struct Case {
    const char* what;
    void (*spoil)(ib_qp_attr&);
    int mask;
    ib_qp_state from, to;
  };
  const Case cases[] = {
      {"port 2", [](ib_qp_attr& a) { a.port_num = 2; }, kToInit, IB_QPS_RESET, IB_QPS_INIT},
      {"pkey index 1", [](ib_qp_attr& a) { a.pkey_index = 1; }, kToInit, IB_QPS_RESET, IB_QPS_INIT},
      {"unknown access bit", [](ib_qp_attr& a) { a.qp_access_flags |= 1 << 10; }, kToInit, IB_QPS_RESET, IB_QPS_INIT},
      {"path MTU 0", [](ib_qp_attr& a) { a.path_mtu = static_cast<ib_mtu>(0); }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"path MTU 6", [](ib_qp_attr& a) { a.path_mtu = static_cast<ib_mtu>(6); }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"peer QP index 0", [](ib_qp_attr& a) { a.dest_qp_num = 5u << 12; }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"peer QPN over 24 bits", [](ib_qp_attr& a) { a.dest_qp_num = 1u << 24 | 1; }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"rq_psn over 24 bits", [](ib_qp_attr& a) { a.rq_psn = 1u << 24; }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"min_rnr_timer 32", [](ib_qp_attr& a) { a.min_rnr_timer = 32; }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
      {"sq_psn over 24 bits", [](ib_qp_attr& a) { a.sq_psn = 1u << 24; }, kToRts, IB_QPS_RTR, IB_QPS_RTS},
      {"timeout 32", [](ib_qp_attr& a) { a.timeout = 32; }, kToRts, IB_QPS_RTR, IB_QPS_RTS},
      {"retry_cnt 8", [](ib_qp_attr& a) { a.retry_cnt = 8; }, kToRts, IB_QPS_RTR, IB_QPS_RTS},
      {"rnr_retry 8", [](ib_qp_attr& a) { a.rnr_retry = 8; }, kToRts, IB_QPS_RTR, IB_QPS_RTS},
      {"max_rd_atomic 17", [](ib_qp_attr& a) { a.max_rd_atomic = 17; }, kToRts, IB_QPS_RTR, IB_QPS_RTS},
      {"max_dest_rd_atomic 17", [](ib_qp_attr& a) { a.max_dest_rd_atomic = 17; }, kToRtr, IB_QPS_INIT, IB_QPS_RTR},
  };
  for (const Case& c : cases) {
    ib_qp_attr a = good_attr(c.to);
    ib_qp_state s = c.from;
    ASSERT_EQ(mroce_qp_modify_check(IB_QPT_RC, c.from, &a, c.mask, &s), 0) << c.what << " (unspoiled)";
    c.spoil(a);
    EXPECT_EQ(mroce_qp_modify_check(IB_QPT_RC, c.from, &a, c.mask, &s), -EINVAL) << c.what;
  }
}

// The provider's check and the kernel's agree on every pair of states, for
// both QP types, with the masks around each transition's own (nothing, its
// required attributes, required + optional, and each of those with one
// attribute bit flipped), with good values and with each value spoiled.
ibv_qp_attr as_verbs(const ib_qp_attr& k) {
  ibv_qp_attr v{};
  v.qp_state = static_cast<ibv_qp_state>(k.qp_state);
  v.cur_qp_state = static_cast<ibv_qp_state>(k.cur_qp_state);
  v.path_mtu = static_cast<ibv_mtu>(k.path_mtu);
  v.qkey = k.qkey;
  v.rq_psn = k.rq_psn;
  v.sq_psn = k.sq_psn;
  v.dest_qp_num = k.dest_qp_num;
  v.qp_access_flags = static_cast<unsigned>(k.qp_access_flags);
  v.pkey_index = k.pkey_index;
  v.max_rd_atomic = k.max_rd_atomic;
  v.max_dest_rd_atomic = k.max_dest_rd_atomic;
  v.min_rnr_timer = k.min_rnr_timer;
  v.port_num = static_cast<uint8_t>(k.port_num);
  v.timeout = k.timeout;
  v.retry_cnt = k.retry_cnt;
  v.rnr_retry = k.rnr_retry;
  return v;
}

TEST(KmodQpState, AgreesWithTheProviderOnEveryStatePairAndMask) {
  constexpr int kAttributeBits = 21;  // IB_QP_STATE .. IB_QP_DEST_QPN
  void (*const spoilers[])(ib_qp_attr&) = {
      [](ib_qp_attr&) {},
      [](ib_qp_attr& a) { a.port_num = 2; },
      [](ib_qp_attr& a) { a.pkey_index = 1; },
      [](ib_qp_attr& a) { a.qp_access_flags = 1 << 10; },
      [](ib_qp_attr& a) { a.path_mtu = static_cast<ib_mtu>(6); },
      [](ib_qp_attr& a) { a.dest_qp_num = 5u << 12; },
      [](ib_qp_attr& a) { a.rq_psn = 1u << 24; },
      [](ib_qp_attr& a) { a.sq_psn = 1u << 24; },
      [](ib_qp_attr& a) { a.timeout = 32; },
      [](ib_qp_attr& a) { a.retry_cnt = 8; },
      [](ib_qp_attr& a) { a.rnr_retry = 8; },
      [](ib_qp_attr& a) { a.min_rnr_timer = 32; },
      [](ib_qp_attr& a) { a.max_rd_atomic = 17; },
      [](ib_qp_attr& a) { a.max_dest_rd_atomic = 17; },
  };
  size_t accepted = 0, refused = 0;
  for (const bool ud : {false, true}) {
    const metaroce_qp_transition* table = ud ? metaroce_ud_transitions : metaroce_rc_transitions;
    const size_t rows = ud ? std::size(metaroce_ud_transitions) : std::size(metaroce_rc_transitions);
    for (int from = IB_QPS_RESET; from <= IB_QPS_ERR; ++from) {
      for (int to = IB_QPS_RESET; to <= IB_QPS_ERR; ++to) {
        std::set<int> masks = {0};
        for (size_t i = 0; i < rows; ++i) {
          if (table[i].from != from || table[i].to != to) continue;
          for (const int base : {table[i].required, table[i].required | table[i].optional}) {
            masks.insert(base);
            for (int bit = 0; bit < kAttributeBits; ++bit) masks.insert(base ^ (1 << bit));
          }
        }
        for (int base : std::set<int>(masks)) masks.insert(base | IB_QP_STATE | IB_QP_CUR_STATE);
        for (const int attrs : masks) {
          const int mask = attrs | IB_QP_STATE;
          for (auto spoil : spoilers) {
            ib_qp_attr k = good_attr(static_cast<ib_qp_state>(to));
            k.cur_qp_state = static_cast<ib_qp_state>(from);
            spoil(k);
            ib_qp_state kernel_next = IB_QPS_RESET;
            const int kernel = mroce_qp_modify_check(ud ? IB_QPT_UD : IB_QPT_RC, static_cast<ib_qp_state>(from),
                                                     &k, mask, &kernel_next);
            const ibv_qp_attr v = as_verbs(k);
            ibv_qp_state provider_next = IBV_QPS_RESET;
            const int provider = metaroce::verbs::qp_modify_check(ud ? IBV_QPT_UD : IBV_QPT_RC,
                                                                  static_cast<ibv_qp_state>(from), v, mask,
                                                                  provider_next);
            ASSERT_EQ(kernel, -provider) << (ud ? "UD " : "RC ") << from << " -> " << to << " mask 0x" << std::hex
                                         << mask;
            if (kernel == 0) {
              ASSERT_EQ(static_cast<int>(kernel_next), static_cast<int>(provider_next));
              ++accepted;
            } else {
              ++refused;
            }
          }
        }
      }
    }
  }
  // Every row of both tables was reached with its own mask and good values.
  EXPECT_GE(accepted, std::size(metaroce_rc_transitions) + std::size(metaroce_ud_transitions));
  EXPECT_GT(refused, accepted);
}

// --- abi.c --------------------------------------------------------------------------

TEST(KmodAbi, AcceptsTheCurrentRequest) {
  metaroce_alloc_ucontext_req req{METAROCE_ABI_VERSION, 0};
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, sizeof(metaroce_alloc_ucontext_resp), &req, true), 0);
  // A longer response buffer is fine (a newer provider): the kernel writes a prefix.
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, 64, &req, true), 0);
}

TEST(KmodAbi, RefusesBadSizesVersionsAndFields) {
  metaroce_alloc_ucontext_req req{METAROCE_ABI_VERSION, 0};
  const size_t resp = sizeof(metaroce_alloc_ucontext_resp);
  EXPECT_EQ(mroce_abi_ucontext_check(0, resp, nullptr, true), -EINVAL);  // no request (old provider)
  EXPECT_EQ(mroce_abi_ucontext_check(4, resp, nullptr, true), -EINVAL);  // short request
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, 0, &req, true), -EINVAL);  // no room to answer
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, resp - 1, &req, true), -EINVAL);
  req.abi_version = METAROCE_ABI_VERSION + 1;
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, resp, &req, true), -EPROTONOSUPPORT);
  req.abi_version = 0;
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, resp, &req, true), -EPROTONOSUPPORT);
  req = {METAROCE_ABI_VERSION, 1};
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req, resp, &req, true), -EINVAL);  // reserved set
  req = {METAROCE_ABI_VERSION, 0};
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req + 8, resp, &req, true), 0);  // zero tail
  EXPECT_EQ(mroce_abi_ucontext_check(sizeof req + 8, resp, &req, false), -EOPNOTSUPP);
}

TEST(KmodAbi, FillsTheResponse) {
  metaroce_alloc_ucontext_resp r;
  std::memset(&r, 0xa5, sizeof r);
  mroce_abi_ucontext_resp(&r, 42, static_cast<__be64>(0x0123456789abcdefull));
  EXPECT_EQ(r.abi_version, static_cast<u32>(METAROCE_ABI_VERSION));
  EXPECT_EQ(r.port_slot, 42u);
  EXPECT_EQ(r.qpn_index_bits, static_cast<u32>(METAROCE_QPN_INDEX_BITS));
  EXPECT_EQ(r.max_qps, 4095u);
  EXPECT_EQ(r.node_guid, 0x0123456789abcdefull);
}

}  // namespace
