// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// An attacker node on the simulated fabric (issue 11, item 5): a Tap that
// sees every datagram reaching an engine host and, seeded and deterministic,
// injects copies made from what it saw, from the genuine sender's own
// address, source port and home port:
//
//  * exact replays, at once and later;
//  * corruptions without a CRC fix: bit flips, truncations, extensions,
//    4- and 8-byte overwrites, garbage (some behind a genuine common header);
//  * forged control and data packets with a correct CRC32C, built with the
//    engine's wire encoders from observed genuine ones (forge.h): an ACK
//    whose stream entry completes a message far ahead, an ACK block beyond
//    the last sequence sent, a 1 Mb/s rate hint, RemoteAccess and
//    InvalidRequest NAKs of attempt 0 and of an observed attempt, an RNR NAK
//    of the largest delay, a data packet with its path_seq far ahead, and a
//    READ request of an enormous length.
//
// In integrity mode a correct CRC is all a receiver can check, and docs/spec.md
// §8.14 accepts that a forger on the path can make *consistent* claims (a
// NAK of the attempt in flight). So by default the forged claims are the
// inconsistent ones the consistency checks must catch: completions and NAKs
// for messages far ahead, NAKs of messages the requester has seen complete,
// READs of completed messages. With `consistent_claims` they name the live
// message and attempt: for the authenticated modes, which must drop them all.
// Forgeries take the packet number after the highest seen from that sender
// (the replay window would drop anything else); in integrity mode the genuine
// datagram that later carries that number is then dropped as a replay, which
// the report counts as displaced.
//
// Accounting: the counters of every watched endpoint are compared before and
// after each injected datagram is delivered; each one must move at least one
// rx_drop_*, rx_duplicate_* or rx_ignored_* counter.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "counters.h"
#include "endpoint.h"
#include "packet_protection.h"
#include "metaroce/splitmix64.h"
#include "metaroce/wire.h"
#include "netsim.h"

namespace metaroce::sim {

enum class Attack : uint8_t {
  ReplayNow,
  ReplayLater,
  BitFlip,
  Truncate,
  Extend,
  Overwrite4,
  Overwrite8,
  Garbage,
  // Forgeries with a correct CRC32C:
  AckStreamAhead,
  AckBlockBeyond,
  AckRateHint,
  NakAttemptZero,
  NakObservedAttempt,
  RnrHugeDelay,
  DataPathJump,
  ReadHuge,
};
inline constexpr size_t kAttackCount = 16;
const char* to_string(Attack attack);
constexpr bool is_forgery(Attack attack) { return attack >= Attack::AckStreamAhead; }

struct AttackerConfig {
  uint64_t seed = 1;
  // Probability that a genuine datagram reaching a watched host is followed
  // by an injection.
  double rate = 0.25;
  Time max_replay_delay_ns = 300'000;  // ReplayLater: uniform in (0, this]
  bool consistent_claims = false;      // see above; for authenticated modes
  // Encrypt mode hides every body from the attacker, leaving it replays and
  // corruptions. Given the key the two watched endpoints share, it reads
  // each genuine datagram's plaintext (as one who knows what the
  // application sends would) and forges from it, but still cannot seal:
  // every forgery must fail its tag.
  std::optional<transport::PairKey> reads_plaintext_with;
  std::vector<Attack> attacks;  // empty = all of them
};

// Outcomes of the injected datagrams: each is classed by the first counter
// class it moved at its receiver, in this order: drop, duplicate, ignored.
struct AttackerReport {
  std::array<uint64_t, kAttackCount> injected{};
  uint64_t dropped = 0, duplicates = 0, ignored = 0;
  uint64_t unaccounted = 0;  // moved none of them: each is a test failure
  // (attack, counter) -> injected datagrams of that attack that moved that
  // counter (a datagram may move several).
  std::map<std::pair<Attack, std::string>, uint64_t> counters;
  // Genuine datagrams a watched host dropped as replays, and how many of
  // them carried a packet number a forgery had taken first.
  uint64_t genuine_replay_drops = 0, displaced = 0;
  uint64_t forgeries_skipped = 0;  // the attack drawn lacked ingredients; another was tried

  uint64_t total_injected() const;
  uint64_t injected_forgeries() const;
  uint64_t count(Attack attack, const std::string& counter) const;
  std::string summary() const;
};

class Attacker : public Tap {
 public:
  Attacker(Simulator& sim, const AttackerConfig& config);
  Attacker(const Attacker&) = delete;
  Attacker& operator=(const Attacker&) = delete;

