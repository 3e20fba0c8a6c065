// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "qp_rules.h"

#include <cerrno>

#include "metaroce/qp_rules.h"

namespace metaroce::verbs {

// The shared rules speak the uverbs ABI's values, which libibverbs' enums have.
static_assert(IBV_QPS_RESET == METAROCE_QPS_RESET && IBV_QPS_INIT == METAROCE_QPS_INIT &&
              IBV_QPS_RTR == METAROCE_QPS_RTR && IBV_QPS_RTS == METAROCE_QPS_RTS && IBV_QPS_SQD == METAROCE_QPS_SQD &&
              IBV_QPS_SQE == METAROCE_QPS_SQE && IBV_QPS_ERR == METAROCE_QPS_ERR);
static_assert(IBV_QP_STATE == METAROCE_QP_STATE && IBV_QP_CUR_STATE == METAROCE_QP_CUR_STATE &&
              IBV_QP_EN_SQD_ASYNC_NOTIFY == METAROCE_QP_EN_SQD_ASYNC_NOTIFY &&
              IBV_QP_ACCESS_FLAGS == METAROCE_QP_ACCESS_FLAGS && IBV_QP_PKEY_INDEX == METAROCE_QP_PKEY_INDEX &&
              IBV_QP_PORT == METAROCE_QP_PORT && IBV_QP_QKEY == METAROCE_QP_QKEY && IBV_QP_AV == METAROCE_QP_AV &&
              IBV_QP_PATH_MTU == METAROCE_QP_PATH_MTU && IBV_QP_TIMEOUT == METAROCE_QP_TIMEOUT &&
              IBV_QP_RETRY_CNT == METAROCE_QP_RETRY_CNT && IBV_QP_RNR_RETRY == METAROCE_QP_RNR_RETRY &&
              IBV_QP_RQ_PSN == METAROCE_QP_RQ_PSN && IBV_QP_MAX_QP_RD_ATOMIC == METAROCE_QP_MAX_QP_RD_ATOMIC &&
              IBV_QP_ALT_PATH == METAROCE_QP_ALT_PATH && IBV_QP_MIN_RNR_TIMER == METAROCE_QP_MIN_RNR_TIMER &&
              IBV_QP_SQ_PSN == METAROCE_QP_SQ_PSN && IBV_QP_MAX_DEST_RD_ATOMIC == METAROCE_QP_MAX_DEST_RD_ATOMIC &&
              IBV_QP_PATH_MIG_STATE == METAROCE_QP_PATH_MIG_STATE && IBV_QP_CAP == METAROCE_QP_CAP &&
              IBV_QP_DEST_QPN == METAROCE_QP_DEST_QPN);
static_assert(IBV_ACCESS_LOCAL_WRITE == METAROCE_ACCESS_LOCAL_WRITE &&
              IBV_ACCESS_REMOTE_WRITE == METAROCE_ACCESS_REMOTE_WRITE &&
              IBV_ACCESS_REMOTE_READ == METAROCE_ACCESS_REMOTE_READ &&
              IBV_ACCESS_REMOTE_ATOMIC == METAROCE_ACCESS_REMOTE_ATOMIC &&
              IBV_ACCESS_MW_BIND == METAROCE_ACCESS_MW_BIND);
static_assert(IBV_MTU_256 == METAROCE_IB_MTU_256 && IBV_MTU_4096 == METAROCE_IB_MTU_4096);

int qp_modify_check(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr, int mask, ibv_qp_state& next) {
  if (type != IBV_QPT_RC && type != IBV_QPT_UD) return EINVAL;
  if ((mask & IBV_QP_CUR_STATE) && attr.cur_qp_state != current) return EINVAL;
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? attr.qp_state : current;
  if (metaroce_qp_transition_check(type == IBV_QPT_UD, current, to, mask)) return EINVAL;
  const metaroce_qp_values values{
      .qp_access_flags = attr.qp_access_flags,
      .pkey_index = attr.pkey_index,
      .port_num = attr.port_num,
      .path_mtu = static_cast<__u32>(attr.path_mtu),
      .dest_qp_num = attr.dest_qp_num,
      .rq_psn = attr.rq_psn,
      .sq_psn = attr.sq_psn,
      .timeout = attr.timeout,
      .retry_cnt = attr.retry_cnt,
      .rnr_retry = attr.rnr_retry,
      .min_rnr_timer = attr.min_rnr_timer,
      .max_rd_atomic = attr.max_rd_atomic,
      .max_dest_rd_atomic = attr.max_dest_rd_atomic,
  };
  if (metaroce_qp_values_check(&values, mask)) return EINVAL;
  next = to;
  return 0;
}

}  // namespace metaroce::verbs
