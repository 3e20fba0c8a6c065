// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The io_uring backend (liburing):
//  - one multishot recvmsg on the home socket with a provided-buffer ring:
//    the kernel fills a free buffer per (GRO super-)datagram while the
//    progress thread is busy elsewhere, and buffers return to the ring once
//    the engine has consumed them. Kernels without multishot recvmsg get a
//    small ring of posted recvmsg requests instead (few of them: every armed
//    request on a socket is woken by every arrival);
//  - sends as sendmsg requests, a batch's worth queued and submitted with the
//    next wait: one io_uring_enter per progress iteration carries every send
//    and collects every completion; several batch arenas rotate so that a
//    batch the kernel still reads is never overwritten. With
//    BackendConfig::zerocopy, a message with enough payload in application
//    memory is a sendmsg_zc request, whose arena stays busy until the
//    kernel's notification that it let go of the pages;
//  - a posted read on the kick eventfd, and one on the timerfd;
//  - sleeping in io_uring_submit_and_wait_timeout (no timeout request).
// The ring is set up with DEFER_TASKRUN + SINGLE_ISSUER where the kernel has
// them (completion work then runs only when this thread enters the kernel),
// falling back to fewer flags on older kernels.
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "io_backend.h"
#include "provided_buffers.h"

namespace metaroce::io {
namespace {

constexpr uint64_t kTagRx = 1;
constexpr uint64_t kTagTx = 2;
constexpr uint64_t kTagKick = 3;
constexpr uint64_t kTagCancel = 4;
constexpr uint64_t kTagRxMultishot = 5;
constexpr uint64_t kTagTimer = 6;
constexpr uint64_t kTagTxZeroCopy = 7;
constexpr size_t kArenas = 4;
constexpr uint32_t kPostedReceives = 16;
constexpr uint16_t kBufferGroup = 0;
// A loop iteration that received at least this many datagrams means a stream:
// the next sleep waits for kStreamingWaitCompletions completions or
// kStreamingWaitNs, whichever comes first.
constexpr size_t kStreamingBatch = 8;
constexpr unsigned kStreamingWaitCompletions = 16;
constexpr transport::Time kStreamingWaitNs = 30'000;

uint64_t user_data(uint64_t tag, uint64_t arena, uint64_t index) { return tag << 56 | arena << 32 | index; }
uint64_t tag_of(uint64_t data) { return data >> 56; }
uint64_t arena_of(uint64_t data) { return (data >> 32) & 0xff; }
uint32_t index_of(uint64_t data) { return static_cast<uint32_t>(data); }

__kernel_timespec to_kernel_timespec(transport::Time ns) {
  __kernel_timespec ts;
  ts.tv_sec = static_cast<long long>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long long>(ns % 1'000'000'000);
  return ts;
}

class UringBackend final : public IoBackend {
 public:
  explicit UringBackend(const BackendConfig& config) : IoBackend(config.gso), config_(config) {
    for (auto& arena : arenas_) arena = std::make_unique<TxBatch>(config.tx_capacity, config.tx_slot_bytes);
    messages_.reserve(std::max(config.rx_slots, kPostedReceives));
    ready_slots_.reserve(kPostedReceives);
    held_buffers_.reserve(size_t{2} * config.rx_slots);  // >= the provided count (a power of two)
  }

  ~UringBackend() override {
    if (!ring_ready_) return;
    // The kernel may still reference our receive buffers, batch arenas and
    // the eventfd buffer: cancel everything and collect the completions
    // before the memory goes away (bounded).
    shutting_down_ = true;
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, user_data(kTagCancel, 0, 0));
    const transport::Time give_up = config_.clock->now() + 2'000'000'000;
    while (outstanding() > 0 && config_.clock->now() < give_up) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts = to_kernel_timespec(10'000'000);
      (void)io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      reap();
    }
    if (provided_) provided_->unregister(ring_);
    io_uring_queue_exit(&ring_);
  }

