// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The engine's modify_qp takes exactly the state changes of
// include/metaroce/qp_rules.h's table (the one the verbs layer and the kernel
// module check), for RC and UD QPs: every state pair is tried from a QP
// brought to the first state.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "endpoint.h"
#include "metaroce/qp_rules.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;
constexpr PeerId kPeer = 2;
constexpr std::array kStates{QpState::Reset, QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend,
                             QpState::Error};

QpModify step_to(QpState next) {
  QpModify m{.next = next};
  if (next == QpState::ReadyToReceive) {
    m.peer = kPeer;
    m.remote_qpn = 7;
    m.config = QpConfig{};
  }
  return m;
}

// A new QP of the kind asked for, taken along RESET -> INIT -> RTR -> RTS (or
// to ERROR) until it is in `state`.
uint32_t qp_in(Endpoint& e, bool ud, QpState state) {
  const uint32_t cq = e.create_cq(16);
  const uint32_t qpn = ud ? e.create_ud_qp(0, kPd, cq, cq, 0, {}, 1024) : e.create_qp(kPd, cq, cq, {});
  EXPECT_NE(qpn, 0u);
  if (state == QpState::Error) {
    EXPECT_EQ(e.modify_qp(qpn, step_to(QpState::Error)), PostResult::Ok);
    return qpn;
  }
  for (const QpState s : {QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend}) {
    if (qp_rules_state(s) > qp_rules_state(state)) break;
    EXPECT_EQ(e.modify_qp(qpn, step_to(s)), PostResult::Ok) << to_string(s);
  }
  EXPECT_EQ(e.qp_state(qpn), state);
  return qpn;
}

class QpTransitions : public ::testing::TestWithParam<bool> {};

TEST_P(QpTransitions, AreExactlyTheSharedTable) {
  const bool ud = GetParam();
  Endpoint e(EndpointConfig{});
  int allowed = 0;
  for (const QpState from : kStates) {
    for (const QpState to : kStates) {
      const uint32_t qpn = qp_in(e, ud, from);
      const bool expected = metaroce_qp_transition_exists(ud, qp_rules_state(from), qp_rules_state(to));
      const PostResult r = e.modify_qp(qpn, step_to(to));
      EXPECT_EQ(r, expected ? PostResult::Ok : PostResult::BadState) << to_string(from) << " -> " << to_string(to);
      EXPECT_EQ(e.qp_state(qpn), expected ? to : from) << to_string(from) << " -> " << to_string(to);
      allowed += expected;
      EXPECT_EQ(e.destroy_qp(qpn), PostResult::Ok);
    }
  }
  // RESET and ERROR from all five, and the table's own five rows.
  EXPECT_EQ(allowed, 15);
}

INSTANTIATE_TEST_SUITE_P(RcAndUd, QpTransitions, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Ud" : "Rc"; });

TEST(QpTransitions, AnUnknownQpIsNoSuchObject) {
  Endpoint e(EndpointConfig{});
  EXPECT_EQ(e.modify_qp(12345, step_to(QpState::Init)), PostResult::NoSuchObject);
}

}  // namespace
}  // namespace metaroce::transport