  // Datagrams to `node` are attacked, and its counters account for them.
  void watch(NodeId node, const transport::Endpoint& endpoint);
  // Stops (or resumes) injecting; what was scheduled still arrives.
  void set_active(bool active) { active_ = active; }
  // Injected datagrams scheduled that have not arrived yet.
  size_t in_flight() const { return in_flight_.size(); }

  void on_arrival(Time now, LinkId link, const Datagram& d, bool injected) override;
  void on_delivered(Time now, LinkId link, bool injected) override;

  const AttackerReport& report() const { return report_; }

 private:
  struct Request {  // a genuine request: who asked, which message and attempt
    wire::DataHeader header;
    wire::ReadRequest read;
    uint16_t path_id = 0;
  };
  // What the attacker knows of the genuine datagrams from one node to another.
  struct Flow {
    bool seen = false;
    Datagram addressing;  // the latest genuine datagram's addresses and ports, no payload
    LinkId link = kNoLink;
    wire::CommonHeader common;  // its common header
    std::vector<uint8_t> trailer;
    std::map<uint32_t, uint32_t> highest_number;               // per dst_epoch
    std::deque<std::pair<uint32_t, uint32_t>> forged_numbers;  // (dst_epoch, number) taken by forgeries
    std::vector<uint8_t> last_data;                            // the latest genuine data datagram
    bool have_ack = false;
    wire::Packet ack;                        // the latest genuine ACK (payload not used)
    std::deque<Request> requests;            // recent genuine requests
    std::map<uint32_t, uint32_t> completed;  // requester qpn -> completed_msn its receiver accepted
  };
  struct Pending {  // an arrival at a watched host, until it has been delivered
    bool active = false;
    bool injected = false;
    Attack attack = Attack::ReplayNow;
    NodeId node = 0;
    std::pair<NodeId, NodeId> flow{0, 0};  // a genuine datagram's (sender, receiver)
    transport::EndpointCounters before;
    bool genuine_ack = false;  // a genuine ACK: its stream entries are believed once accepted
    wire::Packet ack;
    uint32_t dst_epoch = 0, number = 0;
  };

  Flow& flow(NodeId from, NodeId to) { return flows_[{from, to}]; }
  // An encrypt-mode datagram as it was before sealing, its trailer zeroed;
  // empty when the attacker has no key or neither direction's key opens it.
  std::vector<uint8_t> plaintext(const wire::CommonHeader& common, const std::vector<uint8_t>& datagram);
  void observe(Flow& f, const Datagram& d, LinkId link, Pending& pending);
  void attack(Time now, const Datagram& d, LinkId link);
  bool build(Attack a, const Datagram& d, Datagram& out, LinkId& out_link);
  // A forgery from f's sender to f's receiver, from what f and the reverse
  // flow carried.
  bool forge(Attack a, Flow& f, Flow& reverse, Datagram& out);
  bool forge_into(Flow& f, std::vector<uint8_t> body, Datagram& out);
  uint32_t next_number(Flow& f, uint32_t dst_epoch);
  const Request* pick_request(const Flow& requests, const Flow& acks, bool completed_only, bool no_response);
  uint64_t draw() { return rng_.next(); }
  uint64_t draw_upto(uint64_t n) { return n == 0 ? 0 : draw() % (n + 1); }

  Simulator& sim_;
  AttackerConfig config_;
  SplitMix64 rng_;
  bool active_ = true;
  std::map<NodeId, const transport::Endpoint*> watched_;
  std::map<std::pair<NodeId, NodeId>, Flow> flows_;
  // Injections scheduled and not arrived yet: (link, arrival time, payload hash) -> attack.
  std::multimap<std::tuple<LinkId, Time, uint64_t>, Attack> in_flight_;
  Pending pending_;
  AttackerReport report_;
  uint64_t forgery_count_ = 0;  // alternates the framing of forgeries in the authenticated modes
  // reads_plaintext_with's traffic keys by (sender role, sender epoch, receiver epoch).
  std::map<std::tuple<uint8_t, uint32_t, uint32_t>, std::unique_ptr<transport::TrafficKey>> traffic_keys_;
};

}  // namespace metaroce::sim
