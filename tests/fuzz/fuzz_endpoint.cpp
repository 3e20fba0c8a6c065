// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Fuzz target that attacks a live endpoint. Every input builds the same two
// connected endpoints A (PeerId 1) and B (PeerId 2), two RC QPs each, with
// their memory regions inside guarded arenas, runs a legitimate exchange so
// that both sides hold live state (completed messages, a partial inbound SEND,
// a WRITE placed but not completed, executed atomics whose responses were
// lost, outstanding READs), and then interprets the input as a sequence of
// hostile datagrams — structured packets built with the wire encoders from
// fuzz-chosen fields, mutated packets and raw bytes — delivered to B (and
// some to A) from the real peer or from unknown ones, interleaved with local
// actions, clock jumps, timers and the legitimate traffic between A and B.
//
// Input layout: byte 0 selects the configuration (see kCfg*), then records of
// kRecordBytes each (a short last record reads as zero-padded); byte 0 of a
// record is the operation (see kOp*), byte 1 the clock step, the rest its
// fields. A zero field always means the most "valid" choice.
//
// Checked after every delivered datagram (and at the end), abort() on violation:
//  - every byte of both arenas that is not currently writable is unchanged:
//    canaries around and between the regions, regions without the needed
//    access right or in another PD, receive/READ/atomic-result buffers once
//    their work request completed (snapshot at the completion, taken from the
//    completion observer), a region once deregistered;
//  - a request datagram for a message the receiver had already reported
//    completed (its own ACKs say so) changes no application memory;
//  - a datagram dropped as malformed / unknown peer / unknown QP / QP state /
//    out of window changes nothing but its drop counter and rx_datagrams: not
//    the memory, not next_wakeup, no completion, and no heap growth;
//  - a datagram from an unknown peer is dropped as such (or as malformed);
//  - every datagram an endpoint transmits decodes, and goes to its peer;
//  - READ response bytes come from memory that a READ request of that
//    message may read at the time they are sent (checked at transmission);
//  - an atomic executes at most once per (QP, msn): the same response msn
//    never carries two different original values, and atomics_executed grows
//    by at most the number of distinct atomic requests delivered;
//  - the heap grows by at most kHeapBound over an input (endpoints alive);
//  - rx_datagrams equals the number of datagrams delivered;
//  - poll_transmit drains (no endless output at one instant).
// Heap use is read from ASan's allocator statistics, or (without ASan) from
// counting replacements of the global operator new/delete below.
//
// Replay: fuzz_endpoint_replay [files or dirs] runs them and a generated
// corpus (replay_endpoint_main.cpp); FUZZ_ENDPOINT_STATS=1 prints the engine
// counters summed over all inputs, to see which paths a corpus reaches (one
// JSON line, "fuzz_endpoint_stats").
//
// Engine bugs found (now fixed), reproducers in tests/fuzz/corpus/endpoint/,
// which the replay test runs (tests/fuzz/meson.build):
//  - repro-recv-index-below-consumed: three spoofed SENDs from the real peer
//    (msn c+2 chunk 0 and msn c+1 on the same recv_index, then msn c+2 chunk
//    1) make place_request_chunk index recv_queue_ with recv_index -
//    recv_consumed_ < 0: out-of-bounds deque access (SEGV).
//  - repro-read-after-dereg: B deregisters a region while a READ of it is
//    accepted but not yet answered; the READ response is still built from
//    (and retransmitted from) the deregistered memory.
#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "endpoint.h"
#include "metaroce/wire.h"
#include "packet_protection.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ENDPOINT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(FUZZ_ENDPOINT_ASAN)
#define FUZZ_ENDPOINT_ASAN 1
#endif

#if defined(FUZZ_ENDPOINT_ASAN)
// From the sanitizer runtime (declared here: gcc ships no allocator_interface.h).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#elif defined(__GLIBC__)
#include <malloc.h>

#include <new>