  bool init(std::string& reason) {
    const unsigned entries = 512;
    static constexpr unsigned kFlagSets[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
        0,
    };
    int result = -EINVAL;
    for (const unsigned flags : kFlagSets) {
      io_uring_params params;
      std::memset(&params, 0, sizeof params);
      params.flags = flags | IORING_SETUP_CQSIZE;
      params.cq_entries = 4096;
      result = io_uring_queue_init_params(entries, &ring_, &params);
      if (result != -EINVAL) break;
    }
    if (result < 0) {
      reason = std::string("io_uring_queue_init: ") + std::strerror(-result);
      return false;
    }
    ring_ready_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool ops = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_SENDMSG) &&
                     io_uring_opcode_supported(probe, IORING_OP_RECVMSG) &&
                     io_uring_opcode_supported(probe, IORING_OP_READ);
    zerocopy_ = config_.zerocopy && ops && io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
    if (probe) io_uring_free_probe(probe);
    if (!ops) {
      reason = "io_uring lacks SENDMSG/RECVMSG/READ";
      return false;
    }
    // Registered files spare the per-request file lookup; optional. The
    // table is sparse, with room for every path socket added later.
    if (io_uring_register_files_sparse(&ring_, static_cast<unsigned>(2 + kMaxPathSockets)) == 0) {
      const int head[2] = {config_.home_fd, config_.event_fd};
      fixed_files_ = io_uring_register_files_update(&ring_, 0, head, 2) == 2;
      if (fixed_files_) register_path_files();
    }

    provided_ = std::make_unique<ProvidedBuffers>(config_.rx_slots, config_.rx_buffer_bytes);
    if (provided_->register_with(ring_, kBufferGroup) == 0) {
      arm_multishot();
    } else {
      provided_.reset();
      start_posted_receives();
    }
    arm_kick();
    arm_timer();
    const int submitted = io_uring_submit(&ring_);
    if (submitted < 0) {
      reason = std::string("io_uring_submit: ") + std::strerror(-submitted);
      return false;
    }
    return true;
  }

  bool is_io_uring() const override { return true; }

  uint32_t wait(transport::Time deadline) override {
    arm_kick();
    arm_timer();
    rearm_receive();
    if (pending_sends_ > 0 || !messages_.empty() || kicked_ || deadline <= config_.clock->now()) {
      // Submit what is queued and collect completions without sleeping.
      enter_nowait();
      if (!messages_.empty() || kicked_ || deadline <= config_.clock->now()) return 0;
    }
    // Under a stream of datagrams, sleep until several completions are
    // ready (or a short while passes) rather than until the first: with
    // DEFER_TASKRUN the kernel then wakes this thread once per batch, not
    // once per datagram, and a wake-up costs more than the datagram.
    const bool streaming = last_batch_ >= kStreamingBatch;
    const unsigned want = streaming ? kStreamingWaitCompletions : 1;
    uint32_t sleeps = 0;
    while (!config_.stop->load(std::memory_order_relaxed)) {
      // A receive that ended in the last round without delivering anything
      // (a multishot's -ENOBUFS, a failed posted receive) is armed again
      // before sleeping: nothing else would end a sleep without a deadline.
      rearm_receive();
      if (multishot_unsupported_) break;  // release_received() falls back to posted receives
      io_uring_cqe* cqe = nullptr;
      int result;
      if (deadline == transport::kNever && !streaming) {
        result = io_uring_submit_and_wait(&ring_, 1);
      } else {
        const transport::Time now = config_.clock->now();
        if (deadline <= now) break;
        transport::Time wait = deadline - now;
        if (streaming) wait = std::min(wait, kStreamingWaitNs);
        __kernel_timespec ts = to_kernel_timespec(wait);
        result = io_uring_submit_and_wait_timeout(&ring_, &cqe, want, &ts, nullptr);
      }
      ++sleeps;
      ++counters_.receive_syscalls;
      count_send_submission();
      reap();
      if (!messages_.empty() || kicked_ || result == -ETIME) break;
      if (result < 0 && result != -EINTR && result != -EAGAIN && result != -EBUSY) break;
    }
    return sleeps;
  }

