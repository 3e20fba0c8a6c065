// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The v0.2 byte layout written down a second time, from docs/spec.md alone:
// field offsets, big-endian accessors and a bitwise CRC32C. The compliance
// suite checks what a target sends, and builds its layout-defining packets,
// with these rather than with include/metaroce/wire.h and the engine's
// CRC, so that a layout or trailer bug shared by our encoder and decoder
// cannot pass unnoticed. Nothing here includes wire.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace metaroce::compliance::raw {

// Common header (spec section 2).
inline constexpr size_t kVersion = 0;
inline constexpr size_t kType = 1;
inline constexpr size_t kSecurity = 2;
inline constexpr size_t kPathId = 3;
inline constexpr size_t kHomePort = 4;
inline constexpr size_t kHeardPaths = 6;
inline constexpr size_t kSrcEpoch = 8;
inline constexpr size_t kDstEpoch = 12;
inline constexpr size_t kPacketNumber = 16;
inline constexpr size_t kCommonBytes = 20;

inline constexpr uint8_t kWireVersion = 2;
inline constexpr uint8_t kTypeData = 1;
inline constexpr uint8_t kTypeAck = 2;
inline constexpr uint8_t kTypeNak = 3;
inline constexpr uint8_t kTypeProbe = 4;
inline constexpr uint8_t kTypeProbeReply = 5;
inline constexpr uint8_t kTypeUdSend = 6;
inline constexpr uint8_t kPathLimit = 64;

// Data header (section 3.1) and extensions (3.2).
inline constexpr size_t kPathSeq = 20;
inline constexpr size_t kOpcode = 24;
inline constexpr size_t kFlags = 25;
inline constexpr size_t kAttempt = 26;
inline constexpr size_t kDstQpn = 28;
inline constexpr size_t kSrcQpn = 32;
inline constexpr size_t kMsn = 36;
inline constexpr size_t kRecvIndex = 40;
inline constexpr size_t kMsgLength = 44;
inline constexpr size_t kOffset = 48;
inline constexpr size_t kRemoteAddr = 52;
inline constexpr size_t kRkey = 60;
inline constexpr size_t kImm = 64;
inline constexpr size_t kDataBytes = 68;
inline constexpr size_t kExtFirst = 68;   // sink_addr, compare_add or original
inline constexpr size_t kExtSecond = 76;  // sink_key (4 bytes) or swap (8 bytes)
inline constexpr size_t kReadReqReserved = 80;

inline constexpr uint8_t kOpSend = 0;
inline constexpr uint8_t kOpSendImm = 1;
inline constexpr uint8_t kOpWrite = 2;
inline constexpr uint8_t kOpWriteImm = 3;
inline constexpr uint8_t kOpReadReq = 4;
inline constexpr uint8_t kOpReadResp = 5;
inline constexpr uint8_t kOpFetchAdd = 6;
inline constexpr uint8_t kOpCompareSwap = 7;
inline constexpr uint8_t kOpAtomicResp = 8;
inline constexpr uint8_t kOpcodeLimit = 9;
inline constexpr uint8_t kFlagAckRequest = 0x01;
inline constexpr uint8_t kFlagRetransmit = 0x02;

// Bytes before the payload (or the end) for each opcode (section 3.2).
size_t data_header_bytes(uint8_t opcode);
bool carries_payload(uint8_t opcode);

// ACK (section 4).
inline constexpr size_t kAckPathBlocks = 20;
inline constexpr size_t kAckStreamEntries = 21;
inline constexpr size_t kAckReserved = 22;  // 2 bytes
inline constexpr size_t kAckRateHint = 24;
inline constexpr size_t kAckDelay = 28;
inline constexpr size_t kAckReserved2 = 32;  // 4 bytes
inline constexpr size_t kAckFixedBytes = 36;
inline constexpr size_t kAckBlockBytes = 44;
inline constexpr size_t kAckStreamBytes = 8;
// Within a path block.
inline constexpr size_t kBlockPathId = 0;
inline constexpr size_t kBlockHolding = 2;
inline constexpr size_t kBlockCeCount = 4;
inline constexpr size_t kBlockHighestSeq = 8;
inline constexpr size_t kBlockBitmap = 12;

// NAK (section 5).
inline constexpr size_t kNakKind = 20;
inline constexpr size_t kNakDataPathId = 21;
inline constexpr size_t kNakAttempt = 22;
inline constexpr size_t kNakQpn = 24;
inline constexpr size_t kNakMsn = 28;
inline constexpr size_t kNakExpectedSeq = 32;
inline constexpr size_t kNakRnrDelay = 36;
inline constexpr size_t kNakBytes = 40;
inline constexpr uint8_t kNakReceiverNotReady = 1;
inline constexpr uint8_t kNakRemoteAccess = 2;
inline constexpr uint8_t kNakInvalidRequest = 3;
inline constexpr uint8_t kNakSequence = 4;
inline constexpr uint8_t kNakRemoteOperational = 5;

// Probe and ProbeReply (section 6).
inline constexpr size_t kProbeSeq = 20;
inline constexpr size_t kProbeReserved = 24;
inline constexpr size_t kProbeTimestamp = 28;
inline constexpr size_t kProbeBytes = 36;

// Integrity trailer (section 9.1).
inline constexpr size_t kCrcBytes = 4;

// Big-endian loads and stores; the caller has checked the bounds.
uint16_t be16(std::span<const uint8_t> bytes, size_t at);
uint32_t be32(std::span<const uint8_t> bytes, size_t at);
uint64_t be64(std::span<const uint8_t> bytes, size_t at);
void put16(std::span<uint8_t> bytes, size_t at, uint16_t value);
void put32(std::span<uint8_t> bytes, size_t at, uint32_t value);
void put64(std::span<uint8_t> bytes, size_t at, uint64_t value);

// CRC32C (Castagnoli, reflected 0x82F63B78, init and final XOR 0xFFFFFFFF),
// one bit at a time: slow, and for that reason obviously the definition.
uint32_t crc32c(std::span<const uint8_t> bytes);
// Appends the integrity trailer (CRC32C of everything before it, big-endian).
void append_crc(std::vector<uint8_t>& datagram);
// True when the datagram ends in the CRC32C of the rest, big-endian.
bool crc_matches(std::span<const uint8_t> datagram);

// A datagram's common header, read field by field.
struct Common {
  uint8_t version = 0;
  uint8_t type = 0;
  uint8_t security = 0;
  uint8_t path_id = 0;
  uint16_t home_port = 0;
  uint16_t heard_paths = 0;
  uint32_t src_epoch = 0;
  uint32_t dst_epoch = 0;
  uint32_t packet_number = 0;
};
std::optional<Common> read_common(std::span<const uint8_t> datagram);

// A 20-byte common header in integrity mode, built field by field.
std::vector<uint8_t> common_header(uint8_t type, uint8_t path_id, uint16_t home_port, uint16_t heard_paths,
                                   uint32_t src_epoch, uint32_t dst_epoch, uint32_t packet_number);

}  // namespace metaroce::compliance::raw
