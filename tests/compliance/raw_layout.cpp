// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "raw_layout.h"

namespace metaroce::compliance::raw {

size_t data_header_bytes(uint8_t opcode) {
  switch (opcode) {
    case kOpReadReq:
    case kOpFetchAdd:
    case kOpCompareSwap: return 84;
    case kOpAtomicResp: return 76;
    default: return kDataBytes;
  }
}

bool carries_payload(uint8_t opcode) {
  return opcode == kOpSend || opcode == kOpSendImm || opcode == kOpWrite || opcode == kOpWriteImm ||
         opcode == kOpReadResp;
}

uint16_t be16(std::span<const uint8_t> b, size_t at) { return static_cast<uint16_t>(b[at] << 8 | b[at + 1]); }

uint32_t be32(std::span<const uint8_t> b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | uint32_t{b[at + 3]};
}

uint64_t be64(std::span<const uint8_t> b, size_t at) { return uint64_t{be32(b, at)} << 32 | be32(b, at + 4); }

void put16(std::span<uint8_t> b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

void put32(std::span<uint8_t> b, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

void put64(std::span<uint8_t> b, size_t at, uint64_t v) {
  put32(b, at, static_cast<uint32_t>(v >> 32));
  put32(b, at + 4, static_cast<uint32_t>(v));
}

uint32_t crc32c(std::span<const uint8_t> bytes) {
  uint32_t crc = 0xffffffffu;
  for (const uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void append_crc(std::vector<uint8_t>& datagram) {
  const uint32_t crc = crc32c(datagram);
  const size_t at = datagram.size();
  datagram.resize(at + kCrcBytes);
  put32(datagram, at, crc);
}

bool crc_matches(std::span<const uint8_t> datagram) {
  if (datagram.size() < kCrcBytes) return false;
  const size_t body = datagram.size() - kCrcBytes;
  return crc32c(datagram.first(body)) == be32(datagram, body);
}

std::optional<Common> read_common(std::span<const uint8_t> d) {
  if (d.size() < kCommonBytes) return std::nullopt;
  Common c;
  c.version = d[kVersion];
  c.type = d[kType];
  c.security = d[kSecurity];
  c.path_id = d[kPathId];
  c.home_port = be16(d, kHomePort);
  c.heard_paths = be16(d, kHeardPaths);
  c.src_epoch = be32(d, kSrcEpoch);
  c.dst_epoch = be32(d, kDstEpoch);
  c.packet_number = be32(d, kPacketNumber);
  return c;
}

std::vector<uint8_t> common_header(uint8_t type, uint8_t path_id, uint16_t home_port, uint16_t heard_paths,
                                   uint32_t src_epoch, uint32_t dst_epoch, uint32_t packet_number) {
  std::vector<uint8_t> h(kCommonBytes, 0);
  h[kVersion] = kWireVersion;
  h[kType] = type;
  h[kSecurity] = 0;
  h[kPathId] = path_id;
  put16(h, kHomePort, home_port);
  put16(h, kHeardPaths, heard_paths);
  put32(h, kSrcEpoch, src_epoch);
  put32(h, kDstEpoch, dst_epoch);
  put32(h, kPacketNumber, packet_number);
  return h;
}

}  // namespace metaroce::compliance::raw
