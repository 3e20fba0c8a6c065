// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The provider's side of the QP state machine of include/metaroce/qp_rules.h,
// in verbs terms (the kernel's side is kmod/qp_state.c).
#pragma once

#include <infiniband/verbs.h>

namespace metaroce::verbs {

// 0 with `next` set if a QP of `type` in state `current` may be modified
// with `attr` and `mask`: the transition exists, its required attributes
// and no others are given, every value given is in range, and a
// IBV_QP_CUR_STATE given is `current`. EINVAL otherwise.
int qp_modify_check(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr, int mask, ibv_qp_state& next);

}  // namespace metaroce::verbs