  std::span<const RxMessage> receive() override {
    reap();
    return messages_;
  }

  void release_received() override {
    last_batch_ = messages_.size();
    messages_.clear();
    if (provided_) {
      for (const uint16_t id : held_buffers_) provided_->give_back(id);
      provided_->publish();
      held_buffers_.clear();
      if (multishot_unsupported_) {
        // The kernel refused multishot recvmsg: posted requests from now on.
        provided_->unregister(ring_);
        provided_.reset();
        start_posted_receives();
      } else if (!multishot_armed_) {
        arm_multishot();
      }
      return;
    }
    for (const uint32_t slot : ready_slots_) post_receive(slot);
    ready_slots_.clear();
  }

  TxBatch& tx_batch() override {
    TxBatch& batch = *arenas_[current_];
    const transport::Time give_up = config_.clock->now() + 1'000'000'000;
    while (batch.inflight > 0) {
      // The kernel still reads this arena (sends waiting for socket buffer
      // space): wait for them; receive completions are kept for later.
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts = to_kernel_timespec(1'000'000);
      (void)io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      ++counters_.receive_syscalls;
      count_send_submission();
      reap();
      if (config_.stop->load(std::memory_order_relaxed) && config_.clock->now() > give_up) break;
    }
    batch.clear();
    return batch;
  }

