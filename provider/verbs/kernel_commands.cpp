// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The kernel objects of a kernel device's CQs and QPs, created with the
// uverbs write commands. libibverbs' ibv_cmd_create_cq/qp send the
// context's async_fd with the command (the ioctl form's EVENT_FD attribute),
// and a MetaRoCE context's async_fd is the provider's event pipe, which the
// kernel refuses (EBADF); the write form uses the context's own kernel
// event file. A QP's destroy is a write command too, not libibverbs'
// ibv_cmd_destroy_qp(), which waits until the QP's acknowledged async events
// match the kernel's count of those it delivered: the kernel delivers none
// of ours (the provider's pipe does, and destroy_qp in qp.cpp waits for
// those). The objects' other commands (modify, the CQ's destroy) go
// through libibverbs as usual, by handle.
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "provider.h"

namespace metaroce::verbs {
namespace {

template <typename Command, typename Response>
int write_command(int fd, uint32_t command, Command& cmd, Response& resp) {
  struct {
    ib_uverbs_cmd_hdr hdr;
    alignas(8) uint8_t body[sizeof(Command)];
  } buf{};
  static_assert(sizeof buf % 4 == 0 && sizeof(Response) % 4 == 0);
  buf.hdr.command = command;
  buf.hdr.in_words = static_cast<uint16_t>(sizeof buf / 4);
  buf.hdr.out_words = static_cast<uint16_t>(sizeof(Response) / 4);
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  std::memcpy(buf.body, &cmd, sizeof(Command));
  const ssize_t n = ::write(fd, &buf, sizeof buf);
  if (n == static_cast<ssize_t>(sizeof buf)) return 0;
  return n < 0 ? errno : EIO;
}

}  // namespace

int kernel_alloc_async_fd(int cmd_fd) {
  // UVERBS_METHOD_ASYNC_EVENT_ALLOC, as libibverbs' own (unexported)
  // ibv_cmd_alloc_async_fd: one attribute, the new file's descriptor,
  // which the kernel writes back into it.
  ib_uverbs_ioctl_hdr hdr{};
  ib_uverbs_attr fd{};
  alignas(8) uint8_t cmd[sizeof hdr + sizeof fd];
  hdr.length = sizeof cmd;
  hdr.object_id = UVERBS_OBJECT_ASYNC_EVENT;
  hdr.method_id = UVERBS_METHOD_ASYNC_EVENT_ALLOC;
  hdr.num_attrs = 1;
  fd.attr_id = UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE;
  fd.flags = UVERBS_ATTR_F_MANDATORY;
  std::memcpy(cmd, &hdr, sizeof hdr);
  std::memcpy(cmd + sizeof hdr, &fd, sizeof fd);
  if (::ioctl(cmd_fd, RDMA_VERBS_IOCTL, cmd) != 0) return -errno;
  std::memcpy(&fd, cmd + sizeof hdr, sizeof fd);
  return static_cast<int>(fd.data_s64);
}

int kernel_create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector, ibv_cq& cq) {
  ib_uverbs_create_cq cmd{};
  ib_uverbs_create_cq_resp resp{};
  cmd.user_handle = reinterpret_cast<uintptr_t>(&cq);  // what completion events carry back
  cmd.cqe = static_cast<uint32_t>(cqe);
  cmd.comp_vector = static_cast<uint32_t>(comp_vector);
  cmd.comp_channel = channel ? channel->fd : -1;
  if (const int err = write_command(context->cmd_fd, IB_USER_VERBS_CMD_CREATE_CQ, cmd, resp)) return err;
  cq.handle = resp.cq_handle;
  return 0;
}

int kernel_create_qp(ibv_pd* pd, const ibv_qp_init_attr& attr, ibv_qp& qp) {
  ib_uverbs_create_qp cmd{};
  ib_uverbs_create_qp_resp resp{};
  cmd.user_handle = reinterpret_cast<uintptr_t>(&qp);
  cmd.pd_handle = pd->handle;
  cmd.send_cq_handle = attr.send_cq->handle;
  cmd.recv_cq_handle = attr.recv_cq->handle;
  cmd.max_send_wr = attr.cap.max_send_wr;
  cmd.max_recv_wr = attr.cap.max_recv_wr;
  cmd.max_send_sge = attr.cap.max_send_sge;
  cmd.max_recv_sge = attr.cap.max_recv_sge;
  cmd.max_inline_data = attr.cap.max_inline_data;
  cmd.sq_sig_all = static_cast<uint8_t>(attr.sq_sig_all != 0);
  cmd.qp_type = static_cast<uint8_t>(attr.qp_type);
  if (const int err = write_command(pd->context->cmd_fd, IB_USER_VERBS_CMD_CREATE_QP, cmd, resp)) return err;
  qp.handle = resp.qp_handle;
  qp.qp_num = resp.qpn;
  return 0;
}

int kernel_destroy_qp(ibv_qp& qp) {
  ib_uverbs_destroy_qp cmd{};
  ib_uverbs_destroy_qp_resp resp{};
  cmd.qp_handle = qp.handle;
  const int err = write_command(qp.context->cmd_fd, IB_USER_VERBS_CMD_DESTROY_QP, cmd, resp);
  return err == EIO ? 0 : err;
}

}  // namespace metaroce::verbs
