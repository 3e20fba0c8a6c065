// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "attacker.h"

#include <cstring>
#include <sstream>
#include <string_view>

#include "forge.h"

namespace metaroce::sim {

namespace {

constexpr size_t kRequestsKept = 64;
constexpr size_t kForgedNumbersKept = 8192;
constexpr uint32_t kFarAhead = uint32_t{1} << 20;
constexpr uint32_t kEnormousLength = 0xfffff000;

uint64_t payload_hash(const std::vector<uint8_t>& bytes) {
  uint64_t h = splitmix64_mix(bytes.size());
  for (const uint8_t b : bytes) h = splitmix64_mix(h ^ b);
  return h;
}

struct CounterValues {
  std::vector<std::pair<const char*, uint64_t>> values;
  explicit CounterValues(const transport::EndpointCounters& c) {
    transport::for_each_counter(c, [&](const char* name, uint64_t v) { values.emplace_back(name, v); });
  }
};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

const char* to_string(Attack attack) {
  switch (attack) {
    case Attack::ReplayNow: return "replay_now";
    case Attack::ReplayLater: return "replay_later";
    case Attack::BitFlip: return "bit_flip";
    case Attack::Truncate: return "truncate";
    case Attack::Extend: return "extend";
    case Attack::Overwrite4: return "overwrite4";
    case Attack::Overwrite8: return "overwrite8";
    case Attack::Garbage: return "garbage";
    case Attack::AckStreamAhead: return "ack_stream_ahead";
    case Attack::AckBlockBeyond: return "ack_block_beyond";
    case Attack::AckRateHint: return "ack_rate_hint";
    case Attack::NakAttemptZero: return "nak_attempt_zero";
    case Attack::NakObservedAttempt: return "nak_observed_attempt";
    case Attack::RnrHugeDelay: return "rnr_huge_delay";
    case Attack::DataPathJump: return "data_path_jump";
    case Attack::ReadHuge: return "read_huge";
  }
  return "?";
}

uint64_t AttackerReport::total_injected() const {
  uint64_t n = 0;
  for (const uint64_t v : injected) n += v;
  return n;
}

uint64_t AttackerReport::injected_forgeries() const {
  uint64_t n = 0;
  for (size_t i = 0; i < kAttackCount; ++i)
    if (is_forgery(static_cast<Attack>(i))) n += injected[i];
  return n;
}

uint64_t AttackerReport::count(Attack attack, const std::string& counter) const {
  auto it = counters.find({attack, counter});
  return it == counters.end() ? 0 : it->second;
}

std::string AttackerReport::summary() const {
  std::ostringstream out;
  out << "injected " << total_injected() << " (dropped " << dropped << ", duplicates " << duplicates << ", ignored "
      << ignored << ", unaccounted " << unaccounted << "); genuine replay drops " << genuine_replay_drops
      << " (displaced by forgeries " << displaced << ")\n";
  for (size_t i = 0; i < kAttackCount; ++i) {
    const auto a = static_cast<Attack>(i);
    out << "  " << to_string(a) << ": " << injected[i];
    for (const auto& [key, n] : counters)
      if (key.first == a) out << " " << key.second << "=" << n;
    out << "\n";
  }
  return out.str();
}

Attacker::Attacker(Simulator& sim, const AttackerConfig& config)
    : sim_(sim), config_(config), rng_(splitmix64_mix(config.seed ^ 0xa77ac4e7ULL)) {
  if (config_.attacks.empty())
    for (size_t i = 0; i < kAttackCount; ++i) config_.attacks.push_back(static_cast<Attack>(i));
}

void Attacker::watch(NodeId node, const transport::Endpoint& endpoint) { watched_[node] = &endpoint; }

void Attacker::on_arrival(Time now, LinkId link, const Datagram& d, bool injected) {
  const NodeId to = sim_.link_to(link);
  auto w = watched_.find(to);
  if (w == watched_.end()) return;
  pending_ = Pending{};
  pending_.active = true;
  pending_.injected = injected;
  pending_.node = to;
  pending_.before = w->second->counters();
  if (injected) {
    auto it = in_flight_.find({link, now, payload_hash(d.payload)});
    if (it != in_flight_.end()) {
      pending_.attack = it->second;
      in_flight_.erase(it);
    }
    return;
  }
  pending_.flow = {d.src, to};
  observe(flow(d.src, to), d, link, pending_);
  if (active_ && static_cast<double>(draw() >> 11) * 0x1.0p-53 < config_.rate) attack(now, d, link);
}

void Attacker::on_delivered(Time, LinkId link, bool injected) {
  if (!pending_.active || pending_.injected != injected || pending_.node != sim_.link_to(link)) return;
  pending_.active = false;
  const CounterValues before(pending_.before);
  const CounterValues after(watched_.at(pending_.node)->counters());
  if (!injected) {
    for (size_t i = 0; i < after.values.size(); ++i) {
      const std::string_view name = after.values[i].first;
      if (after.values[i].second == before.values[i].second) continue;
      if (name == "rx_drop_replay") {
        ++report_.genuine_replay_drops;
        for (const auto& [epoch, number] : flow(pending_.flow.first, pending_.flow.second).forged_numbers) {
          if (epoch == pending_.dst_epoch && number == pending_.number) {
            ++report_.displaced;
            break;
          }
        }
      }
      if (name == "rx_acks" && pending_.genuine_ack) {
        // Accepted: the requester has seen these completions.
        Flow& f = flow(pending_.flow.first, pending_.flow.second);
        for (uint8_t s = 0; s < pending_.ack.ack.stream_count; ++s) {
          const wire::StreamAck& e = pending_.ack.ack.streams[s];
          auto [it, fresh] = f.completed.emplace(e.qpn, e.completed_msn);
          if (!fresh && static_cast<int32_t>(e.completed_msn - it->second) > 0) it->second = e.completed_msn;
        }
      }
    }
    return;
  }
  bool drop = false, duplicate = false, ignored = false;
  for (size_t i = 0; i < after.values.size(); ++i) {
    if (after.values[i].second == before.values[i].second) continue;
    const std::string_view name = after.values[i].first;
    const bool is_drop = starts_with(name, "rx_drop_");
    const bool is_duplicate = starts_with(name, "rx_duplicate_");
    const bool is_ignored = starts_with(name, "rx_ignored_");
    if (!is_drop && !is_duplicate && !is_ignored) continue;
    drop |= is_drop;
    duplicate |= is_duplicate;
    ignored |= is_ignored;
    ++report_.counters[{pending_.attack, std::string(name)}];
  }
  if (drop) ++report_.dropped;
  else if (duplicate) ++report_.duplicates;
  else if (ignored) ++report_.ignored;
  else ++report_.unaccounted;
}

void Attacker::observe(Flow& f, const Datagram& d, LinkId link, Pending& pending) {
  f.seen = true;
  f.addressing.src = d.src;
  f.addressing.dst = d.dst;
  f.addressing.src_port = d.src_port;
  f.addressing.dst_port = d.dst_port;
  f.addressing.egress = d.egress;
  f.link = link;
  wire::CommonHeader common;
  if (wire::decode_common(d.payload, common) != wire::DecodeStatus::Ok) return;
  const size_t trailer = wire::trailer_bytes(common.security);
  if (d.payload.size() < wire::kCommonHeaderBytes + trailer) return;
  f.common = common;
  f.trailer.assign(d.payload.end() - static_cast<ptrdiff_t>(trailer), d.payload.end());
  auto [it, fresh] = f.highest_number.emplace(common.dst_epoch, common.packet_number);
  if (!fresh && static_cast<int32_t>(common.packet_number - it->second) > 0) it->second = common.packet_number;
  pending.dst_epoch = common.dst_epoch;
  pending.number = common.packet_number;
  std::vector<uint8_t> plain;
  if (common.security == wire::Security::Encrypt) {
    plain = plaintext(common, d.payload);
    if (plain.empty()) return;  // the body is hidden
  }
  const std::vector<uint8_t>& clear = plain.empty() ? d.payload : plain;
  wire::Packet p;
  if (wire::decode(std::span<const uint8_t>(clear).first(clear.size() - trailer), p) != wire::DecodeStatus::Ok) return;
  if (p.common.type == wire::PacketType::Data) f.last_data = clear;
  if (p.common.type == wire::PacketType::Data && wire::is_request(p.data.opcode)) {
    Request r;
    r.header = p.data;
    r.read = p.read;
    r.path_id = p.common.path_id;
    f.requests.push_back(r);
    if (f.requests.size() > kRequestsKept) f.requests.pop_front();
  } else if (p.common.type == wire::PacketType::Ack) {
    p.payload = {};
    f.ack = p;
    f.have_ack = true;
    pending.genuine_ack = true;
    pending.ack = p;
  }
}

std::vector<uint8_t> Attacker::plaintext(const wire::CommonHeader& common, const std::vector<uint8_t>& datagram) {
  if (!config_.reads_plaintext_with || datagram.size() < wire::kCommonHeaderBytes + wire::kAuthTagBytes) return {};
  std::vector<uint8_t> plain(datagram.size());
  for (const uint8_t role : {0, 1}) {
    std::unique_ptr<transport::TrafficKey>& key = traffic_keys_[{role, common.src_epoch, common.dst_epoch}];
    if (!key)
      key = std::make_unique<transport::TrafficKey>(*config_.reads_plaintext_with, role, common.src_epoch,
                                                    common.dst_epoch);
    // Packet numbers stay far below 2^32 in a simulated run.
    if (key->valid() && key->open(common.security, datagram, common.packet_number,
                                  std::span<uint8_t>(plain).first(datagram.size() - wire::kAuthTagBytes)))
      return plain;
  }
  return {};
}

void Attacker::attack(Time now, const Datagram& d, LinkId link) {
  const size_t n = config_.attacks.size();
  const size_t first = static_cast<size_t>(draw() % n);
  for (size_t i = 0; i < n; ++i) {
    const Attack a = config_.attacks[(first + i) % n];
    Datagram out;
    LinkId out_link = link;
    if (!build(a, d, out, out_link)) {
      ++report_.forgeries_skipped;
      continue;
    }
    // Right after the datagram that prompted it (or later).
    const Time t = now + (a == Attack::ReplayLater ? 1 + draw_upto(config_.max_replay_delay_ns) : 0);
    in_flight_.emplace(std::make_tuple(out_link, t, payload_hash(out.payload)), a);
    ++report_.injected[static_cast<size_t>(a)];
    sim_.inject(out_link, t, std::move(out));
    return;
  }
}

uint32_t Attacker::next_number(Flow& f, uint32_t dst_epoch) {
  uint32_t& highest = f.highest_number[dst_epoch];
  return ++highest;
}

bool Attacker::forge_into(Flow& f, std::vector<uint8_t> body, Datagram& out) {
  if (body.size() < wire::kCommonHeaderBytes) return false;
  const wire::CommonHeader& c = f.common;
  const uint32_t number = next_number(f, c.dst_epoch);
  f.forged_numbers.emplace_back(c.dst_epoch, number);
  if (f.forged_numbers.size() > kForgedNumbersKept) f.forged_numbers.pop_front();
  if (c.security == wire::Security::Integrity) {
    wire::stamp_common(body, c.security, c.src_epoch, c.dst_epoch, number);
    out.payload = forge::frame_with_crc(std::move(body));
  } else if (forgery_count_++ % 2 == 0) {
    // The receiver's mode, a CRC where the tag starts and the rest of a
    // genuine tag: the tag does not check.
    wire::stamp_common(body, c.security, c.src_epoch, c.dst_epoch, number);
    const std::span<const uint8_t> rest = std::span<const uint8_t>(f.trailer).subspan(wire::kIntegrityTrailerBytes);
    out.payload = forge::frame_with_crc(std::move(body), rest);
  } else {
    // An integrity-mode datagram with a correct CRC.
    wire::stamp_common(body, wire::Security::Integrity, c.src_epoch, c.dst_epoch, number);
    out.payload = forge::frame_with_crc(std::move(body));
  }
  out.src = f.addressing.src;
  out.dst = f.addressing.dst;
  out.src_port = f.addressing.src_port;
  out.dst_port = f.addressing.dst_port;
  out.egress = f.addressing.egress;
  return true;
}

const Attacker::Request* Attacker::pick_request(const Flow& requests, const Flow& acks, bool completed_only,
                                                bool no_response) {
  for (auto it = requests.requests.rbegin(); it != requests.requests.rend(); ++it) {
    const wire::DataHeader& h = it->header;
    if (no_response && wire::needs_response(h.opcode)) continue;
    if (completed_only) {
      auto c = acks.completed.find(h.src_qpn);
      if (c == acks.completed.end() || static_cast<int32_t>(h.msn - c->second) > 0) continue;
    }
    return &*it;
  }
  return nullptr;
}

bool Attacker::build(Attack a, const Datagram& d, Datagram& out, LinkId& out_link) {
  out.src = d.src;
  out.dst = d.dst;
  out.src_port = d.src_port;
  out.dst_port = d.dst_port;
  out.egress = d.egress;
  std::vector<uint8_t>& bytes = out.payload;
  const size_t size = d.payload.size();
  switch (a) {
    case Attack::ReplayNow:
    case Attack::ReplayLater: bytes = d.payload; return true;
    case Attack::BitFlip: {
      if (size == 0) return false;
      bytes = d.payload;
      const uint64_t flips = 1 + draw_upto(2);
      for (uint64_t i = 0; i < flips; ++i) {
        const uint64_t bit = draw() % (size * 8);
        bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      }
      if (bytes == d.payload) bytes[0] ^= 0x80;  // two flips of one bit cancel
      return true;
    }
    case Attack::Truncate:
      if (size == 0) return false;
      bytes.assign(d.payload.begin(), d.payload.begin() + static_cast<ptrdiff_t>(draw() % size));
      return true;
    case Attack::Extend: {
      bytes = d.payload;
      const uint64_t extra = 1 + draw_upto(63);
      for (uint64_t i = 0; i < extra; ++i) bytes.push_back(static_cast<uint8_t>(draw()));
      return true;
    }
    case Attack::Overwrite4:
    case Attack::Overwrite8: {
      const size_t width = a == Attack::Overwrite4 ? 4 : 8;
      if (size < width) return false;
      bytes = d.payload;
      const size_t offset = static_cast<size_t>(draw_upto((size - width) / 4)) * 4;
      const uint64_t value = draw();
      std::memcpy(bytes.data() + offset, &value, width);
      if (bytes == d.payload) bytes[offset] ^= 1;
      return true;
    }
    case Attack::Garbage: {
      const size_t length = 1 + static_cast<size_t>(draw_upto(299));
      bytes.resize(length);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(draw());
      // Half of it behind a genuine common header, to reach the trailer check.
      if ((draw() & 1) && size >= wire::kCommonHeaderBytes && length > wire::kCommonHeaderBytes)
        std::memcpy(bytes.data(), d.payload.data(), wire::kCommonHeaderBytes);
      return true;
    }
    default: break;
  }

  // Forgeries with a correct CRC, in d's direction or the other one.
  const NodeId from = d.src, to = d.dst;
  for (const auto& [x, y] : {std::pair{from, to}, std::pair{to, from}}) {
    Flow& f = flow(x, y);
    if (f.seen && forge(a, f, flow(y, x), out)) {
      out_link = f.link;
      return true;
    }
  }
  return false;
}

bool Attacker::forge(Attack a, Flow& f, Flow& reverse, Datagram& out) {
  if (f.common.security == wire::Security::Encrypt && !config_.reads_plaintext_with) return false;
  wire::Packet p;
  p.common = f.common;
  switch (a) {
    case Attack::AckStreamAhead:
    case Attack::AckBlockBeyond:
    case Attack::AckRateHint: {
      if (!f.have_ack) return false;
      p.common.type = wire::PacketType::Ack;
      p.ack = f.ack.ack;
      if (a == Attack::AckStreamAhead) {
        if (p.ack.stream_count == 0) return false;
        p.ack.streams[0].completed_msn += kFarAhead;
      } else if (a == Attack::AckBlockBeyond) {
        if (p.ack.path_count == 0) return false;
        p.ack.paths[0].highest_seq += kFarAhead;
      } else {
        p.ack.rate_hint_mbps = 1;
      }
      break;
    }
    case Attack::NakAttemptZero:
    case Attack::NakObservedAttempt:
    case Attack::RnrHugeDelay: {
      // To the requester (d's receiver), about one of its requests.
      const bool zero = a == Attack::NakAttemptZero;
      const Request* r = config_.consistent_claims || zero ? pick_request(reverse, f, false, false)
                                                           : pick_request(reverse, f, true, true);
      if (!r) return false;
      p.common.type = wire::PacketType::Nak;
      p.nak.kind = a == Attack::RnrHugeDelay ? wire::NakKind::ReceiverNotReady
                   : (draw() & 1)            ? wire::NakKind::RemoteAccess
                                             : wire::NakKind::InvalidRequest;
      p.nak.qpn = r->header.src_qpn;
      p.nak.msn = r->header.msn + (zero && !config_.consistent_claims ? kFarAhead : 0);
      p.nak.attempt = zero ? 0 : r->header.attempt;
      p.nak.data_path_id = r->path_id;
      if (a == Attack::RnrHugeDelay) p.nak.rnr_delay_ns = UINT32_MAX;
      break;
    }
    case Attack::DataPathJump: {
      const size_t trailer = wire::trailer_bytes(f.common.security);
      const std::vector<uint8_t>& data = f.last_data;
      if (data.size() < wire::kCommonHeaderBytes + trailer) return false;
      if (wire::decode(std::span<const uint8_t>(data).first(data.size() - trailer), p) != wire::DecodeStatus::Ok ||
          p.common.type != wire::PacketType::Data)
        return false;
      p.common.src_epoch = f.common.src_epoch;
      p.common.dst_epoch = f.common.dst_epoch;
      p.data.path_seq += kFarAhead;
      break;
    }
    case Attack::ReadHuge: {
      // To the responder (d's receiver), as one of the requests it was sent.
      const Request* r =
          config_.consistent_claims ? pick_request(f, reverse, false, false) : pick_request(f, reverse, true, false);
      if (!r) return false;
      p.common.type = wire::PacketType::Data;
      p.common.path_id = r->path_id;
      p.data = r->header;
      p.data.opcode = wire::Opcode::ReadRequest;
      p.data.flags = 0;
      p.data.recv_index = 0;
      p.data.imm = 0;
      p.data.offset = 0;
      p.data.msg_length = kEnormousLength;
      p.read = r->read;
      if (p.read.sink_key == 0) p.read = {r->header.remote_addr, r->header.rkey};
      break;
    }
    default: return false;
  }
  return forge_into(f, forge::encode(p), out);
}

}  // namespace metaroce::sim