  void send(TxBatch& batch) override {
    size_t arena = 0;
    while (arena < kArenas && arenas_[arena].get() != &batch) ++arena;
    if (arena == kArenas) return;
    mmsghdr* messages = batch.messages();
    for (size_t i = 0; i < batch.message_count(); ++i) {
      io_uring_sqe* sqe = get_sqe();
      const uint16_t socket = batch.info(i).socket;
      const bool fixed = socket < registered_paths_;
      const int fd = fixed ? static_cast<int>(2 + socket) : config_.path_fds[socket];
      const bool zerocopy = zerocopy_ && batch.info(i).zerocopy;
      if (zerocopy) io_uring_prep_sendmsg_zc(sqe, fd, &messages[i].msg_hdr, 0);
      else io_uring_prep_sendmsg(sqe, fd, &messages[i].msg_hdr, 0);
      if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, user_data(zerocopy ? kTagTxZeroCopy : kTagTx, arena, i));
      ++batch.inflight;
      ++pending_sends_;
    }
    current_ = (arena + 1) % kArenas;
    mark_unsent(pending_sends_ > 0);
  }

  void submit_sends() override {
    if (pending_sends_ == 0) return;
    (void)io_uring_submit(&ring_);
    count_send_submission();
  }

  void set_path_fds(std::vector<int> fds) override {
    config_.path_fds = std::move(fds);
    if (fixed_files_) register_path_files();
  }

  void drain_sends(transport::Time deadline) override {
    while (true) {
      enter_nowait();
      size_t inflight = 0;
      for (const auto& arena : arenas_) inflight += arena->inflight;
      const transport::Time now = config_.clock->now();
      if (inflight == 0 || now >= deadline) return;
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts = to_kernel_timespec(std::min<transport::Time>(deadline - now, 1'000'000));
      (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
  }

 private:
  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      // Submission queue full: hand it to the kernel and retry.
      (void)io_uring_submit(&ring_);
      count_send_submission();
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  // Registers the path sockets not registered yet; those beyond the table
  // (or refused) are used by descriptor.
  void register_path_files() {
    const size_t count = std::min(config_.path_fds.size(), kMaxPathSockets);
    if (count <= registered_paths_) return;
    const unsigned added = static_cast<unsigned>(count - registered_paths_);
    if (io_uring_register_files_update(&ring_, static_cast<unsigned>(2 + registered_paths_),
                                       config_.path_fds.data() + registered_paths_, added) == static_cast<int>(added))
      registered_paths_ = count;
  }

  // Called with nothing received pending (messages_ empty), so that every
  // provided buffer and every posted slot is back with the kernel's side.
  void rearm_receive() {
    if (shutting_down_ || !messages_.empty()) return;
    if (provided_) {
      if (multishot_armed_ || multishot_unsupported_) return;
      arm_multishot();
      return;
    }
    for (const uint32_t slot : ready_slots_) post_receive(slot);
    ready_slots_.clear();
  }

  void arm_multishot() {
    io_uring_sqe* sqe = get_sqe();
    if (fixed_files_) {
      io_uring_prep_recvmsg_multishot(sqe, 0, provided_->message_template(), 0);
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_recvmsg_multishot(sqe, config_.home_fd, provided_->message_template(), 0);
    }
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    io_uring_sqe_set_data64(sqe, user_data(kTagRxMultishot, 0, 0));
    multishot_armed_ = true;
  }

  void start_posted_receives() {
    rx_ = std::make_unique<RxSlots>(kPostedReceives, config_.rx_buffer_bytes);
    for (uint32_t i = 0; i < rx_->count(); ++i) post_receive(i);
  }

  void post_receive(uint32_t slot) {
    io_uring_sqe* sqe = get_sqe();
    msghdr& header = rx_->arm(slot);
    if (fixed_files_) {
      io_uring_prep_recvmsg(sqe, 0, &header, 0);
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_recvmsg(sqe, config_.home_fd, &header, 0);
    }
    io_uring_sqe_set_data64(sqe, user_data(kTagRx, 0, slot));
    ++receives_posted_;
  }

  void arm_kick() {
    if (kick_armed_ || shutting_down_) return;
    io_uring_sqe* sqe = get_sqe();
    if (fixed_files_) {
      io_uring_prep_read(sqe, 1, &kick_value_, sizeof kick_value_, 0);
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_read(sqe, config_.event_fd, &kick_value_, sizeof kick_value_, 0);
    }
    io_uring_sqe_set_data64(sqe, user_data(kTagKick, 0, 0));
    kick_armed_ = true;
  }

  void arm_timer() {
    if (config_.timer_fd < 0 || timer_armed_ || shutting_down_) return;
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, config_.timer_fd, &timer_value_, sizeof timer_value_, 0);
    io_uring_sqe_set_data64(sqe, user_data(kTagTimer, 0, 0));
    timer_armed_ = true;
  }

  void enter_nowait() {
    (void)io_uring_submit_and_get_events(&ring_);
    ++counters_.receive_syscalls;
    count_send_submission();
    reap();
  }

  void mark_unsent(bool unsent) {
    if (config_.sends_unsent) config_.sends_unsent->store(unsent, std::memory_order_release);
  }

  void count_send_submission() {
    if (pending_sends_ == 0) return;
    ++counters_.send_syscalls;
    pending_sends_ = 0;
    mark_unsent(false);
  }

  size_t outstanding() const {
    size_t n = receives_posted_ + (kick_armed_ ? 1 : 0) + (timer_armed_ ? 1 : 0) + (multishot_armed_ ? 1 : 0);
    for (const auto& arena : arenas_) n += arena->inflight;
    return n;
  }

  void reap() {
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      handle(io_uring_cqe_get_data64(cqe), cqe->res, cqe->flags);
      ++seen;
    }
    if (seen) io_uring_cq_advance(&ring_, seen);
  }

  void handle(uint64_t data, int result, uint32_t flags) {
    switch (tag_of(data)) {
      case kTagRxMultishot: {
        if (!(flags & IORING_CQE_F_MORE)) {
          multishot_armed_ = false;  // armed again by rearm_receive() or release_received()
          if (!shutting_down_) ++counters_.receive_restarts;
        }
        if (result < 0) {
          // -ENOBUFS: every buffer is with the engine; -EINVAL before any
          // data: this kernel has no multishot recvmsg.
          if (result == -EINVAL && !multishot_delivered_) multishot_unsupported_ = true;
          return;
        }
        if (!(flags & IORING_CQE_F_BUFFER)) return;
        const auto id = static_cast<uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
        held_buffers_.push_back(id);
        if (shutting_down_) return;
        multishot_delivered_ = true;
        RxMessage message;
        if (provided_ && provided_->parse(id, result, message)) messages_.push_back(message);
        return;
      }
      case kTagRx: {
        --receives_posted_;
        const uint32_t slot = index_of(data);
        if (shutting_down_) return;
        ready_slots_.push_back(slot);
        // A failed receive leaves a slot to re-post and nothing to deliver.
        if (result >= 0) messages_.push_back(rx_->message(slot, static_cast<uint32_t>(result)));
        return;
      }
      case kTagTx:
      case kTagTxZeroCopy: {
        TxBatch& batch = *arenas_[arena_of(data)];
        // A zero-copy send completes twice: with its result (F_MORE set when
        // a notification follows), then with the notification that the
        // kernel has let go of the pages. The arena is busy until the last.
        if (flags & IORING_CQE_F_NOTIF) {
          if (batch.inflight > 0) --batch.inflight;
          return;
        }
        if (!(flags & IORING_CQE_F_MORE) && batch.inflight > 0) --batch.inflight;
        const TxBatch::MessageInfo& info = batch.info(index_of(data));
        if (result >= 0) {
          counters_.datagrams_sent += info.segments;
          if (info.segments > 1) ++counters_.gso_sends;
          if (tag_of(data) == kTagTxZeroCopy) ++counters_.zerocopy_sends;
        } else if (tag_of(data) == kTagTxZeroCopy &&
                   (result == -EOPNOTSUPP || result == -EINVAL || result == -EMSGSIZE)) {
          // A socket or kernel that refuses zero-copy, or fewer fragments a
          // send than TxBatch assumes: copy from now on (the engine resends).
          counters_.send_errors += info.segments;
          zerocopy_ = false;
        } else {
          counters_.send_errors += info.segments;
          if (result == -EMSGSIZE) counters_.oversize_drops += info.segments;
          if (info.segments > 1 && (result == -EIO || result == -EINVAL)) gso_ = false;
        }
        return;
      }
      case kTagKick:
        kick_armed_ = false;
        if (result > 0) kicked_ = true;
        return;
      case kTagTimer:
        timer_armed_ = false;
        if (result > 0) kicked_ = true;
        return;
      default: return;  // cancel results, liburing's internal timeouts
    }
  }

  BackendConfig config_;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool fixed_files_ = false;     // home and event fds registered (slots 0, 1)
  size_t registered_paths_ = 0;  // path sockets [0, n) registered at slot 2 + i
  bool shutting_down_ = false;
  std::unique_ptr<ProvidedBuffers> provided_;  // multishot mode
  bool multishot_armed_ = false;
  bool multishot_delivered_ = false;
  bool multishot_unsupported_ = false;
  std::vector<uint16_t> held_buffers_;  // provided buffers the engine has not consumed yet
  std::unique_ptr<RxSlots> rx_;         // posted-request mode
  uint32_t receives_posted_ = 0;
  std::vector<RxMessage> messages_;    // received, in completion order
  size_t last_batch_ = 0;              // messages_.size() at the last release_received()
  std::vector<uint32_t> ready_slots_;  // slots to re-post after the engine consumed them
  std::array<std::unique_ptr<TxBatch>, kArenas> arenas_;
  size_t current_ = 0;
  uint32_t pending_sends_ = 0;  // send requests queued but not yet submitted
  uint64_t kick_value_ = 0;
  bool kick_armed_ = false;
  uint64_t timer_value_ = 0;
  bool timer_armed_ = false;
};

}  // namespace

std::unique_ptr<IoBackend> make_uring_backend(const BackendConfig& config, std::string& reason) {
  auto backend = std::make_unique<UringBackend>(config);
  if (!backend->init(reason)) return nullptr;
  return backend;
}

}  // namespace metaroce::io
