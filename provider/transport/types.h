// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Vocabulary shared by the sans-I/O engine and whatever drives it (the io/
// runtime, the simulator, tests). Numeric values of the verbs-facing enums are
// those of libibverbs so the verbs layer can pass them through unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

namespace metaroce::transport {

// Nanoseconds on the driver's clock (virtual time in the simulator).
using Time = uint64_t;
inline constexpr Time kNever = std::numeric_limits<Time>::max();

// The driver's name for a remote endpoint (an IP address and home port in
// io/, a node number in the simulator). The engine only compares them.
using PeerId = uint32_t;

enum class Profile : uint8_t {
  MetaRoCE,  // multipath spraying, per-path SACK, selective retransmission
  RoCEv2,    // one path, one PSN space, NAK on first gap, go-back-N
};

// ibv_access_flags
enum Access : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
};

enum class QpState : uint8_t { Reset, Init, ReadyToReceive, ReadyToSend, Error };
const char* to_string(QpState state);  // "reset", "init", "rtr", "rts", "error"

// ibv_wc_status
enum class WcStatus : uint8_t {
  Success = 0,
  LocalLengthError = 1,
  LocalQpOperationError = 2,
  LocalProtectionError = 4,
  WorkRequestFlushed = 5,
  BadResponse = 7,
  LocalAccessError = 8,
  RemoteInvalidRequest = 9,
  RemoteAccessError = 10,
  RemoteOperationError = 11,
  RetryExceeded = 12,
  RnrRetryExceeded = 13,
  GeneralError = 21,
};

// ibv_wc_opcode
enum class WcOpcode : uint8_t {
  Send = 0,
  RdmaWrite = 1,
  RdmaRead = 2,
  CompareSwap = 3,
  FetchAdd = 4,
  Recv = 128,
  RecvRdmaWithImm = 129,
};

// ibv_wr_opcode
enum class WrOpcode : uint8_t {
  RdmaWrite = 0,
  RdmaWriteWithImm = 1,
  Send = 2,
  SendWithImm = 3,
  RdmaRead = 4,
  CompareSwap = 5,
  FetchAdd = 6,
};

inline constexpr uint32_t kMaxSge = 8;

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  bool signaled = true;
  bool inline_data = false;  // payload copied at post time; buffers reusable on return
  bool fence = false;        // IBV_SEND_FENCE: starts only once every earlier READ and atomic completed
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg{};
  uint32_t imm = 0;          // host order
  uint64_t remote_addr = 0;  // RDMA and atomics
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // atomics
  uint64_t swap = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg{};
};

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  uint32_t byte_len = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t imm = 0;  // host order; valid when has_imm
  bool has_imm = false;
  bool has_grh = false;  // UD receive: the buffer starts with a 40-byte GRH
};

// An address as a verbs GID: IPv6, or IPv4 as ::ffff:a.b.c.d.
using Gid = std::array<uint8_t, 16>;

// What the engine reports asynchronously (verbs: ibv_get_async_event).
enum class AsyncEventKind : uint8_t {
  QpFatal,           // a QP entered the error state by itself (its failed request completed in error)
  QpLastWqeReached,  // an SRQ-attached QP in error will take no more receives
  SrqLimitReached,   // an armed SRQ fell below its limit (now disarmed)
};

struct AsyncEvent {
  AsyncEventKind kind = AsyncEventKind::QpFatal;
  uint32_t object = 0;  // QP number, or SRQ id
};

// Result of a post or management call; mirrors the errno a verbs call returns.
enum class PostResult : uint8_t {
  Ok = 0,
  InvalidArgument,  // EINVAL
  QueueFull,        // ENOMEM
  BadState,         // EINVAL: QP not in a state that accepts this
  NoSuchObject,     // EINVAL: unknown QP/CQ/MR
};

}  // namespace metaroce::transport
