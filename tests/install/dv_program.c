// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A program outside the tree built against an installed metaroce_dv.h with
// `pkg-config metaroce`: it opens a kernel-less MetaRoCE device on loopback,
// checks what metaroce_dv says about it and creates the verbs objects of a
// connection. Prints "ok - ..." lines; exits 1 at the first failure.
#include <errno.h>
#include <infiniband/verbs.h>
#include <metaroce/metaroce_dv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAIL dv_program: %s (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
  }
  printf("ok - %s\n", what);
}

int main(void) {
  const struct metaroce_dv_device_spec spec = {"mrdv0", "127.0.0.1"};
  int num = 0;
  struct ibv_device** list = metaroce_dv_get_device_list(&spec, 1, &num);
  check(list != NULL && num == 1 && list[0] != NULL, "metaroce_dv_get_device_list makes one device");
  check(strcmp(ibv_get_device_name(list[0]), "mrdv0") == 0, "the device is named as asked");
  check(metaroce_dv_is_metaroce_device(list[0]), "metaroce_dv_is_metaroce_device");
  metaroce_dv_free_device_list(list);

  struct metaroce_dv_options opts;
  memset(&opts, 0, sizeof opts);
  opts.comp_mask = METAROCE_DV_OPT_PATHS;
  opts.paths = 2;
  struct ibv_context* ctx = metaroce_dv_open_device("mrdv0", "127.0.0.1", &opts);
  check(ctx != NULL, "metaroce_dv_open_device");
  check(metaroce_dv_is_metaroce_context(ctx), "metaroce_dv_is_metaroce_context");
  check(metaroce_dv_home_port(ctx) >= 4792, "metaroce_dv_home_port is a home port");

  struct ibv_device_attr attr;
  check(ibv_query_device(ctx, &attr) == 0 && attr.max_qp > 0, "ibv_query_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  check(pd != NULL, "ibv_alloc_pd");
  static char buf[4096];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  check(mr != NULL, "ibv_reg_mr");
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  check(cq != NULL, "ibv_create_cq");
  struct ibv_qp_init_attr qp_attr;
  memset(&qp_attr, 0, sizeof qp_attr);
  qp_attr.send_cq = cq;
  qp_attr.recv_cq = cq;
  qp_attr.qp_type = IBV_QPT_RC;
  qp_attr.cap.max_send_wr = 8;
  qp_attr.cap.max_recv_wr = 8;
  qp_attr.cap.max_send_sge = 1;
  qp_attr.cap.max_recv_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &qp_attr);
  check(qp != NULL, "ibv_create_qp (RC)");
  check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0,
        "the objects are destroyed");
  check(ibv_close_device(ctx) == 0, "ibv_close_device");
  return 0;
}
