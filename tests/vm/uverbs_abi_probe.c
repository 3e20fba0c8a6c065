// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Sends GET_CONTEXT commands with wrong driver data straight to a metaroce
// uverbs character device (the legacy write() interface, no libibverbs) and
// checks that metaroce.ko refuses each with its documented errno, then that
// a correct request gets a context with a valid port slot. Run in the test
// VM: uverbs_abi_probe /dev/infiniband/uverbsN. Prints ok / not ok lines;
// exits 1 if any case failed.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include "metaroce/abi.h"

static int failures;

// One GET_CONTEXT: `in` driver bytes after the core command, `out` driver
// bytes of room after the core response. Returns 0 or the errno.
static int get_context(int fd, const void* in, size_t in_len, void* resp, size_t out_len) {
  uint8_t buf[256] __attribute__((aligned(8)));
  struct ib_uverbs_cmd_hdr hdr;
  struct ib_uverbs_get_context cmd;
  const size_t total = sizeof(hdr) + sizeof(cmd) + in_len;
  const size_t resp_total = sizeof(struct ib_uverbs_get_context_resp) + out_len;

  if (total > sizeof(buf) || total % 4 || resp_total % 4) return E2BIG;
  memset(&hdr, 0, sizeof(hdr));
  memset(&cmd, 0, sizeof(cmd));
  hdr.command = IB_USER_VERBS_CMD_GET_CONTEXT;
  hdr.in_words = (uint16_t)(total / 4);
  hdr.out_words = (uint16_t)(resp_total / 4);
  cmd.response = (uintptr_t)resp;
  memcpy(buf, &hdr, sizeof(hdr));
  memcpy(buf + sizeof(hdr), &cmd, sizeof(cmd));
  if (in_len) memcpy(buf + sizeof(hdr) + sizeof(cmd), in, in_len);
  return write(fd, buf, total) == (ssize_t)total ? 0 : errno;
}

static void expect(const char* what, int got, int want) {
  if (got == want) {
    printf("ok - uverbs ABI: %s -> %s\n", what, want ? strerror(want) : "accepted");
  } else {
    printf("not ok - uverbs ABI: %s -> %s (want %s)\n", what, got ? strerror(got) : "accepted",
           want ? strerror(want) : "accepted");
    failures++;
  }
}

int main(int argc, char** argv) {
  // The core response ends in a flexible array: kept as bytes here.
  struct {
    uint8_t core[sizeof(struct ib_uverbs_get_context_resp)];
    struct metaroce_alloc_ucontext_resp drv;
    uint8_t spare[16];
  } __attribute__((aligned(8))) resp;
  struct ib_uverbs_get_context_resp core;
  struct {
    struct metaroce_alloc_ucontext_req req;
    uint64_t tail;
  } in;
  int fd;

  if (argc != 2) {
    fprintf(stderr, "usage: %s /dev/infiniband/uverbsN\n", argv[0]);
    return 2;
  }
  fd = open(argv[1], O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    printf("not ok - uverbs ABI: open %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  // Failed requests leave no context behind, so one file serves them all.
  memset(&in, 0, sizeof(in));
  in.req.abi_version = METAROCE_ABI_VERSION;
  expect("no driver request (an older provider)", get_context(fd, NULL, 0, &resp, sizeof(resp.drv)), EINVAL);
  expect("response without room for the driver part", get_context(fd, &in.req, sizeof(in.req), &resp, 0), EINVAL);
  in.req.abi_version = METAROCE_ABI_VERSION + 1;
  expect("ABI version + 1", get_context(fd, &in.req, sizeof(in.req), &resp, sizeof(resp.drv)), EPROTONOSUPPORT);
  in.req.abi_version = METAROCE_ABI_VERSION;
  in.req.reserved = 1;
  expect("reserved field set", get_context(fd, &in.req, sizeof(in.req), &resp, sizeof(resp.drv)), EINVAL);
  in.req.reserved = 0;
  in.tail = 7;
  expect("unknown non-zero trailing bytes", get_context(fd, &in, sizeof(in), &resp, sizeof(resp.drv)), EOPNOTSUPP);
  in.tail = 0;

  memset(&resp, 0, sizeof(resp));
  expect("current request with zero trailing bytes", get_context(fd, &in, sizeof(in), &resp, sizeof(resp.drv)), 0);
  if (resp.drv.abi_version == METAROCE_ABI_VERSION && resp.drv.port_slot >= METAROCE_SLOT_MIN &&
      resp.drv.port_slot <= METAROCE_SLOT_MAX && resp.drv.qpn_index_bits == METAROCE_QPN_INDEX_BITS &&
      resp.drv.max_qps == 4095) {
    printf("ok - uverbs ABI: response: version %u, port slot %u (home port %u)\n", resp.drv.abi_version,
           resp.drv.port_slot, METAROCE_HOME_PORT_BASE + resp.drv.port_slot);
  } else {
    printf("not ok - uverbs ABI: response: version %u, slot %u, index bits %u, max QPs %u\n", resp.drv.abi_version,
           resp.drv.port_slot, resp.drv.qpn_index_bits, resp.drv.max_qps);
    failures++;
  }
  expect("a second context on the same file", get_context(fd, &in.req, sizeof(in.req), &resp, sizeof(resp.drv)),
         EINVAL);
  memcpy(&core, resp.core, sizeof(core));
  close((int)core.async_fd);
  close(fd);
  return failures ? 1 : 0;
}
