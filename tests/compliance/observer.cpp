// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "observer.h"

#include <algorithm>
#include <cstdio>

#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

// FNV-1a: equal chunks give equal digests; a resend that changed its bytes
// is caught with overwhelming probability.
uint64_t digest(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

const char* opcode_name(uint8_t op) {
  static constexpr const char* kNames[] = {"SEND",      "SEND_IMM",  "WRITE",        "WRITE_IMM",  "READ_REQ",
                                           "READ_RESP", "FETCH_ADD", "COMPARE_SWAP", "ATOMIC_RESP"};
  return op < std::size(kNames) ? kNames[op] : "?";
}

bool consumes_receive(uint8_t op) { return op == raw::kOpSend || op == raw::kOpSendImm || op == raw::kOpWriteImm; }
bool has_imm(uint8_t op) { return op == raw::kOpSendImm || op == raw::kOpWriteImm; }
bool addresses_memory(uint8_t op) { return op != raw::kOpSend && op != raw::kOpSendImm && op != raw::kOpAtomicResp; }
bool is_request(uint8_t op) { return op != raw::kOpReadResp && op != raw::kOpAtomicResp; }

}  // namespace

void Observer::file(const char* case_id, std::string what) {
  Filed& f = filed_[case_id];
  ++f.count;
  if (f.kept.size() < kKeptFindings) f.kept.push_back(std::move(what));
}

std::vector<std::string> Observer::findings(const std::string& case_id) const {
  const auto it = filed_.find(case_id);
  return it == filed_.end() ? std::vector<std::string>{} : it->second.kept;
}

size_t Observer::finding_count(const std::string& case_id) const {
  const auto it = filed_.find(case_id);
  return it == filed_.end() ? 0 : it->second.count;
}

void Observer::check_reserved(std::span<const uint8_t> body, size_t at, size_t bytes, const char* what) {
  ++seen_.reserved_fields;
  for (size_t i = 0; i < bytes; ++i) {
    if (body[at + i] != 0) {
      file("C-1.1a", std::string(what) + " is not zero");
      return;
    }
  }
}

void Observer::check_slot(uint8_t path_id, uint16_t source_port, const char* what) {
  const auto slot = port_of_slot_.find(path_id);
  if (slot == port_of_slot_.end()) {
    port_of_slot_[path_id] = source_port;
  } else if (slot->second != source_port) {
    file("C-1.2d", std::string(what) + " with path_id " + std::to_string(path_id) + " left from port " +
                       std::to_string(source_port) + ", earlier ones from " + std::to_string(slot->second));
  }
  const auto port = slot_of_port_.find(source_port);
  if (port == slot_of_port_.end()) {
    slot_of_port_[source_port] = path_id;
  } else if (port->second != path_id) {
    file("C-1.2d", std::string(what) + " from port " + std::to_string(source_port) + " named path_id " +
                       std::to_string(path_id) + ", earlier ones " + std::to_string(port->second));
  }
}

void Observer::inspect(const Datagram& d) {
  ++seen_.datagrams;
  const std::span<const uint8_t> bytes(d.bytes);
  if (d.ecn >= 0) {
    ++seen_.ecn_reported;
    if (d.ecn != 2) file("C-1.2e", "a datagram arrived with ECN field " + std::to_string(d.ecn) + ", not ECT(0) = 2");
  }
  if (bytes.size() > expect_.max_udp_payload)
    file("C-1.2c", std::to_string(bytes.size()) + "-byte datagram exceeds the path MTU's " +
                       std::to_string(expect_.max_udp_payload) + "-byte UDP payload");
  if (bytes.size() < raw::kCommonBytes + raw::kCrcBytes) {
    file("C-2a", std::to_string(bytes.size()) + "-byte datagram cannot hold a common header and a trailer");
    return;
  }
  if (!raw::crc_matches(bytes)) file("C-9.1a", "trailer is not the big-endian CRC32C of the datagram before it");
  const std::span<const uint8_t> body = bytes.first(bytes.size() - raw::kCrcBytes);
  check_common(d, body);
  switch (body[raw::kType]) {
    case raw::kTypeData: check_data(d, body); break;
    case raw::kTypeAck: check_ack(body); break;
    case raw::kTypeNak: check_nak(body); break;
    case raw::kTypeProbe:
      check_slot(body[raw::kPathId], d.source_port, "a Probe");
      check_probe(body);
      break;
    case raw::kTypeProbeReply: check_probe(body); break;
    default: break;
  }
}

