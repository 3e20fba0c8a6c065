// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// ibv_destroy_qp() on a kernel device while another thread reads and
// acknowledges async events, as UCX's async thread does when it tears an
// rc_verbs interface down: each round creates an SRQ-attached RC QP, moves
// it to the error state (which reports IBV_EVENT_QP_LAST_WQE_REACHED) and
// destroys it at once, so the event is read and acknowledged while the
// destroy is under way (or, still unread, dropped by the destroy). The provider once let such an acknowledgement land
// between its reset of the QP's event count and libibverbs' own wait for
// that count to match the kernel's (none): ibv_destroy_qp() then never
// returned (a ucx_perftest server hung after its run). Run in the test VM:
//   qp_destroy_events DEVICE [ROUNDS]
// Prints ok / not ok lines; exits 1 if a destroy failed or did not return
// within the watchdog's limit.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

enum { kWatchdogSeconds = 120 };

static atomic_int stop;
static atomic_int acknowledged;

static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "not ok - ibv_destroy_qp did not return within 120 s while a thread acknowledged events\n";
  (void)!write(STDOUT_FILENO, msg, sizeof msg - 1);
  _exit(1);
}

static void* acknowledge_events(void* arg) {
  struct ibv_context* ctx = arg;
  // Non-blocking, as UCX makes async_fd: a destroy drops its QP's unread
  // events, as the kernel does, so an event that poll() announced may be gone
  // by the time ibv_get_async_event() reads.
  fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
  struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
  while (!atomic_load(&stop)) {
    // The timeout only lets the thread see `stop`.
    if (poll(&p, 1, 100) <= 0) continue;
    struct ibv_async_event event;
    if (ibv_get_async_event(ctx, &event) != 0) continue;
    ibv_ack_async_event(&event);
    atomic_fetch_add(&acknowledged, 1);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: qp_destroy_events DEVICE [ROUNDS]\n");
    return 2;
  }
  const int rounds = argc > 2 ? atoi(argv[2]) : 300;
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && list[i]; ++i)
    if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) ctx = ibv_open_device(list[i]);
  if (!ctx) {
    printf("not ok - qp_destroy_events: cannot open %s\n", argv[1]);
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
  struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 16, .max_sge = 1}};
  struct ibv_srq* srq = cq ? ibv_create_srq(pd, &srq_attr) : NULL;
  if (!srq) {
    printf("not ok - qp_destroy_events: PD, CQ or SRQ on %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  pthread_t reader;
  pthread_create(&reader, NULL, acknowledge_events, ctx);
  signal(SIGALRM, on_watchdog);
  alarm(kWatchdogSeconds);
  int failures = 0, done = 0;
  for (int i = 0; i < rounds && !failures; ++i) {
    struct ibv_qp_init_attr init = {
        .send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4, .max_send_sge = 1}};
    struct ibv_qp* qp = ibv_create_qp(pd, &init);
    if (!qp) {
      printf("not ok - qp_destroy_events: ibv_create_qp in round %d: %s\n", i, strerror(errno));
      ++failures;
      break;
    }
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
    if (err) printf("not ok - qp_destroy_events: ibv_modify_qp to ERR in round %d: %s\n", i, strerror(err));
    const int destroyed = ibv_destroy_qp(qp);
    if (destroyed) printf("not ok - qp_destroy_events: ibv_destroy_qp in round %d: %s\n", i, strerror(destroyed));
    failures += (err != 0) + (destroyed != 0);
    ++done;
  }
  alarm(0);
  atomic_store(&stop, 1);
  pthread_join(reader, NULL);
  if (!failures)
    printf(
        "ok - %d SRQ-attached QPs moved to error and destroyed while a thread acknowledged their events "
        "(%d acknowledged, the others dropped unread by their destroy)\n",
        done, atomic_load(&acknowledged));
  ibv_destroy_srq(srq);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return failures ? 1 : 0;
}