// Without ASan (whose allocator keeps exact statistics) live heap bytes are
// counted here: mallinfo2() would count chunks parked in glibc's tcache as in
// use and miss small allocations. The engine allocates only through new.
namespace {
size_t g_live_heap = 0;
void* counted_alloc(size_t size) {
  void* p = std::malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  g_live_heap += malloc_usable_size(p);
  return p;
}
void counted_free(void* p) noexcept {
  if (!p) return;
  g_live_heap -= malloc_usable_size(p);
  std::free(p);
}
}  // namespace
#define FUZZ_ENDPOINT_COUNTED_HEAP 1
void* operator new(size_t size) { return counted_alloc(size); }
void* operator new[](size_t size) { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
#endif

namespace {

namespace wire = metaroce::wire;
using metaroce::transport::Completion;
using metaroce::transport::Endpoint;
using metaroce::transport::EndpointConfig;
using metaroce::transport::EndpointCounters;
using metaroce::transport::PeerId;
using metaroce::transport::PostResult;
using metaroce::transport::Profile;
using metaroce::transport::QpConfig;
using metaroce::transport::QpState;
using metaroce::transport::RecvWr;
using metaroce::transport::SendWr;
using metaroce::transport::Time;
using metaroce::transport::WrOpcode;
namespace tp = metaroce::transport;

// --- parameters ------------------------------------------------------------------

constexpr PeerId kPeerA = 1;
constexpr PeerId kPeerB = 2;
constexpr PeerId kStranger = 3;
constexpr uint32_t kMtu = 256;  // the smallest the engine allows: many chunks per message
constexpr uint16_t kPaths = 4;
constexpr uint32_t kWindow = 32;  // max_outstanding_messages
constexpr uint32_t kQpnBaseA = 0x11;
constexpr uint32_t kQpnBaseB = 0x211;
constexpr uint32_t kPd = 1;
constexpr uint32_t kOtherPd = 2;
constexpr uint32_t kAll =
    tp::kAccessLocalWrite | tp::kAccessRemoteWrite | tp::kAccessRemoteRead | tp::kAccessRemoteAtomic;
constexpr size_t kGuard = 64;
constexpr size_t kRecordBytes = 48;
constexpr size_t kMaxRecords = 64;
constexpr size_t kDrainCap = 4096;         // datagrams one endpoint may emit at one instant
constexpr size_t kHeapBound = 128 * 1024;  // heap growth over one input, endpoints alive (measured max ~6 KB)
constexpr size_t kSettleRounds = 40;
constexpr Time kStart = 1'000'000;

// Input byte 0.
constexpr uint8_t kCfgRoce = 0x01;       // RoCEv2 profile (one path, in order)
constexpr uint8_t kCfgNoAToB = 0x02;     // A's own traffic does not reach B during the attack
constexpr uint8_t kCfgNoBToA = 0x04;     // B's output is discarded instead of looped back to A
constexpr uint8_t kCfgNoPartial = 0x08;  // skip the second, partially delivered exchange

// Record byte 0, low 3 bits: what to do. kData0: a request; kData1: a
// request, a response or any opcode; kContinue: another chunk (or a sibling
// message) of the last hostile data packet, so that multi-packet hostile
// messages interleave with everything else.
enum Kind : uint8_t { kData0, kData1, kContinue, kAckKind, kNakKind, kProbeKind, kRawKind, kActionKind };
constexpr uint8_t kOpToA = 0x08;       // deliver to A (from B's id) instead of to B
constexpr uint8_t kOpCe = 0x10;        // CE-marked
constexpr uint8_t kOpSenderShift = 5;  // 2 bits: 0,1 = the real peer; 2 = stranger; 3 = odd ids
// Record byte 1: low 3 bits clock step, bit 3 = burst (no timers/transmit after it).
constexpr Time kSteps[8] = {0, 200, 1'000, 3'000, 10'000, 40'000, 300'000, 20'000'000};
constexpr uint8_t kStepBurst = 0x08;
constexpr uint8_t kStepMutate = 0x10;  // mutate the built datagram

// --- failure reporting ---------------------------------------------------------------

struct Context {
  const char* phase = "setup";
  size_t record = 0;
  std::array<uint8_t, 2048> last{};
  size_t last_len = 0;
  const char* last_to = "";
  PeerId last_from = 0;
};
Context g_ctx;

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char* fmt, ...) {
  std::fprintf(stderr, "fuzz_endpoint: invariant violated (%s, record %zu): ", g_ctx.phase, g_ctx.record);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fprintf(stderr, "\nlast datagram delivered to %s from peer %u (%zu bytes):", g_ctx.last_to, g_ctx.last_from,
               g_ctx.last_len);
  for (size_t i = 0; i < g_ctx.last_len; ++i) std::fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", g_ctx.last[i]);
  std::fprintf(stderr, "\n");
  std::abort();
}

// FUZZ_ENDPOINT_ALLOW_READ_AFTER_DEREG=1 turns off the check that READ
// response bytes come from memory registered at the time they are sent, to
// fuzz past that known engine bug (tests/fuzz/corpus/endpoint/repro-read-after-dereg).
const bool g_allow_read_after_dereg = std::getenv("FUZZ_ENDPOINT_ALLOW_READ_AFTER_DEREG") != nullptr;

size_t heap_in_use() {
#if defined(FUZZ_ENDPOINT_ASAN)
  return __sanitizer_get_current_allocated_bytes();
#elif defined(FUZZ_ENDPOINT_COUNTED_HEAP)
  return g_live_heap;
#else
  return 0;
#endif
}

bool serial_le(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

// --- input --------------------------------------------------------------------------

// Reads fields from one record; zero past its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
  // A small signed delta, 0 for 0.
  int32_t delta(int range) { return static_cast<int8_t>(u8()) % range; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// --- guarded arena ----------------------------------------------------------------

// A heap buffer holding one endpoint's registered memory. Every byte starts
// with a position-dependent pattern; `expected_` holds what each byte must
// contain while it is not writable. A byte is writable while a live zone (a
// remote-writable region, a posted receive, an outstanding READ/atomic sink)
// covers it; zones never overlap. All comparisons are memcmp over the gaps
// between zones, so the checks stay cheap (and add no coverage noise).
class Arena {
 public:
  explicit Arena(size_t size) : size_(size), bytes_(new uint8_t[size]), expected_(size), snapshot_(size) {
    static const std::vector<uint8_t> pattern = [] {
      std::vector<uint8_t> p(1 << 16);
      for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(0xA5 ^ (i * 151) ^ (i >> 8));
      return p;
    }();
    if (size > pattern.size()) std::abort();
    std::memcpy(bytes_.get(), pattern.data(), size);
    std::memcpy(expected_.data(), pattern.data(), size);
    zones_.reserve(64);
    segments_.reserve(128);
  }

  size_t size() const { return size_; }
  uint8_t* at(size_t offset) { return bytes_.get() + offset; }
  uint64_t addr(size_t offset) const { return reinterpret_cast<uintptr_t>(bytes_.get()) + offset; }

  void set_writable(size_t offset, size_t length, bool on) {
    if (length == 0) return;
    if (on) {
      for (const auto& [from, to] : zones_)
        if (offset < to && from < offset + length) std::abort();  // harness bug: zones overlap
      zones_.emplace_back(offset, offset + length);
    } else {
      const auto it = std::find(zones_.begin(), zones_.end(), std::pair<size_t, size_t>(offset, offset + length));
      if (it == zones_.end()) std::abort();  // harness bug: no such zone
      zones_.erase(it);
      // From now on the bytes must stay as they are.
      std::memcpy(expected_.data() + offset, bytes_.get() + offset, length);
    }
    dirty_ = true;
  }

  // Protected bytes still hold what they must; returns the first bad offset.
  std::optional<size_t> violation() {
    if (dirty_) rebuild();
    for (const auto& [from, to] : segments_) {
      if (std::memcmp(bytes_.get() + from, expected_.data() + from, to - from) == 0) continue;
      return first_difference(bytes_.get(), expected_.data(), from, to);
    }
    return std::nullopt;
  }
  uint8_t expected(size_t offset) const { return expected_[offset]; }
  uint8_t actual(size_t offset) const { return bytes_[offset]; }

  void take_snapshot() { std::memcpy(snapshot_.data(), bytes_.get(), size_); }
  std::optional<size_t> changed_since_snapshot() const {
    if (std::memcmp(snapshot_.data(), bytes_.get(), size_) == 0) return std::nullopt;
    return first_difference(bytes_.get(), snapshot_.data(), 0, size_);
  }

 private:
  static size_t first_difference(const uint8_t* a, const uint8_t* b, size_t from, size_t to) {
    while (from < to && a[from] == b[from]) ++from;
    return from;
  }

  void rebuild() {
    std::sort(zones_.begin(), zones_.end());
    segments_.clear();
    size_t at = 0;
    for (const auto& [from, to] : zones_) {
      if (from > at) segments_.emplace_back(at, from);
      at = to;
    }
    if (at < size_) segments_.emplace_back(at, size_);
    dirty_ = false;
  }

  size_t size_;
  std::unique_ptr<uint8_t[]> bytes_;
  std::vector<uint8_t> expected_;
  std::vector<uint8_t> snapshot_;
  std::vector<std::pair<size_t, size_t>> zones_;     // writable [from, to)
  std::vector<std::pair<size_t, size_t>> segments_;  // protected [from, to)
  bool dirty_ = true;
};

// --- the two endpoints ---------------------------------------------------------------

// Regions (index into Side::regions).
enum RegionB : size_t { kR0Rw, kR1NoWrite, kR2OtherPd, kR3ReadOnly, kR4Recv, kRegionsB };
enum RegionA : size_t { kSource, kReadSink, kAtomicSink, kAOtherPd, kARecv, kRegionsA };

struct Region {
  const char* name = "";
  size_t offset = 0;
  size_t length = 0;
  uint32_t key = 0;
  bool live = false;
};

// A place the attacker may aim at: a region or a buffer inside one.
struct Target {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t key = 0;
};

struct Side;

// A buffer that is writable while its work request is outstanding.
struct Zone {
  Side* side = nullptr;
  size_t offset = 0;
  size_t length = 0;
  uint64_t wr_id = 0;
  bool live = false;
};

// A READ request delivered to a side: what the responder may read for it.
struct ReadSeen {
  uint8_t qp = 0;
  uint32_t msn = 0;
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t rkey = 0;
};

struct AtomicSeen {
  uint8_t qp = 0;
  uint32_t msn = 0;
  uint64_t original = 0;
};

struct Side {
  explicit Side(size_t arena_size) : arena(arena_size) {}
  const char* name = "";
  PeerId self = 0;  // this endpoint's id at the other one
  PeerId peer = 0;  // the other endpoint's id here
  std::unique_ptr<Endpoint> ep;
  Arena arena;
  std::array<uint32_t, 2> cq{};
  std::array<uint32_t, 2> qpn{};
  std::array<Region, 5> regions{};
  std::array<Target, 16> targets{};
  size_t target_count = 0;
  std::array<uint32_t, 2> posted{};              // messages posted per QP = msn of the newest
  std::array<uint32_t, 2> recv_users{};          // of those, how many consume a receive
  std::array<uint32_t, 2> reported_completed{};  // from this side's own ACKs
  std::array<bool, 2> reported{};
  std::array<uint32_t, wire::kMaxPaths> sent_seq{};     // highest data path_seq transmitted
  std::array<uint32_t, wire::kMaxPaths> hostile_seq{};  // next path_seq the attacker uses towards here
  uint64_t delivered = 0;
  uint64_t completions = 0;
  std::array<AtomicSeen, 256> atomic_responses{};
  size_t atomic_response_count = 0;
  std::array<ReadSeen, 512> read_requests{};
  size_t read_request_count = 0;
  bool read_requests_overflow = false;
  std::array<std::pair<uint8_t, uint32_t>, 512> atomic_requests{};
  size_t atomic_request_count = 0;
  bool atomic_requests_overflow = false;
  uint64_t atomics_baseline = 0;
  uint64_t next_wr_id = 1'000'000;

  void add_target(uint64_t addr, uint64_t length, uint32_t key) {
    if (target_count < targets.size()) targets[target_count++] = {addr, length, key};
  }
  int qp_index(uint32_t number) const {
    for (int i = 0; i < 2; ++i)
      if (qpn[i] == number) return i;
    return -1;
  }
};

using Counter = uint64_t EndpointCounters::*;
// Drops that must change nothing else.
constexpr Counter kDropOnly[] = {
    &EndpointCounters::rx_drop_malformed,     &EndpointCounters::rx_drop_integrity,
    &EndpointCounters::rx_drop_security_mode, &EndpointCounters::rx_drop_no_key,
    &EndpointCounters::rx_drop_stale_epoch,   &EndpointCounters::rx_drop_replay,
    &EndpointCounters::rx_drop_unknown_peer,  &EndpointCounters::rx_drop_unknown_qp,
    &EndpointCounters::rx_drop_qp_state,      &EndpointCounters::rx_drop_out_of_window,
    &EndpointCounters::rx_drop_path_jump,
};
const char* counter_name(Counter counter) {
  for (const auto& info : tp::kEndpointCounterInfo)
    if (info.value == counter) return info.name;
  return "?";
}

// The datagram without its trailer when its integrity trailer checks (the
// fuzzed endpoints run in the default integrity mode), else nothing.
std::optional<std::span<const uint8_t>> unframed(std::span<const uint8_t> datagram) {
  wire::CommonHeader common;
  if (wire::decode_common(datagram, common) != wire::DecodeStatus::Ok || common.security != wire::Security::Integrity ||
      datagram.size() < wire::kCommonHeaderBytes + wire::kIntegrityTrailerBytes || !tp::check_integrity(datagram))
    return std::nullopt;
  return datagram.first(datagram.size() - wire::kIntegrityTrailerBytes);
}

class World {
 public:
  explicit World(uint8_t cfg);
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  void setup();
  void attack(const uint8_t* data, size_t size);
  void settle();
  void final_checks();
  template <typename S>
  void add_stats(S& stats) const {
    const size_t heap = heap_in_use();
    stats.add(b_.ep->counters(), a_.ep->counters(), heap > heap_baseline_ ? heap - heap_baseline_ : 0);
  }

 private:
  // Setup helpers.
  void make_endpoint(Side& s, const char* name, PeerId self, PeerId peer, uint32_t qpn_base);
  void register_regions();
  Zone& add_zone(Side& s, size_t offset, size_t length);
  void post_recv(Side& s, int qp, std::initializer_list<std::pair<size_t, size_t>> buffers, uint32_t lkey, bool zone);
  void post_recv_zones(Side& s, int qp, uint64_t wr_id, std::span<const tp::Sge> sges);
  bool post(Side& s, int qp, SendWr wr);
  SendWr local_wr(Side& s, WrOpcode op, size_t region, size_t offset, uint32_t length);
  void on_completions(Side& s, uint32_t cq);
  bool all_idle() const;

  // Traffic.
  enum class Filter { All, None, PartialPhase };
  size_t drain(Side& from, Side& to, Filter filter);
  void observe_tx(Side& from, std::span<const uint8_t> datagram);
  void deliver(Side& to, PeerId from, std::span<const uint8_t> datagram, bool ce);
  void service(bool a_to_b, bool b_to_a, Filter a_filter = Filter::All, Filter b_filter = Filter::All);
  void check_memory();

  // Attack helpers.
  void record(const uint8_t* rec, size_t size);
  struct LastData {
    bool valid = false;
    Side* to = nullptr;
    wire::DataHeader h;
    wire::ReadRequest read;
    wire::AtomicRequest atomic;
    uint64_t original = 0;
  };
  size_t build_data(Reader& r, Kind kind, Side& to, Side& from, std::span<uint8_t> out);
  size_t build_continue(Reader& r, Side& to, Side& from, std::span<uint8_t> out);
  size_t encode_data_packet(Reader& r, uint16_t path, const LastData& d, size_t payload, std::span<uint8_t> out);
  size_t build_ack(Reader& r, Side& to, std::span<uint8_t> out);
  size_t build_nak(Reader& r, Side& to, std::span<uint8_t> out);
  size_t build_probe(Reader& r, std::span<uint8_t> out);
  size_t build_raw(Reader& r, std::span<uint8_t> out);
  void action(Reader& r);
  Target pick_target(Reader& r, Side& s);
  uint16_t pick_path(Reader& r);

  const uint8_t cfg_;
  const bool roce_;
  Time now_ = kStart;
  Side a_;
  Side b_;
  std::array<Zone, 48> zones_{};
  size_t zone_count_ = 0;
  std::vector<uint8_t> txbuf_;
  std::vector<uint8_t> attack_buf_;
  size_t heap_baseline_ = 0;
  // Spare buffers for receives and READ/atomic sinks posted by actions.
  size_t spare_recv_next_ = 0;
  size_t spare_sink_next_ = 0;
  size_t spare_atomic_next_ = 0;
  bool r0_deregistered_ = false;
  bool sink_deregistered_ = false;
  LastData last_;  // the last hostile data packet built
};

// --- setup -----------------------------------------------------------------------------

// B's arena: R0 rw 2048, R1 no-remote-write 512, R2 other-PD 512,
// R3 read-only 512, R4 receive/sink buffers 4096; guards between.
constexpr size_t kBRegionLen[kRegionsB] = {2048, 512, 512, 512, 4096};
// A's arena: source 2048, READ sink 1024, atomic sink 64, other-PD 256, receives 1024.
constexpr size_t kARegionLen[kRegionsA] = {2048, 1024, 64, 256, 1024};

constexpr size_t arena_size(std::span<const size_t> lens) {
  size_t total = kGuard;
  for (size_t len : lens) total += len + kGuard;
  return total;
}

World::World(uint8_t cfg)
    : cfg_(cfg), roce_((cfg & kCfgRoce) != 0), a_(arena_size(kARegionLen)), b_(arena_size(kBRegionLen)) {}

void World::make_endpoint(Side& s, const char* name, PeerId self, PeerId peer, uint32_t qpn_base) {
  EndpointConfig config;
  config.profile = roce_ ? Profile::RoCEv2 : Profile::MetaRoCE;
  config.qpn_base = qpn_base;
  config.paths = kPaths;
  config.mtu = kMtu;
  config.max_outstanding_messages = kWindow;
  config.max_rto_ns = 5'000'000;
  s.name = name;
  s.self = self;
  s.peer = peer;
  s.ep = std::make_unique<Endpoint>(config);
  for (int i = 0; i < 2; ++i) s.cq[i] = s.ep->create_cq(1024);
  s.ep->set_completion_observer([this, &s](uint32_t cq) { on_completions(s, cq); });
}

void World::register_regions() {
  static constexpr const char* kBNames[kRegionsB] = {"B.R0-rw", "B.R1-no-remote-write", "B.R2-other-pd",
                                                     "B.R3-read-only", "B.R4-recv"};
  static constexpr uint32_t kBAccess[kRegionsB] = {kAll, tp::kAccessLocalWrite | tp::kAccessRemoteRead, kAll,
                                                   tp::kAccessRemoteRead, tp::kAccessLocalWrite};
  static constexpr const char* kANames[kRegionsA] = {"A.source", "A.read-sink", "A.atomic-sink", "A.other-pd",
                                                     "A.recv"};
  static constexpr uint32_t kAAccess[kRegionsA] = {tp::kAccessLocalWrite | tp::kAccessRemoteRead, tp::kAccessLocalWrite,
                                                   tp::kAccessLocalWrite, kAll, tp::kAccessLocalWrite};
  auto reg = [](Side& s, size_t count, const size_t* lens, const char* const* names, const uint32_t* access,
                size_t other_pd) {
    size_t offset = kGuard;
    for (size_t i = 0; i < count; ++i) {
      Region& r = s.regions[i];
      r.name = names[i];
      r.offset = offset;
      r.length = lens[i];
      const auto key =
          s.ep->memory().register_region(i == other_pd ? kOtherPd : kPd, s.arena.addr(offset), lens[i], access[i]);
      if (!key) fail("register_region refused %s", names[i]);
      r.key = *key;
      r.live = true;
      s.add_target(s.arena.addr(offset), lens[i], r.key);
      offset += lens[i] + kGuard;
    }
  };
  reg(b_, kRegionsB, kBRegionLen, kBNames, kBAccess, kR2OtherPd);
  reg(a_, kRegionsA, kARegionLen, kANames, kAAccess, kAOtherPd);
  // B.R0 is writable by any peer holding its key.
  b_.arena.set_writable(b_.regions[kR0Rw].offset, b_.regions[kR0Rw].length, true);
}

Zone& World::add_zone(Side& s, size_t offset, size_t length) {
  if (zone_count_ == zones_.size()) fail("harness: too many zones");
  Zone& z = zones_[zone_count_++];
  z = {&s, offset, length, 0, true};
  s.arena.set_writable(offset, length, true);
  return z;
}

void World::post_recv_zones(Side& s, int qp, uint64_t wr_id, std::span<const tp::Sge> sges) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.num_sge = static_cast<uint32_t>(sges.size());
  std::copy(sges.begin(), sges.end(), wr.sg.begin());
  if (s.ep->post_recv(s.qpn[qp], wr) != PostResult::Ok) fail("post_recv refused on %s", s.name);
}

// Posts one receive over `buffers` (arena offsets of s). With `zone` the
// buffers are writable until the receive completes; without (an lkey the QP
// may not write through) they must stay intact.
void World::post_recv(Side& s, int qp, std::initializer_list<std::pair<size_t, size_t>> buffers, uint32_t lkey,
                      bool zone) {
  const uint64_t wr_id = s.next_wr_id++;
  std::array<tp::Sge, tp::kMaxSge> sges{};
  size_t n = 0;
  for (const auto& [offset, length] : buffers) {
    sges[n++] = {s.arena.addr(offset), static_cast<uint32_t>(length), lkey};
    if (zone) add_zone(s, offset, length).wr_id = wr_id;
  }
  post_recv_zones(s, qp, wr_id, {sges.data(), n});
}

SendWr World::local_wr(Side& s, WrOpcode op, size_t region, size_t offset, uint32_t length) {
  SendWr wr;
  wr.wr_id = s.next_wr_id++;
  wr.opcode = op;
  wr.num_sge = 1;
  const Region& r = s.regions[region];
  wr.sg[0] = {s.arena.addr(r.offset + offset), length, r.key};
  return wr;
}

bool World::post(Side& s, int qp, SendWr wr) {
  const bool rts = s.ep->qp_state(s.qpn[qp]) == QpState::ReadyToSend;
  const bool sink =
      wr.opcode == WrOpcode::RdmaRead || wr.opcode == WrOpcode::FetchAdd || wr.opcode == WrOpcode::CompareSwap;
  if (sink) {
    const size_t offset = static_cast<size_t>(wr.sg[0].addr - s.arena.addr(0));
    add_zone(s, offset, wr.sg[0].length).wr_id = wr.wr_id;
  }
  const PostResult result = s.ep->post_send(s.qpn[qp], wr);
  if (result != PostResult::Ok) {
    if (sink) {  // never posted: the buffer is not the engine's
      Zone& z = zones_[--zone_count_];
      s.arena.set_writable(z.offset, z.length, false);
    }
    return false;
  }
  if (rts) {
    ++s.posted[qp];
    if (wr.opcode == WrOpcode::Send || wr.opcode == WrOpcode::SendWithImm || wr.opcode == WrOpcode::RdmaWriteWithImm)
      ++s.recv_users[qp];
  }
  return true;
}

void World::on_completions(Side& s, uint32_t cq) {
  std::array<Completion, 16> batch;
  size_t n;
  while ((n = s.ep->poll_cq(cq, batch)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      ++s.completions;
      for (size_t z = 0; z < zone_count_; ++z) {
        Zone& zone = zones_[z];
        if (zone.side != &s || !zone.live || zone.wr_id != batch[i].wr_id) continue;
        // From now on the buffer belongs to the application again.
        zone.live = false;
        s.arena.set_writable(zone.offset, zone.length, false);
      }
    }
  }
}

bool World::all_idle() const { return a_.ep->next_wakeup() == tp::kNever && b_.ep->next_wakeup() == tp::kNever; }

void World::setup() {
  make_endpoint(a_, "A", kPeerA, kPeerB, kQpnBaseA);
  make_endpoint(b_, "B", kPeerB, kPeerA, kQpnBaseB);
  QpConfig qp_config;
  qp_config.min_rnr_timer_ns = 5'000;
  for (int i = 0; i < 2; ++i) {
    QpConfig c = qp_config;
    c.rnr_retry = i == 0 ? 7 : 2;  // QP1 gives up after RNR retries
    a_.qpn[i] = a_.ep->create_qp(kPd, a_.cq[i], a_.cq[i], c);
    b_.qpn[i] = b_.ep->create_qp(kPd, b_.cq[i], b_.cq[i], c);
    if (!a_.qpn[i] || !b_.qpn[i]) fail("create_qp");
  }
  for (int i = 0; i < 2; ++i) {
    QpConfig c = qp_config;
    c.rnr_retry = i == 0 ? 7 : 2;
    const bool ok = a_.ep->connect_qp(a_.qpn[i], kPeerB, b_.qpn[i], c) == PostResult::Ok &&
                    b_.ep->connect_qp(b_.qpn[i], kPeerA, a_.qpn[i], c) == PostResult::Ok;
    if (!ok) fail("QP state transitions");
  }
  register_regions();
  txbuf_.resize(std::max(a_.ep->max_datagram_bytes(), b_.ep->max_datagram_bytes()));
  attack_buf_.resize(txbuf_.size() + 64);

  // Receives. B: four per QP, the last ones over memory the QP may not write.
  const size_t r4 = b_.regions[kR4Recv].offset;
  const uint32_t r4key = b_.regions[kR4Recv].key;
  post_recv(b_, 0, {{r4 + 0, 520}}, r4key, true);
  post_recv(b_, 0, {{r4 + 576, 320}, {r4 + 960, 320}}, r4key, true);
  post_recv(b_, 0, {{r4 + 1344, 256}}, r4key, true);
  post_recv(b_, 0, {{b_.regions[kR3ReadOnly].offset, 256}}, b_.regions[kR3ReadOnly].key, false);
  post_recv(b_, 1, {{r4 + 1664, 256}}, r4key, true);
  post_recv(b_, 1, {{r4 + 1984, 512}}, r4key, true);
  post_recv(b_, 1, {{b_.regions[kR2OtherPd].offset, 256}}, b_.regions[kR2OtherPd].key, false);
  post_recv(b_, 1, {{r4 + 2500, 56}}, 0xDEAD01, false);
  const size_t av = a_.regions[kARecv].offset;
  post_recv(a_, 0, {{av, 512}}, a_.regions[kARecv].key, true);
  post_recv(a_, 0, {{av + 512, 256}, {av + 800, 200}}, a_.regions[kARecv].key, true);
  // Buffers worth aiming at.
  b_.add_target(b_.arena.addr(r4), 520, r4key);
  b_.add_target(b_.arena.addr(r4 + 2976), 64, r4key);                                // B's outstanding READ sink
  b_.add_target(b_.arena.addr(b_.regions[kR0Rw].offset), 8, b_.regions[kR0Rw].key);  // atomic target
  a_.add_target(a_.arena.addr(a_.regions[kReadSink].offset + 512), 256, a_.regions[kReadSink].key);
  a_.add_target(a_.arena.addr(a_.regions[kAtomicSink].offset + 16), 8, a_.regions[kAtomicSink].key);

  const uint64_t r0 = b_.arena.addr(b_.regions[kR0Rw].offset);
  const uint32_t r0key = b_.regions[kR0Rw].key;
  // Phase 1: a complete exchange in both directions.
  {
    SendWr w = local_wr(a_, WrOpcode::RdmaWrite, kSource, 0, 700);
    w.remote_addr = r0 + 100;
    w.rkey = r0key;
    post(a_, 0, w);
    post(a_, 0, local_wr(a_, WrOpcode::Send, kSource, 700, 500));
    w = local_wr(a_, WrOpcode::FetchAdd, kAtomicSink, 0, 8);
    w.remote_addr = r0;
    w.rkey = r0key;
    w.compare_add = 5;
    post(a_, 0, w);
    post(a_, 1, local_wr(a_, WrOpcode::Send, kSource, 1200, 200));
    w = local_wr(a_, WrOpcode::RdmaRead, kReadSink, 0, 300);
    w.remote_addr = b_.arena.addr(b_.regions[kR1NoWrite].offset);
    w.rkey = b_.regions[kR1NoWrite].key;
    post(a_, 1, w);
    w = local_wr(a_, WrOpcode::CompareSwap, kAtomicSink, 8, 8);
    w.remote_addr = r0 + 8;
    w.rkey = r0key;
    std::memcpy(&w.compare_add, b_.arena.at(b_.regions[kR0Rw].offset + 8), 8);
    w.swap = 0x1122334455667788ull;
    post(a_, 1, w);
    post(b_, 0, local_wr(b_, WrOpcode::Send, kR1NoWrite, 0, 300));
    w = local_wr(b_, WrOpcode::RdmaRead, kR4Recv, 2560, 400);
    w.remote_addr = a_.arena.addr(a_.regions[kSource].offset);
    w.rkey = a_.regions[kSource].key;
    post(b_, 0, w);
  }
  const uint64_t want = a_.completions + b_.completions + 6 + 2 + 2 + 1;
  for (int i = 0; i < 400 && !(a_.completions + b_.completions >= want && all_idle()); ++i) {
    now_ += 2'000;
    service(true, true);
  }
  if (a_.completions + b_.completions < want)
    fail("setup: the legitimate exchange did not complete (%llu of %llu completions)",
         static_cast<unsigned long long>(a_.completions + b_.completions), static_cast<unsigned long long>(want));

  // Phase 2: delivered in part. B sees the SEND's middle chunk lost, so the
  // WRITE and READ behind it wait; QP1's atomic executes but its response,
  // like everything else B sends, is lost; B's own READ never leaves.
  if (!(cfg_ & kCfgNoPartial)) {
    post(a_, 0, local_wr(a_, WrOpcode::Send, kSource, 0, 600));
    SendWr w = local_wr(a_, WrOpcode::RdmaWrite, kSource, 600, 512);
    w.remote_addr = r0 + 1024;
    w.rkey = r0key;
    post(a_, 0, w);
    w = local_wr(a_, WrOpcode::RdmaRead, kReadSink, 512, 256);
    w.remote_addr = r0 + 512;
    w.rkey = r0key;
    post(a_, 0, w);
    w = local_wr(a_, WrOpcode::FetchAdd, kAtomicSink, 16, 8);
    w.remote_addr = r0 + 16;
    w.rkey = r0key;
    w.compare_add = 7;
    post(a_, 1, w);
    w = local_wr(b_, WrOpcode::RdmaRead, kR4Recv, 2976, 64);
    w.remote_addr = a_.arena.addr(a_.regions[kSource].offset + 1024);
    w.rkey = a_.regions[kSource].key;
    post(b_, 1, w);
    for (int i = 0; i < 12; ++i) {
      now_ += 1'000;
      service(true, false, Filter::PartialPhase, Filter::None);
    }
  }
  for (Side* s : {&a_, &b_}) s->atomics_baseline = s->ep->counters().atomics_executed;
  // The attacker continues the real sender's sequence on every path.
  for (int i = 0; i < wire::kMaxPaths; ++i) {
    b_.hostile_seq[i] = a_.sent_seq[i] + 1;
    a_.hostile_seq[i] = b_.sent_seq[i] + 1;
  }
  check_memory();
  heap_baseline_ = heap_in_use();
}

// --- traffic ---------------------------------------------------------------------------

void World::observe_tx(Side& from, std::span<const uint8_t> framed) {
  const auto inner = unframed(framed);
  if (!inner) fail("%s transmitted a datagram whose trailer does not check", from.name);
  const std::span<const uint8_t> datagram = *inner;
  wire::Packet p;
  const wire::DecodeStatus status = wire::decode(datagram, p);
  if (status != wire::DecodeStatus::Ok)
    fail("%s transmitted a datagram that does not decode (%s)", from.name, wire::to_string(status));
  if (p.common.type == wire::PacketType::Data) {
    const uint16_t path = p.common.path_id;
    if (static_cast<int32_t>(p.data.path_seq - from.sent_seq[path]) > 0 || from.sent_seq[path] == 0)
      from.sent_seq[path] = p.data.path_seq;
    if (p.data.opcode == wire::Opcode::ReadResponse && !p.payload.empty() && !from.read_requests_overflow &&
        !g_allow_read_after_dereg) {
      // The bytes must come from memory some READ request of this message
      // may read now: registered, in the QP's PD, with remote read.
      const int qp = from.qp_index(p.data.src_qpn);
      bool allowed = false;
      for (size_t i = 0; i < from.read_request_count && !allowed; ++i) {
        const ReadSeen& r = from.read_requests[i];
        if (r.qp != qp || r.msn != p.data.msn || r.length != p.data.msg_length) continue;
        allowed = from.ep->memory().check_remote(r.rkey, kPd, r.addr + p.data.offset, p.payload.size(),
                                                 tp::kAccessRemoteRead) == tp::AccessCheck::Ok;
      }
      if (!allowed)
        fail(
            "%s sent READ response bytes (QP %d msn %u offset %u, %zu bytes) from memory no READ request of "
            "that message may read now (deregistered or never allowed)",
            from.name, qp, p.data.msn, p.data.offset, p.payload.size());
    }
    if (p.data.opcode == wire::Opcode::AtomicResponse) {
      const int qp = from.qp_index(p.data.src_qpn);
      if (qp < 0) fail("%s sent an atomic response from unknown QP %u", from.name, p.data.src_qpn);
      bool known = false;
      for (size_t i = 0; i < from.atomic_response_count; ++i) {
        const AtomicSeen& seen = from.atomic_responses[i];
        if (seen.qp != qp || seen.msn != p.data.msn) continue;
        known = true;
        if (seen.original != p.atomic_original)
          fail("%s executed the atomic of QP %d msn %u twice: original %#llx, then %#llx", from.name, qp, p.data.msn,
               static_cast<unsigned long long>(seen.original), static_cast<unsigned long long>(p.atomic_original));
      }
      if (!known && from.atomic_response_count < from.atomic_responses.size())
        from.atomic_responses[from.atomic_response_count++] = {static_cast<uint8_t>(qp), p.data.msn, p.atomic_original};
    }
  } else if (p.common.type == wire::PacketType::Ack) {
    // The responder's own word on which messages completed.
    const Side& other = &from == &a_ ? b_ : a_;
    for (uint8_t i = 0; i < p.ack.stream_count; ++i) {
      const int qp = other.qp_index(p.ack.streams[i].qpn);
      if (qp < 0) fail("%s acknowledged a stream of unknown QP %u", from.name, p.ack.streams[i].qpn);
      const uint32_t msn = p.ack.streams[i].completed_msn;
      if (!from.reported[qp] || serial_le(from.reported_completed[qp], msn)) {
        from.reported_completed[qp] = msn;
        from.reported[qp] = true;
      }
    }
  }
}

size_t World::drain(Side& from, Side& to, Filter filter) {
  size_t count = 0;
  while (const auto tx = from.ep->poll_transmit(now_, txbuf_)) {
    if (++count > kDrainCap)
      fail("%s's poll_transmit does not drain at t=%llu", from.name, static_cast<unsigned long long>(now_));
    if (tx->peer != from.peer) fail("%s transmitted to peer %u, which it has no connection with", from.name, tx->peer);
    if (tx->length == 0 || tx->length > txbuf_.size()) fail("%s transmitted %u bytes", from.name, tx->length);
    const std::span<const uint8_t> datagram(txbuf_.data(), tx->length);
    observe_tx(from, datagram);
    if (filter == Filter::None) continue;
    if (filter == Filter::PartialPhase) {
      wire::Packet p;
      (void)wire::decode(datagram.first(datagram.size() - wire::kIntegrityTrailerBytes), p);
      if (p.common.type == wire::PacketType::Data && p.data.opcode == wire::Opcode::Send && p.data.offset == kMtu &&
          p.data.msg_length == 600)
        continue;
    }
    deliver(to, from.self, datagram, false);
  }
  return count;
}

void World::check_memory() {
  for (Side* s : {&a_, &b_}) {
    const auto bad = s->arena.violation();
    if (!bad) continue;
    const char* where = "a guard";
    for (const Region& r : s->regions)
      if (*bad >= r.offset && *bad < r.offset + r.length) where = r.name;
    fail("%s's memory changed where it may not: offset %zu (%s), expected %#04x, found %#04x", s->name, *bad, where,
         s->arena.expected(*bad), s->arena.actual(*bad));
  }
}

void World::deliver(Side& to, PeerId from, std::span<const uint8_t> datagram, bool ce) {
  g_ctx.last_len = std::min(datagram.size(), g_ctx.last.size());
  std::memcpy(g_ctx.last.data(), datagram.data(), g_ctx.last_len);
  g_ctx.last_to = to.name;
  g_ctx.last_from = from;

  wire::Packet p;
  const auto inner = unframed(datagram);
  // A UdSend decodes, but on_datagram() is the connections' entry: the
  // runtime hands UD to on_ud_datagram(), and on_datagram() counts a UdSend
  // as malformed, whoever sent it.
  const bool decodes =
      inner && wire::decode(*inner, p) == wire::DecodeStatus::Ok && p.common.type != wire::PacketType::UdSend;
  const bool real_peer = from == (&to == &b_ ? kPeerA : kPeerB);
  const bool is_data = decodes && p.common.type == wire::PacketType::Data;
  const int qp = is_data ? to.qp_index(p.data.dst_qpn) : -1;
  // A request for a message `to` already told its peer was complete.
  const bool late = is_data && qp >= 0 && wire::is_request(p.data.opcode) && to.reported[qp] &&
                    serial_le(p.data.msn, to.reported_completed[qp]);
  if (is_data && qp >= 0 && real_peer &&
      (p.data.opcode == wire::Opcode::FetchAdd || p.data.opcode == wire::Opcode::CompareSwap)) {
    bool known = false;
    for (size_t i = 0; i < to.atomic_request_count; ++i)
      known |= to.atomic_requests[i] == std::pair<uint8_t, uint32_t>(static_cast<uint8_t>(qp), p.data.msn);
    if (!known) {
      if (to.atomic_request_count < to.atomic_requests.size())
        to.atomic_requests[to.atomic_request_count++] = {static_cast<uint8_t>(qp), p.data.msn};
      else to.atomic_requests_overflow = true;
    }
  }

  if (is_data && qp >= 0 && real_peer && p.data.opcode == wire::Opcode::ReadRequest) {
    const ReadSeen seen{static_cast<uint8_t>(qp), p.data.msn, p.data.remote_addr, p.data.msg_length, p.data.rkey};
    bool known = false;
    for (size_t i = 0; i < to.read_request_count && !known; ++i) {
      const ReadSeen& r = to.read_requests[i];
      known =
          r.qp == seen.qp && r.msn == seen.msn && r.addr == seen.addr && r.length == seen.length && r.rkey == seen.rkey;
    }
    if (!known) {
      if (to.read_request_count < to.read_requests.size()) to.read_requests[to.read_request_count++] = seen;
      else to.read_requests_overflow = true;
    }
  }

  const EndpointCounters before = to.ep->counters();
  const Time wake_before = to.ep->next_wakeup();
  const uint64_t completions_before = to.completions;
  to.arena.take_snapshot();
  const size_t heap_before = heap_in_use();

  to.ep->on_datagram(now_, from, datagram, ce);
  ++to.delivered;

  const size_t heap_after = heap_in_use();
  const EndpointCounters& after = to.ep->counters();
  if (after.rx_datagrams != before.rx_datagrams + 1 || after.rx_datagrams != to.delivered)
    fail("%s.rx_datagrams is %llu after %llu deliveries", to.name, static_cast<unsigned long long>(after.rx_datagrams),
         static_cast<unsigned long long>(to.delivered));
  Counter drop = nullptr;
  for (Counter counter : kDropOnly)
    if (after.*counter != before.*counter) drop = counter;
  if (!decodes && drop != &EndpointCounters::rx_drop_malformed && drop != &EndpointCounters::rx_drop_integrity &&
      drop != &EndpointCounters::rx_drop_security_mode)
    fail("%s did not count an undecodable or corrupted datagram as malformed, failing integrity or of another mode",
         to.name);
  if (decodes && !real_peer && drop != &EndpointCounters::rx_drop_unknown_peer)
    fail("%s accepted a datagram from peer %u, which it has no connection with (counted: %s)", to.name, from,
         drop ? counter_name(drop) : "no drop");
  if (drop) {
    const char* dropped = counter_name(drop);
    for (const auto& info : tp::kEndpointCounterInfo) {
      const uint64_t grew = after.*info.value - before.*info.value;
      if (grew != ((info.value == &EndpointCounters::rx_datagrams || info.value == drop) ? 1u : 0u))
        fail("%s: a dropped datagram (%s) changed %s by %llu", to.name, dropped, info.name,
             static_cast<unsigned long long>(grew));
    }
    if (const auto at = to.arena.changed_since_snapshot())
      fail("%s: a dropped datagram (%s) changed memory at offset %zu", to.name, dropped, *at);
    if (to.ep->next_wakeup() != wake_before) fail("%s: a dropped datagram (%s) changed next_wakeup", to.name, dropped);
    if (to.completions != completions_before) fail("%s: a dropped datagram (%s) completed work", to.name, dropped);
    if (heap_after != heap_before)
      fail("%s: a dropped datagram (%s) left %lld bytes allocated", to.name, dropped,
           static_cast<long long>(heap_after - heap_before));
  }
  if (late) {
    if (const auto at = to.arena.changed_since_snapshot())
      fail("%s: a datagram of QP %d msn %u, reported complete up to %u, wrote memory at offset %zu", to.name, qp,
           p.data.msn, to.reported_completed[qp], *at);
  }
  check_memory();
}

void World::service(bool a_to_b, bool b_to_a, Filter a_filter, Filter b_filter) {
  for (int round = 0; round < 4; ++round) {
    for (Side* s : {&a_, &b_})
      if (s->ep->next_wakeup() <= now_) s->ep->on_timer(now_);
    size_t moved = drain(b_, a_, b_to_a ? b_filter : Filter::None);
    moved += drain(a_, b_, a_to_b ? a_filter : Filter::None);
    if (moved == 0) break;
  }
  check_memory();
}

// --- attack -----------------------------------------------------------------------------

Target World::pick_target(Reader& r, Side& s) {
  const uint8_t sel = r.u8();
  const Target& base = s.targets[sel % s.target_count];
  Target t = base;
  switch ((sel >> 5) & 7) {
    case 5: t.key = s.targets[(sel + 1 + r.u8()) % s.target_count].key; break;
    case 6: t.key ^= 1 + (r.u8() & 3); break;  // same slot, other generation
    case 7: t.key = r.u32(); break;
    default: break;
  }
  const uint8_t how = r.u8();
  switch (how & 7) {
    case 0: break;
    case 1: t.addr += (r.u8() % 40) * 64u; break;
    case 2: t.addr += r.u16() % (base.length + 64); break;
    case 3: t.addr += base.length - std::min<uint64_t>(base.length, r.u8() % 17); break;
    case 4: t.addr -= 1 + r.u8() % 64; break;
    case 5: t.addr = s.arena.addr(0) + r.u16() % s.arena.size(); break;
    case 6: t.addr += 0xFFFFFFFF00000000ull + r.u32(); break;
    default: t.addr = r.u64(); break;
  }
  if (how & 0x08) t.addr &= ~uint64_t{7};
  t.length = t.addr >= base.addr && t.addr <= base.addr + base.length ? base.addr + base.length - t.addr : 0;
  return t;
}

uint16_t World::pick_path(Reader& r) {
  const uint8_t p = r.u8();
  if (p & 0x80) return static_cast<uint16_t>(p % wire::kMaxPaths);
  return roce_ ? 0 : static_cast<uint16_t>(p % kPaths);
}

size_t World::build_data(Reader& r, Kind kind, Side& to, Side& from, std::span<uint8_t> out) {
  static constexpr wire::Opcode kRequestOps[] = {
      wire::Opcode::Send,        wire::Opcode::Write,    wire::Opcode::SendImm,     wire::Opcode::WriteImm,
      wire::Opcode::ReadRequest, wire::Opcode::FetchAdd, wire::Opcode::CompareSwap, wire::Opcode::Write};
  const uint8_t op_sel = r.u8();
  wire::Opcode op = kRequestOps[op_sel % 8];
  if (kind == kData1) {
    switch (op_sel & 3) {
      case 2: op = (op_sel & 4) ? wire::Opcode::AtomicResponse : wire::Opcode::ReadResponse; break;
      case 3: op = static_cast<wire::Opcode>((op_sel >> 2) % wire::kOpcodeCount); break;
      default: op = kRequestOps[(op_sel >> 2) % 8]; break;
    }
  }

  wire::DataHeader h;
  h.opcode = op;
  // Streams.
  const uint8_t q = r.u8();
  const int qp = q & 1;
  switch ((q >> 1) & 7) {
    case 5:
      h.dst_qpn = to.qpn[qp];
      h.src_qpn = from.qpn[qp ^ 1];
      break;
    case 6:
      h.dst_qpn = to.qpn[qp] + 2;
      h.src_qpn = from.qpn[qp];
      break;
    case 7:
      h.dst_qpn = r.u32();
      h.src_qpn = r.u32();
      break;
    default:
      h.dst_qpn = to.qpn[qp];
      h.src_qpn = from.qpn[qp];
      break;
  }
  if (q & 0x80) std::swap(h.dst_qpn, h.src_qpn);
  // Message number: around the requester's newest message.
  const uint32_t base = wire::is_request(op) ? from.posted[qp] : to.posted[qp];
  const uint8_t m = r.u8();
  switch (m & 7) {
    case 4: h.msn = base + kWindow + static_cast<uint32_t>(r.u8() % 5) - 2; break;
    case 5: h.msn = base - 60 - r.u8(); break;
    case 6: h.msn = base + 0x80000000u + static_cast<uint32_t>(r.u8() % 3) - 1; break;
    case 7: h.msn = r.u32(); break;
    default: h.msn = base + static_cast<uint32_t>(r.delta(10)); break;
  }
  if (wire::consumes_receive(op)) h.recv_index = from.recv_users[qp] + static_cast<uint32_t>(r.delta(6));
  else if (m & 0x80) h.recv_index = r.u32();
  const uint16_t path = pick_path(r);
  const uint8_t s = r.u8();
  switch (s & 3) {
    case 0:
    case 1: h.path_seq = to.hostile_seq[path]++; break;
    case 2: h.path_seq = to.hostile_seq[path] - 1 - r.u8() % 300; break;
    default: h.path_seq = r.u32(); break;
  }
  h.flags = static_cast<uint8_t>((s >> 2) & wire::kDataFlagsMask);
  h.attempt = static_cast<uint8_t>((s >> 4) & 3);
  if (s & 0x40) h.attempt = r.u8();

  // Placement. Requests aim at the receiver's memory; a READ response at the
  // requester's sink (the receiver is the requester).
  const Target t = pick_target(r, to);
  h.remote_addr = t.addr;
  h.rkey = t.key;
  const uint8_t l = r.u8();
  uint64_t length;
  switch (l & 7) {
    case 0: length = std::min<uint64_t>(t.length, 3 * kMtu); break;
    case 1: length = r.u8(); break;
    case 2: length = kMtu * (1u + r.u8() % 4); break;
    case 3: length = kMtu * (r.u8() % 4u) + 1 + r.u8() % 64; break;
    case 4: length = t.length + 1; break;
    case 5: length = 0; break;
    case 6: length = r.u16(); break;
    default: length = r.u32(); break;
  }
  h.msg_length = static_cast<uint32_t>(length);
  const bool atomic =
      op == wire::Opcode::FetchAdd || op == wire::Opcode::CompareSwap || op == wire::Opcode::AtomicResponse;
  if (atomic && !(l & 0x80)) h.msg_length = 8;
  size_t payload = 0;
  if (wire::carries_payload(op)) {
    const uint8_t o = r.u8();
    switch (o & 3) {
      case 0: h.offset = 0; break;
      case 1: h.offset = kMtu * (r.u8() % 8u); break;
      case 2: h.offset = h.msg_length ? (h.msg_length - 1) / kMtu * kMtu : 0; break;
      default: h.offset = (o & 0x80) ? r.u32() : r.u8(); break;
    }
    const size_t fits = h.msg_length > h.offset ? std::min<size_t>(kMtu, h.msg_length - h.offset) : 0;
    switch ((o >> 2) & 3) {
      case 2: payload = r.u16() % (kMtu + 64); break;
      case 3: payload = fits ? fits - 1 : 1; break;
      default: payload = fits; break;
    }
  } else if (r.u8() & 0x80) {
    h.offset = r.u32();
  }
  if (op == wire::Opcode::SendImm || op == wire::Opcode::WriteImm) h.imm = r.u32();
  wire::ReadRequest read;
  wire::AtomicRequest atomic_req;
  uint64_t original = 0;
  if (op == wire::Opcode::ReadRequest) {
    const Target sink = pick_target(r, from);
    read = {sink.addr, sink.key};
  } else if (op == wire::Opcode::FetchAdd || op == wire::Opcode::CompareSwap) {
    const uint8_t v = r.u8();
    atomic_req.compare_add = (v & 1) ? r.u64() : v;
    std::memcpy(&atomic_req.swap, "SWAPPED!", 8);
    if (v & 2) atomic_req.swap = r.u64();
  } else if (op == wire::Opcode::AtomicResponse) {
    original = 0x0123456789ABCDEFull ^ r.u64();
  }
  payload = std::min<size_t>(payload, out.size() - wire::data_header_bytes(op));
  last_ = {true, &to, h, read, atomic_req, original};
  return encode_data_packet(r, path, last_, payload, out);
}

size_t World::encode_data_packet(Reader& r, uint16_t path, const LastData& d, size_t payload, std::span<uint8_t> out) {
  const size_t header =
      wire::encode_data(out, {path, wire::kHomePortBase}, d.h, &d.read, &d.atomic, &d.original, payload);
  if (header == 0) return 0;
  const uint8_t fill = r.u8();
  for (size_t i = 0; i < payload; ++i) out[header + i] = static_cast<uint8_t>(fill + i * 7);
  return header + payload;
}

size_t World::build_continue(Reader& r, Side& to, Side& from, std::span<uint8_t> out) {
  if (!last_.valid || last_.to != &to) return build_data(r, kData1, to, from, out);
  const uint8_t sel = r.u8();
  wire::DataHeader& h = last_.h;
  const uint32_t chunks = h.msg_length ? (h.msg_length + kMtu - 1) / kMtu : 1;
  uint32_t chunk = h.offset / kMtu + 1;
  if (sel & 0x80) chunk = r.u8() % 16;
  else if (chunk >= chunks) chunk = 0;
  h.offset = wire::carries_payload(h.opcode) ? chunk * kMtu : 0;
  const uint16_t path = (sel & 0x40) ? pick_path(r) : (roce_ ? 0 : static_cast<uint16_t>(chunk % kPaths));
  h.path_seq = to.hostile_seq[path]++;
  if (sel & 0x20) h.msn += static_cast<uint32_t>(r.delta(4));  // a sibling message
  if (sel & 0x10) h.recv_index += static_cast<uint32_t>(r.delta(3));
  if (sel & 0x08) h.flags = static_cast<uint8_t>(r.u8() & wire::kDataFlagsMask);
  if (sel & 0x04) h.attempt = static_cast<uint8_t>(h.attempt + 1);
  const size_t payload =
      wire::carries_payload(h.opcode) && h.msg_length > h.offset ? std::min<size_t>(kMtu, h.msg_length - h.offset) : 0;
  return encode_data_packet(r, path, last_, payload, out);
}

size_t World::build_ack(Reader& r, Side& to, std::span<uint8_t> out) {
  wire::Ack ack;
  const uint8_t rate = r.u8();
  switch (rate & 3) {
    case 0: ack.rate_hint_mbps = 0; break;
    case 1: ack.rate_hint_mbps = 25'000; break;
    case 2: ack.rate_hint_mbps = 1 + r.u8(); break;
    default: ack.rate_hint_mbps = r.u32(); break;
  }
  ack.ack_delay_ns = (rate & 4) ? r.u32() : r.u8() * 100u;
  const uint8_t counts = r.u8();
  ack.path_count =
      static_cast<uint8_t>((counts & 0x80) ? (counts & 0x1F) % (wire::kMaxAckPathBlocks + 1) : (counts & 3));
  ack.stream_count = static_cast<uint8_t>((counts >> 4) & 3);
  if (counts & 0x40) ack.stream_count = static_cast<uint8_t>(r.u8() % (wire::kMaxAckStreams + 1));
  for (uint8_t i = 0; i < ack.path_count; ++i) {
    wire::PathSack& b = ack.paths[i];
    b.path_id = pick_path(r);
    const uint8_t sel = r.u8();
    b.highest_seq = (sel & 0x80) ? r.u32() : to.sent_seq[b.path_id] + static_cast<uint32_t>(r.delta(12));
    b.ce_count = (sel & 0x40) ? r.u32() : (sel & 7);
    switch ((sel >> 3) & 3) {
      case 0: b.bits.fill(~uint64_t{0}); break;
      case 1: b.bits.fill(0); break;
      case 2: b.bits.fill(r.u64()); break;
      default:
        b.bits.fill(~uint64_t{0});
        b.bits[0] = r.u64();
        break;
    }
  }
  for (uint8_t i = 0; i < ack.stream_count; ++i) {
    const uint8_t sel = r.u8();
    const int qp = sel & 1;
    ack.streams[i].qpn = (sel & 0x80) ? r.u32() : (sel & 0x40) ? to.qpn[qp] + 2 : to.qpn[qp];
    ack.streams[i].completed_msn = (sel & 0x20) ? r.u32() : to.posted[qp] + static_cast<uint32_t>(r.delta(6));
  }
  return wire::encode_ack(out, {pick_path(r), wire::kHomePortBase}, ack);
}

size_t World::build_nak(Reader& r, Side& to, std::span<uint8_t> out) {
  wire::Nak nak;
  const uint8_t sel = r.u8();
  nak.kind = static_cast<wire::NakKind>(1 + sel % 5);
  nak.attempt = static_cast<uint8_t>((sel >> 2) & 3);
  const int qp = (sel >> 4) & 1;
  nak.qpn = (sel & 0x80) ? r.u32() : (sel & 0x40) ? to.qpn[qp] + 2 : to.qpn[qp];
  nak.data_path_id = pick_path(r);
  nak.msn = (sel & 0x20) ? r.u32() : to.posted[qp] + static_cast<uint32_t>(r.delta(6));
  const uint8_t more = r.u8();
  nak.expected_seq = (more & 1) ? r.u32() : to.sent_seq[0] + static_cast<uint32_t>(r.delta(8));
  nak.rnr_delay_ns = (more & 2) ? r.u32() : r.u8() * 1000u;
  return wire::encode_nak(out, {pick_path(r), wire::kHomePortBase}, nak);
}

size_t World::build_probe(Reader& r, std::span<uint8_t> out) {
  const uint8_t sel = r.u8();
  wire::Probe probe;
  probe.probe_seq = (sel & 0x80) ? r.u32() : (sel >> 1) & 3;
  probe.timestamp = (sel & 0x40) ? r.u64() : now_ - r.u16() * 10u;
  return wire::encode_probe(out, {pick_path(r), wire::kHomePortBase},
                            (sel & 1) ? wire::PacketType::ProbeReply : wire::PacketType::Probe, probe);
}

size_t World::build_raw(Reader& r, std::span<uint8_t> out) {
  const uint8_t sel = r.u8();
  const size_t length = std::min<size_t>(sel % 64, out.size());
  size_t at = 0;
  if ((sel & 0x40) && length >= wire::kCommonHeaderBytes) {
    // A plausible common header, then raw bytes.
    out[0] = wire::kVersion;
    out[1] = static_cast<uint8_t>(1 + r.u8() % 5);
    out[2] = 0;
    out[3] = static_cast<uint8_t>(r.u8() % 70);
    at = 4;
  }
  for (; at < length; ++at) out[at] = r.u8();
  return length;
}

void World::action(Reader& r) {
  const uint8_t sel = r.u8();
  const int qp = (sel >> 3) & 1;
  const uint64_t r0 = b_.arena.addr(b_.regions[kR0Rw].offset);
  switch (sel & 7) {
    case 0: {  // A writes to B.R0 (or wherever the fuzzer says)
      SendWr w = local_wr(a_, (sel & 0x10) ? WrOpcode::RdmaWriteWithImm : WrOpcode::RdmaWrite, kSource,
                          r.u8() * 4u % 1024, 1 + r.u16() % 1024);
      w.remote_addr = r0 + r.u8() * 4u;
      w.rkey = (sel & 0x20) ? b_.regions[kR1NoWrite].key : b_.regions[kR0Rw].key;
      post(a_, qp, w);
      break;
    }
    case 1:  // A sends
      post(a_, qp,
           local_wr(a_, (sel & 0x10) ? WrOpcode::SendWithImm : WrOpcode::Send, kSource, r.u8() * 4u % 1024,
                    r.u16() % 700));
      break;
    case 2: {  // B posts another receive
      if (spare_recv_next_ >= 4) break;
      const size_t offset = b_.regions[kR4Recv].offset + 3072 + 256 * spare_recv_next_++;
      post_recv(b_, qp, {{offset, 256}}, b_.regions[kR4Recv].key, true);
      break;
    }
    case 3:  // B deregisters R0 (and perhaps registers its memory again, read-only)
      if (r0_deregistered_) break;
      r0_deregistered_ = true;
      if (!b_.ep->memory().deregister(b_.regions[kR0Rw].key)) fail("deregister B.R0");
      b_.regions[kR0Rw].live = false;
      b_.arena.set_writable(b_.regions[kR0Rw].offset, b_.regions[kR0Rw].length, false);
      if (sel & 0x10) {
        const auto key = b_.ep->memory().register_region(kPd, r0, b_.regions[kR0Rw].length, tp::kAccessRemoteRead);
        if (key) b_.add_target(r0, b_.regions[kR0Rw].length, *key);
      }
      break;
    case 4:  // A deregisters its READ sink region
      if (sink_deregistered_) break;
      sink_deregistered_ = true;
      if (!a_.ep->memory().deregister(a_.regions[kReadSink].key)) fail("deregister A.read-sink");
      a_.regions[kReadSink].live = false;
      break;
    case 5: b_.ep->modify_qp(b_.qpn[qp], {.next = metaroce::transport::QpState::Error}); break;
    case 6: a_.ep->modify_qp(a_.qpn[qp], {.next = metaroce::transport::QpState::Error}); break;
    default: {  // A reads from B, or runs an atomic there
      if (sel & 0x10) {
        if (spare_atomic_next_ >= 4) break;
        SendWr w = local_wr(a_, (sel & 0x20) ? WrOpcode::CompareSwap : WrOpcode::FetchAdd, kAtomicSink,
                            32 + 8 * spare_atomic_next_++, 8);
        w.remote_addr = r0 + 8 * (r.u8() % 4u);
        w.rkey = b_.regions[kR0Rw].key;
        w.compare_add = r.u8();
        w.swap = 0xABCDEF;
        post(a_, qp, w);
      } else {
        if (spare_sink_next_ >= 2) break;
        SendWr w = local_wr(a_, WrOpcode::RdmaRead, kReadSink, 768 + 128 * spare_sink_next_++, 1 + r.u8() % 128);
        const bool other = sel & 0x20;
        w.remote_addr = b_.arena.addr(b_.regions[other ? kR3ReadOnly : kR0Rw].offset) + r.u8();
        w.rkey = b_.regions[other ? kR3ReadOnly : kR0Rw].key;
        post(a_, qp, w);
      }
      break;
    }
  }
  // A READ sink in a deregistered region can no longer be written.
  if (sink_deregistered_) {
    const Region& sink = a_.regions[kReadSink];
    for (size_t z = 0; z < zone_count_; ++z) {
      Zone& zone = zones_[z];
      if (zone.side != &a_ || !zone.live || zone.offset < sink.offset || zone.offset >= sink.offset + sink.length)
        continue;
      zone.live = false;
      a_.arena.set_writable(zone.offset, zone.length, false);
    }
  }
}

void World::record(const uint8_t* rec, size_t size) {
  const uint8_t op = size > 0 ? rec[0] : 0;
  const uint8_t step = size > 1 ? rec[1] : 0;
  Reader r(rec + std::min<size_t>(size, 2), size > 2 ? size - 2 : 0);
  const Kind kind = static_cast<Kind>(op & 7);
  if (kind == kActionKind) {
    action(r);
  } else {
    const bool to_a = (op & kOpToA) != 0;
    Side& to = to_a ? a_ : b_;
    Side& from = to_a ? b_ : a_;
    PeerId sender = from.self;
    switch ((op >> kOpSenderShift) & 3) {
      case 2: sender = kStranger; break;
      case 3: {
        static constexpr PeerId kOdd[] = {0, 0xFFFFFFFFu, kPeerA, kPeerB};
        sender = kOdd[r.u8() % 4];
        break;
      }
      default: break;
    }
    const std::span<uint8_t> out(attack_buf_.data(), txbuf_.size());
    size_t length = 0;
    switch (kind) {
      case kData0:
      case kData1: length = build_data(r, kind, to, from, out); break;
      case kContinue: length = build_continue(r, to, from, out); break;
      case kAckKind: length = build_ack(r, to, out); break;
      case kNakKind: length = build_nak(r, to, out); break;
      case kProbeKind: length = build_probe(r, out); break;
      default: length = build_raw(r, out); break;
    }
    const uint8_t how = (step & kStepMutate) ? r.u8() : 0;
    if (step & kStepMutate) {
      for (int i = 0; i <= (how & 3) && length > 0; ++i) attack_buf_[r.u16() % length] = r.u8();
      if (how & 4) length = r.u16() % (length + 1);
      if (how & 8) {
        const size_t extra = 1 + (how >> 4) % 8;
        for (size_t i = 0; i < extra && length < attack_buf_.size(); ++i) attack_buf_[length++] = r.u8();
      }
    }
    // Framed as the real peer would (epochs, its next packet number, the
    // CRC), so that forged bodies reach the engine; raw bytes stay raw half
    // of the time, and a framed datagram may be corrupted afterwards.
    if (kind != kRawKind || (r.u8() & 1)) {
      if (const size_t framed = from.ep->seal_datagram(from.peer, attack_buf_, length)) length = framed;
      if ((how & 0x80) && length > 0) attack_buf_[r.u16() % length] ^= static_cast<uint8_t>(1u << (how & 7));
    }
    deliver(to, sender, {attack_buf_.data(), length}, (op & kOpCe) != 0);
  }
  now_ += kSteps[step & 7];
  if (!(step & kStepBurst)) service(!(cfg_ & kCfgNoAToB), !(cfg_ & kCfgNoBToA));
}

void World::attack(const uint8_t* data, size_t size) {
  g_ctx.phase = "attack";
  for (size_t i = 0; i < kMaxRecords && i * kRecordBytes < size; ++i) {
    g_ctx.record = i;
    record(data + i * kRecordBytes, std::min(kRecordBytes, size - i * kRecordBytes));
  }
}

void World::settle() {
  g_ctx.phase = "settle";
  for (size_t i = 0; i < kSettleRounds; ++i) {
    const Time wake = std::min(a_.ep->next_wakeup(), b_.ep->next_wakeup());
    if (wake == tp::kNever) break;
    now_ = std::max(now_ + 1'000, std::min(wake, now_ + 1'000'000));
    service(true, true);
  }
}

void World::final_checks() {
  g_ctx.phase = "final";
  check_memory();
  for (Side* s : {&a_, &b_}) {
    if (s->ep->counters().rx_datagrams != s->delivered)
      fail("%s.rx_datagrams = %llu, delivered %llu", s->name,
           static_cast<unsigned long long>(s->ep->counters().rx_datagrams),
           static_cast<unsigned long long>(s->delivered));
    const uint64_t executed = s->ep->counters().atomics_executed - s->atomics_baseline;
    if (!s->atomic_requests_overflow && executed > s->atomic_request_count)
      fail("%s executed %llu atomics for %zu distinct atomic requests", s->name,
           static_cast<unsigned long long>(executed), s->atomic_request_count);
  }
  const size_t heap = heap_in_use();
  if (heap > heap_baseline_ + kHeapBound)
    fail("the endpoints grew the heap by %zu bytes (bound %zu)", heap - heap_baseline_, kHeapBound);
}

// FUZZ_ENDPOINT_STATS=1 in the environment: at exit, B's and A's counters
// summed over all inputs, to see which engine paths a corpus reaches, as one
// JSON line on stderr.
struct Stats {
  static constexpr size_t kCounters = std::size(tp::kEndpointCounterInfo);
  bool on = std::getenv("FUZZ_ENDPOINT_STATS") != nullptr;
  std::array<std::array<uint64_t, kCounters>, 2> sums{};
  uint64_t inputs = 0;
  size_t max_heap_growth = 0;
  void add(const EndpointCounters& b, const EndpointCounters& a, size_t heap_growth) {
    ++inputs;
    max_heap_growth = std::max(max_heap_growth, heap_growth);
    for (size_t i = 0; i < kCounters; ++i) {
      sums[0][i] += b.*tp::kEndpointCounterInfo[i].value;
      sums[1][i] += a.*tp::kEndpointCounterInfo[i].value;
    }
  }
  ~Stats() {
    if (!on) return;
    nlohmann::ordered_json summary = {
        {"inputs", inputs}, {"largest_heap_growth_bytes", max_heap_growth}, {"heap_bound_bytes", kHeapBound}};
    for (size_t i = 0; i < kCounters; ++i) {
      summary["B"][tp::kEndpointCounterInfo[i].name] = sums[0][i];
      summary["A"][tp::kEndpointCounterInfo[i].name] = sums[1][i];
    }
    std::fprintf(stderr, "%s\n", nlohmann::ordered_json{{"fuzz_endpoint_stats", summary}}.dump().c_str());
  }
};
Stats g_stats;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_ctx = Context{};
  const uint8_t cfg = size > 0 ? data[0] : 0;
  World world(cfg);
  world.setup();
  if (size > 1) world.attack(data + 1, size - 1);
  world.settle();
  world.final_checks();
  if (g_stats.on) world.add_stats(g_stats);
  return 0;
}