void Observer::check_common(const Datagram&, std::span<const uint8_t> body) {
  const raw::Common c = *raw::read_common(body);
  const bool known_type = c.type >= raw::kTypeData && c.type <= raw::kTypeUdSend;
  if (known_type) ++seen_.types[c.type];
  if (c.version != raw::kWireVersion) file("C-2a", "version byte " + std::to_string(c.version));
  if (!known_type) file("C-2a", "type byte " + std::to_string(c.type));
  if (c.security != expect_.security)
    file("C-2a",
         "security byte " + std::to_string(c.security) + " in a target of mode " + std::to_string(expect_.security));
  if (c.path_id >= raw::kPathLimit) file("C-2a", "path_id " + std::to_string(c.path_id) + " is not below 64");
  if (c.home_port != expect_.target_home_port)
    file("C-2a", "home_port " + std::to_string(c.home_port) + " is not the target's " +
                     std::to_string(expect_.target_home_port));
  if (c.type == raw::kTypeUdSend) {
    // Spec 6a: belongs to no connection, so no epochs or packet numbers of one.
    if (c.path_id != 0 || c.dst_epoch != 0 || c.packet_number != 0)
      file("C-2a", "a UD send with path_id, dst_epoch or packet_number not 0");
    return;
  }
  if (c.src_epoch == 0) file("C-2a", "src_epoch 0");
  if (target_epoch_ == 0) target_epoch_ = c.src_epoch;
  if (c.src_epoch != target_epoch_)
    file("C-2a", "src_epoch changed from " + hex32(target_epoch_) + " to " + hex32(c.src_epoch));
  if (c.dst_epoch != 0 && c.dst_epoch != expect_.suite_epoch) {
    file("C-2a", "dst_epoch " + hex32(c.dst_epoch) + " is neither 0 nor the suite's epoch");
    return;
  }
  auto [it, first] = numbers_.try_emplace(c.dst_epoch);
  Numbers& n = it->second;
  if (first || c.packet_number < n.lowest) n.lowest = c.packet_number;
  if (!n.seen.insert(c.packet_number).second) {
    file("C-2a",
         "packet_number " + std::to_string(c.packet_number) + " came twice under dst_epoch " + hex32(c.dst_epoch));
    return;
  }
  n.order.push_back(c.packet_number);
  if (n.order.size() > kRemembered) {
    n.seen.erase(n.order.front());
    n.order.pop_front();
  }
}

std::map<uint32_t, uint32_t> Observer::lowest_packet_numbers() const {
  std::map<uint32_t, uint32_t> out;
  for (const auto& [epoch, n] : numbers_) out[epoch] = n.lowest;
  return out;
}

void Observer::check_data(const Datagram& d, std::span<const uint8_t> body) {
  if (body.size() < raw::kDataBytes) {
    file("C-2a", "data packet of " + std::to_string(body.size()) + " bytes is shorter than its 68-byte header");
    return;
  }
  const uint8_t op = body[raw::kOpcode];
  check_slot(body[raw::kPathId], d.source_port, "a data packet");
  if (op >= raw::kOpcodeLimit) {
    file("C-2a", "data opcode " + std::to_string(op));
    return;
  }
  ++seen_.opcodes[op];
  const std::string name = opcode_name(op);
  const uint8_t flags = body[raw::kFlags];
  if (flags & ~(raw::kFlagAckRequest | raw::kFlagRetransmit))
    file("C-3.1a", name + " with flags " + hex32(flags) + ": bits 2-7 set");
  if (flags & raw::kFlagRetransmit) ++seen_.retransmits;
  const size_t header = raw::data_header_bytes(op);
  if (body.size() < header) {
    file("C-2a", name + " of " + std::to_string(body.size()) + " bytes is shorter than its " + std::to_string(header) +
                     "-byte headers");
    return;
  }
  const uint32_t recv_index = raw::be32(body, raw::kRecvIndex);
  const uint32_t msg_length = raw::be32(body, raw::kMsgLength);
  const uint32_t offset = raw::be32(body, raw::kOffset);
  const uint64_t remote_addr = raw::be64(body, raw::kRemoteAddr);
  const uint32_t rkey = raw::be32(body, raw::kRkey);
  const uint32_t imm = raw::be32(body, raw::kImm);

  // Section 3.3: the fields an opcode does not use are zero.
  if (!consumes_receive(op) && recv_index != 0) file("C-1.1c", name + " with recv_index " + std::to_string(recv_index));
  if (!addresses_memory(op) && (remote_addr != 0 || rkey != 0)) file("C-1.1c", name + " with remote_addr/rkey set");
  if (!has_imm(op) && imm != 0) file("C-1.1c", name + " with imm " + hex32(imm));
  if (!raw::carries_payload(op) && offset != 0) file("C-1.1c", name + " with offset " + std::to_string(offset));
  if (op == raw::kOpFetchAdd && raw::be64(body, raw::kExtSecond) != 0) file("C-1.1c", "FETCH_ADD with swap set");
  if (op == raw::kOpReadReq) check_reserved(body, raw::kReadReqReserved, 4, "READ_REQ reserved");

  std::span<const uint8_t> payload;
  if (raw::carries_payload(op)) {
    payload = body.subspan(header);
    seen_.largest = std::max(seen_.largest, payload.size());
    if (uint64_t{offset} + payload.size() > msg_length)
      file("C-3.4a", name + " at offset " + std::to_string(offset) + " carries " + std::to_string(payload.size()) +
                         " bytes of a " + std::to_string(msg_length) + "-byte message");
    if (payload.empty() && (msg_length != 0 || offset != 0))
      file("C-3.4a", name + " with no payload in a " + std::to_string(msg_length) + "-byte message");
  } else if (body.size() != header) {
    file("C-2a", name + " has " + std::to_string(body.size() - header) + " bytes after its extension");
  }

  // Section 3.3: the packets of one message agree; section 3.5: a resent
  // chunk carries what the first copy carried.
  const MessageKey key{is_request(op), raw::be32(body, raw::kDstQpn), raw::be32(body, raw::kMsn)};
  auto it = messages_.find(key);
  if (it == messages_.end()) {
    MessageFields fields{op, raw::be32(body, raw::kSrcQpn), msg_length, recv_index, rkey, imm, remote_addr, {}};
    it = messages_.emplace(key, std::move(fields)).first;
    message_order_.push_back(key);
    if (message_order_.size() > kRemembered) {
      messages_.erase(message_order_.front());
      message_order_.pop_front();
    }
  } else {
    const MessageFields& f = it->second;
    if (f.opcode != op || f.src_qpn != raw::be32(body, raw::kSrcQpn) || f.msg_length != msg_length ||
        f.recv_index != recv_index || f.remote_addr != remote_addr || f.rkey != rkey || f.imm != imm)
      file("C-3.3b", name + " msn " + std::to_string(std::get<2>(key)) + " to QP " + hex32(std::get<1>(key)) +
                         " differs from an earlier packet of its message in opcode, src_qpn, msg_length, "
                         "recv_index, remote_addr, rkey or imm");
  }
  auto& chunks = it->second.chunks;
  const auto chunk = chunks.find(offset);
  const std::pair<size_t, uint64_t> copy{payload.size(), digest(payload)};
  if (chunk == chunks.end()) {
    if (chunks.size() == 1) ++seen_.multi_packet_messages;
    if (chunks.size() < kChunksPerMessage) chunks.emplace(offset, copy);
  } else {
    ++seen_.repeated_chunks;
    if (chunk->second != copy)
      file("C-3.5a", name + " msn " + std::to_string(std::get<2>(key)) + " offset " + std::to_string(offset) +
                         " was sent again with other bytes (" + std::to_string(payload.size()) + " bytes, first " +
                         std::to_string(chunk->second.first) + ")");
  }
}

