// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Gloo (Debian's libgloo) over a verbs device: one rank of a job whose ranks
// meet through gloo's FileStore in a shared directory and connect a full
// mesh of gloo's ibverbs pairs (one RC QP per pair, RDMA WRITE WITH
// IMMEDIATE into the peer's registered buffers, SENDs for the memory-region
// exchange). Then, on every size asked for, many rounds of gloo's ring
// allreduce (AllreduceRing<float>), each checked element by element against
// the sum computed here; barriers (BarrierAllToAll), each checked against
// marker files every rank leaves before it enters; broadcasts
// (BroadcastOneToAll<float>) from every root, checked element by element.
// The values are small integers stored as floats, so every sum is exact.
//
// Gloo 0.5 (Debian's 2022-05 snapshot) sends notifications it never waits
// for: the ring's "ready for your next write" to the left neighbour, every
// barrier message, a broadcast receiver's clear-to-send. Its ibverbs Buffer
// destructor enforces that no send of the buffer is still unacknowledged,
// and throws from the destructor (std::terminate) when one is. Whether the
// peer's ACK has come back by the time the algorithm object goes away is a
// race on any device: the two ranks' last notifications cross, and a rank
// may see its neighbour's before the ACK of its own. (Upstream gloo later
// made that check a warning.) So by default every algorithm here waits, with
// gloo's own Buffer::waitSend and its timeout, for each send it made before
// it is destroyed: a completion that never comes is then a timeout, reported
// as a failure. --no-drain destroys them at once, as a program written
// against gloo's API alone would, and shows gloo's race.
//
// Then, before destroying the context, each rank quiesces (quiesce() below),
// for a second race of gloo 0.5's: its Pair destructor takes no lock (the
// lock came upstream in 2025), and gloo's device thread goes on using a pair
// after it has woken a waiter. Buffer::waitRecv/waitSend return as soon as
// the device thread, inside Pair::pollCompletions under the pair's mutex,
// has counted the completion; the device thread then still posts the
// replacement receive (Pair::postReceive), polls the CQ again and only then
// releases the mutex. A program that destroys its context right after its
// last wait (every message here is waited for: gloo's algorithms wait for
// every receive, drain() for every send) destroys the QP and the CQ under
// that device thread: a crash at exit, the device thread in postReceive. On
// hardware the window is the few µs of that tail; over MetaRoCE the last
// completion is handled while the main thread is already in ~Pair about 1
// job in 25 (completions come from another thread, hundreds of µs apart, so
// the device thread is often mid-handling when the waiter runs on). A user
// of gloo 0.5 over MetaRoCE may see such a segfault at exit after correct
// results; the cure is what quiesce() does:
//  - setSync(true, true) on every pair: an event the device thread reads
//    later only counts itself and neither re-arms nor polls the CQ (a
//    completion that arrives between the device thread's re-arm and its
//    poll leaves such an event behind, its completions already polled);
//  - Pair::createSendBuffer on a fresh slot, which takes the pair's mutex:
//    the device thread held it while it delivered the last completion, so
//    it has left that handling;
//  - a rendezvous through the FileStore: both ranks are quiescent before
//    either destroys anything.
// No completion is due after that (no send is outstanding on either side,
// and the posted receives complete only on a message, of which none comes),
// so no event is generated; and ibv_destroy_cq drops an event still unread
// on the channel. What remains: the handling of an event (one left behind
// as above) that began before setSync and had not reached the pair's mutex
// when createSendBuffer took it, or an event read whose handling had not
// begun; the device thread would have to stay descheduled within those few
// instructions for the whole rendezvous. Gloo's API offers nothing to wait
// for it. --no-quiesce destroys the context right after the last check and
// shows the crash.
//
//   gloo_allreduce --rank R --size N --store DIR [--device mr0] [--port 1]
//                  [--gid-index 0] [--rounds K] [--sizes 1,37,4096,262144,4194304]
//                  [--timeout SECONDS] [--no-drain] [--no-quiesce]
//
// --rounds is the number of rounds at every size up to 64 Ki floats; a larger
// size runs fewer (at least 2), as many as move the bytes of --rounds rounds
// of 64 Ki floats.
// Exits 0 only when every collective completed and every element checked;
// 1 on a wrong element, an exception from gloo (a work completion in error,
// a timeout) or a missing barrier marker.
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/ibverbs/device.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int rank = -1;
  int size = 2;
  std::string store;
  std::string device = "mr0";
  int port = 1;
  int gid_index = 0;
  int rounds = 200;
  std::vector<int> sizes = {1, 37, 4096, 256 * 1024, 4 * 1024 * 1024};
  int timeout_s = 60;
  bool drain = true;
  bool quiesce = true;
};