void Observer::check_ack(std::span<const uint8_t> body) {
  if (body.size() < raw::kAckFixedBytes) {
    file("C-2a", "ACK of " + std::to_string(body.size()) + " bytes");
    return;
  }
  check_reserved(body, raw::kAckReserved, 2, "ACK reserved");
  check_reserved(body, raw::kAckReserved2, 4, "ACK reserved2");
  const size_t blocks = body[raw::kAckPathBlocks];
  const size_t streams = body[raw::kAckStreamEntries];
  if (blocks > 16 || streams > 32 ||
      body.size() != raw::kAckFixedBytes + blocks * raw::kAckBlockBytes + streams * raw::kAckStreamBytes) {
    file("C-2a", "ACK of " + std::to_string(body.size()) + " bytes with " + std::to_string(blocks) + " blocks and " +
                     std::to_string(streams) + " stream entries");
    return;
  }
  for (size_t i = 0; i < blocks; ++i) {
    const uint16_t path = raw::be16(body, raw::kAckFixedBytes + i * raw::kAckBlockBytes + raw::kBlockPathId);
    if (path >= raw::kPathLimit) file("C-4.2a", "ACK path block for path_id " + std::to_string(path));
  }
}

void Observer::check_nak(std::span<const uint8_t> body) {
  if (body.size() != raw::kNakBytes) {
    file("C-2a", "NAK of " + std::to_string(body.size()) + " bytes, not 40");
    return;
  }
  const uint8_t kind = body[raw::kNakKind];
  if (kind >= 1 && kind <= 5) ++seen_.nak_kinds[kind];
  else file("C-2a", "NAK kind " + std::to_string(kind));
  if (body[raw::kNakDataPathId] >= raw::kPathLimit)
    file("C-5a", "NAK data_path_id " + std::to_string(body[raw::kNakDataPathId]));
  if (kind != raw::kNakSequence && raw::be32(body, raw::kNakExpectedSeq) != 0)
    file("C-1.1c", "NAK kind " + std::to_string(kind) + " with expected_seq set");
  if (kind != raw::kNakReceiverNotReady && raw::be32(body, raw::kNakRnrDelay) != 0)
    file("C-1.1c", "NAK kind " + std::to_string(kind) + " with rnr_delay_ns set");
}

void Observer::check_probe(std::span<const uint8_t> body) {
  if (body.size() != raw::kProbeBytes) {
    file("C-2a", "Probe/ProbeReply of " + std::to_string(body.size()) + " bytes, not 36");
    return;
  }
  check_reserved(body, raw::kProbeReserved, 4, "Probe reserved");
}

}  // namespace metaroce::compliance