// The gloo algorithms with a drain(): wait for every send completion of the
// sends run() made and did not wait for (see the top of the file).
class Ring : public gloo::AllreduceRing<float> {
 public:
  using gloo::AllreduceRing<float>::AllreduceRing;
  void run() override {
    gloo::AllreduceRing<float>::run();
    unwaited_ += contextSize_ - 1;  // one notification per round
  }
  void drain() {
    for (; unwaited_ > 0; --unwaited_) sendNotificationBuf_->waitSend();
  }

 private:
  int unwaited_ = 0;
};

class Barrier : public gloo::BarrierAllToAll {
 public:
  using gloo::BarrierAllToAll::BarrierAllToAll;
  void run() override {
    gloo::BarrierAllToAll::run();
    ++unwaited_;  // one message to every peer
  }
  void drain() {
    for (; unwaited_ > 0; --unwaited_)
      for (auto& buffer : sendBuffers_) buffer->waitSend();
  }

 private:
  int unwaited_ = 0;
};

class Broadcast : public gloo::BroadcastOneToAll<float> {
 public:
  using gloo::BroadcastOneToAll<float>::BroadcastOneToAll;
  void run() override {
    gloo::BroadcastOneToAll<float>::run();
    if (receiver_) ++unwaited_;  // a receiver's clear-to-send
  }
  void drain() {
    for (; unwaited_ > 0; --unwaited_) receiver_->clearToSendBuffer->waitSend();
  }

 private:
  int unwaited_ = 0;
};

// Rank r's element j in round k: an integer below 2^12, so that the sum over
// a few ranks is exact in a float (24-bit significand).
float contribution(int rank, int round, int j) { return static_cast<float>((j * 7 + round * 13 + rank * 101) % 4093); }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An exception from gloo, told before the algorithm that saw it is destroyed
// (gloo 0.5's buffer destructors may then end the process).
void tell(const Options& o, const char* what, const std::exception& e) {
  std::fprintf(stderr, "rank %d: %s: %s\n", o.rank, what, e.what());
}

// Reports the first few wrong elements; returns how many there are.
size_t check(const char* what, const std::vector<float>& got, int round, const std::vector<float>& want) {
  size_t wrong = 0;
  for (size_t j = 0; j < got.size(); j++) {
    if (got[j] == want[j]) continue;
    if (wrong < 5)
      std::fprintf(stderr, "%s: round %d element %zu is %.1f, expected %.1f\n", what, round, j, got[j], want[j]);
    wrong++;
  }
  if (wrong > 0) std::fprintf(stderr, "%s: round %d: %zu of %zu elements wrong\n", what, round, wrong, got.size());
  return wrong;
}

bool run_allreduce(const Options& o, const std::shared_ptr<gloo::Context>& ctx, int count, int rounds) {
  std::vector<float> data(count), want(count);
  std::vector<float*> ptrs{data.data()};
  Ring ring(ctx, ptrs, count);
  auto t0 = Clock::now();
  try {
    for (int k = 0; k < rounds; k++) {
      for (int j = 0; j < count; j++) {
        data[j] = contribution(o.rank, k, j);
        float sum = 0;
        for (int r = 0; r < o.size; r++) sum += contribution(r, k, j);
        want[j] = sum;
      }
      ring.run();
      if (check("allreduce", data, k, want) != 0) return false;
    }
    if (o.drain) ring.drain();
  } catch (const std::exception& e) {
    tell(o, "allreduce", e);
    throw;
  }
  double s = seconds_since(t0);
  double mb = static_cast<double>(count) * sizeof(float) * rounds / 1e6;
  std::printf("rank %d: allreduce_ring %d floats x %d rounds ok: %.3f s (%.1f MB/s of vector per rank)\n", o.rank,
              count, rounds, s, mb / s);
  return true;
}

bool run_barrier(const Options& o, const std::shared_ptr<gloo::Context>& ctx, int rounds) {
  namespace fs = std::filesystem;
  Barrier barrier(ctx);
  auto marker = [&](int rank, int k) {
    return fs::path(o.store) / ("barrier-" + std::to_string(rank) + "-" + std::to_string(k));
  };
  auto t0 = Clock::now();
  try {
    for (int k = 0; k < rounds; k++) {
      std::ofstream(marker(o.rank, k)).put('x');
      barrier.run();
      // Every rank left its marker before it entered this barrier.
      for (int r = 0; r < o.size; r++) {
        if (!fs::exists(marker(r, k))) {
          std::fprintf(stderr, "barrier: round %d passed before rank %d reached it\n", k, r);
          return false;
        }
      }
    }
    if (o.drain) barrier.drain();
  } catch (const std::exception& e) {
    tell(o, "barrier", e);
    throw;
  }
  std::printf("rank %d: barrier_all_to_all x %d ok: %.3f s\n", o.rank, rounds, seconds_since(t0));
  return true;
}

bool run_broadcast(const Options& o, const std::shared_ptr<gloo::Context>& ctx, int count, int rounds) {
  std::vector<float> data(count), want(count);
  std::vector<float*> ptrs{data.data()};
  auto t0 = Clock::now();
  for (int root = 0; root < o.size; root++) {
    Broadcast bcast(ctx, ptrs, count, root);
    try {
      for (int k = 0; k < rounds; k++) {
        for (int j = 0; j < count; j++) {
          want[j] = contribution(root, k, j);
          data[j] = o.rank == root ? want[j] : -1.0f;
        }
        bcast.run();
        if (check("broadcast", data, k, want) != 0) return false;
      }
      if (o.drain) bcast.drain();
    } catch (const std::exception& e) {
      tell(o, "broadcast", e);
      throw;
    }
  }
  std::printf("rank %d: broadcast_one_to_all %d floats x %d rounds from each of %d roots ok: %.3f s\n", o.rank, count,
              rounds, o.size, seconds_since(t0));
  return true;
}

// Makes gloo's device thread done with every pair before the context is
// destroyed (see the top of the file). Every completion has been waited for.
void quiesce(const Options& o, gloo::Context& ctx, gloo::rendezvous::Store& store) {
  int unused = 0;
  for (int r = 0; r < o.size; r++) {
    if (r == o.rank) continue;
    auto& pair = ctx.getPair(r);
    pair->setSync(true, true);
    // Takes the pair's mutex, which the device thread holds while it polls;
    // no WR is ever posted for the slot.
    pair->createSendBuffer(ctx.nextSlot(), &unused, sizeof(unused)).reset();
  }
  store.set("quiescent-" + std::to_string(o.rank), {'1'});
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; r++) keys.push_back("quiescent-" + std::to_string(r));
  store.wait(keys, std::chrono::seconds(o.timeout_s));
}

int run(const Options& o) {
  gloo::transport::ibverbs::attr attr;
  attr.name = o.device;
  attr.port = o.port;
  attr.index = o.gid_index;
  auto dev = gloo::transport::ibverbs::CreateDevice(attr);
  std::printf("rank %d: %s\n", o.rank, dev->str().c_str());

  gloo::rendezvous::FileStore store(o.store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
  ctx->setTimeout(std::chrono::seconds(o.timeout_s));
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> base = ctx;

  constexpr int kFullRounds = 64 * 1024;  // floats
  for (int count : o.sizes) {
    int rounds =
        count <= kFullRounds ? o.rounds : std::max(2, static_cast<int>(int64_t{o.rounds} * kFullRounds / count));
    if (!run_allreduce(o, base, count, rounds)) return 1;
  }
  if (!run_barrier(o, base, std::max(2, o.rounds / 2))) return 1;
  if (!run_broadcast(o, base, 64 * 1024, std::max(2, o.rounds / 10))) return 1;
  if (o.quiesce) quiesce(o, *ctx, store);
  std::printf("rank %d: all checked\n", o.rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line reaches the log before a crash could lose it
  Options o;
  CLI::App app{"Gloo's ring allreduce, barrier and broadcast over an ibverbs device, every element checked"};
  app.add_option("--rank", o.rank, "this process's rank")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--size", o.size, "number of ranks")->check(CLI::Range(2, 64));
  app.add_option("--store", o.store, "directory shared by the ranks (gloo FileStore)")->required();
  app.add_option("--device", o.device, "verbs device");
  app.add_option("--port", o.port, "device port");
  app.add_option("--gid-index", o.gid_index, "GID index");
  app.add_option("--rounds", o.rounds, "rounds at each size up to 64 Ki floats (fewer above)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--sizes", o.sizes, "vector lengths in floats")->delimiter(',')->check(CLI::Range(1, 1 << 26));
  app.add_option("--timeout", o.timeout_s, "gloo's timeout in seconds for any one wait")->check(CLI::Range(1, 3600));
  app.add_flag("!--no-drain", o.drain, "destroy each algorithm without waiting for its unwaited sends");
  app.add_flag("!--no-quiesce", o.quiesce, "destroy the context right after the last check (gloo's teardown race)");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.size) {
    std::fprintf(stderr, "--rank must be below --size\n");
    return 2;
  }
  try {
    int rc = run(o);
    std::fflush(stdout);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", o.rank, e.what());
    return 1;
  }
}
