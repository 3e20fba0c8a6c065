// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Stand-alone driver for a libFuzzer target, used when the build has no
// libFuzzer (and as the 'fuzz' test suite in every build). It feeds the
// target's LLVMFuzzerTestOneInput with
//   (a) every file named on the command line (directories are walked, so a
//       libFuzzer corpus or crash directory can be replayed), then
//   (b) a deterministic built-in set: valid datagrams of every packet type and
//       opcode made with the wire encoders, every truncation of each, and a
//       fixed number of seeded random mutations of them.
// Each input is passed as an exact-size heap copy, so a sanitizer build
// catches reads past its end. The target aborts on a failed check; the driver
// itself returns nonzero only if an input file cannot be read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "metaroce/wire.h"

#include "replay_support.h"

namespace {

using namespace metaroce::wire;
using replay::Bytes;

constexpr int kMutations = 20000;
constexpr uint64_t kSeed = 0x4D657461526F4345ull;  // fixed: the run is reproducible

using replay::run_one;
using replay::run_path;
using replay::SplitMix;

Bytes data_packet(Opcode op, uint16_t path_id, uint32_t salt, size_t payload_len) {
  DataHeader h;
  h.opcode = op;
  h.path_seq = 0x01000000u + salt;
  h.flags = static_cast<uint8_t>(salt & kDataFlagsMask);
  h.attempt = static_cast<uint8_t>(salt);
  h.dst_qpn = 0x11 + salt;
  h.src_qpn = 0x22 + salt;
  h.msn = 1 + salt;
  h.recv_index = consumes_receive(op) ? salt : 0;
  h.remote_addr = 0x00007F0000001000ull + salt;
  h.rkey = 0x1234 + salt;
  h.imm = (op == Opcode::SendImm || op == Opcode::WriteImm) ? 0xCAFEBABE : 0;
  if (!carries_payload(op)) payload_len = 0;
  if (carries_payload(op)) {
    h.offset = salt % 2 == 0 ? 0 : 4096;
    h.msg_length = h.offset + static_cast<uint32_t>(payload_len) + (salt % 3) * 100;
  } else if (op == Opcode::ReadRequest) {
    h.msg_length = 65536 + salt;
  } else {
    h.msg_length = 8;
  }
  const ReadRequest read{0x00007F0000200000ull + salt, 0x5678 + salt};
  const AtomicRequest atomic{0x0102030405060708ull + salt, op == Opcode::CompareSwap ? 99u : 0u};
  const uint64_t original = 0xFFFFFFFF00000000ull + salt;
  Bytes out(data_header_bytes(op) + payload_len);
  const size_t hdr = encode_data(out, path_id, h, &read, &atomic, &original, payload_len);
  for (size_t i = 0; i < payload_len; ++i) out[hdr + i] = static_cast<uint8_t>(i + salt);
  return out;
}

std::vector<Bytes> valid_packets() {
  std::vector<Bytes> seeds;
  for (uint8_t op = 0; op < kOpcodeCount; ++op) {
    for (uint32_t salt : {0u, 1u, 2u}) {
      for (size_t payload : {size_t{0}, size_t{1}, size_t{64}}) {
        if (!carries_payload(static_cast<Opcode>(op)) && payload != 0) continue;
        Bytes b = data_packet(static_cast<Opcode>(op), static_cast<uint16_t>(salt * 21), salt, payload);
        // An empty payload is only valid for an empty message.
        if (carries_payload(static_cast<Opcode>(op)) && payload == 0) {
          DataHeader h;
          h.opcode = static_cast<Opcode>(op);
          encode_data(b, 0, h, nullptr, nullptr, nullptr, 0);
        }
        seeds.push_back(std::move(b));
      }
    }
  }

  SplitMix rng{kSeed};
  for (uint8_t paths : {uint8_t{0}, uint8_t{1}, uint8_t{3}, kMaxAckPathBlocks}) {
    for (uint8_t streams : {uint8_t{0}, uint8_t{1}, uint8_t{5}, kMaxAckStreams}) {
      Ack ack;
      ack.rate_hint_mbps = 25000;
      ack.ack_delay_ns = 2000;
      ack.path_count = paths;
      ack.stream_count = streams;
      for (size_t i = 0; i < paths; ++i) {
        ack.paths[i].path_id = static_cast<uint16_t>(i * 4);
        ack.paths[i].ce_count = static_cast<uint32_t>(rng.next());
        ack.paths[i].highest_seq = static_cast<uint32_t>(rng.next());
        for (auto& w : ack.paths[i].bits) w = rng.next();
      }
      for (size_t i = 0; i < streams; ++i) {
        ack.streams[i] = {static_cast<uint32_t>(rng.next()), static_cast<uint32_t>(rng.next())};
      }
      Bytes b(kMaxAckBytes);
      b.resize(encode_ack(b, 7, ack));
      seeds.push_back(std::move(b));
    }
  }

  for (uint8_t kind = 1; kind <= 4; ++kind) {
    Nak nak;
    nak.kind = static_cast<NakKind>(kind);
    nak.attempt = kind;
    nak.data_path_id = kind;
    nak.qpn = 0x100 + kind;
    nak.msn = 42;
    nak.expected_seq = kind == 4 ? 1000 : 0;
    nak.rnr_delay_ns = kind == 1 ? 10000 : 0;
    Bytes b(kCommonHeaderBytes + sizeof(NakWire));
    encode_nak(b, 2, nak);
    seeds.push_back(std::move(b));
  }
  for (PacketType t : {PacketType::Probe, PacketType::ProbeReply}) {
    Bytes b(kCommonHeaderBytes + sizeof(ProbeWire));
    encode_probe(b, 63, t, Probe{17, 0x0123456789ABCDEFull});
    seeds.push_back(std::move(b));
  }
  // UD datagrams to QP 0x1001 with Q_Key 0x11111111 (fuzz_ud's), with and
  // without immediate data, of several lengths.
  for (uint32_t salt = 0; salt < 4; ++salt) {
    UdHeader u;
    u.dst_qpn = salt < 3 ? 0x1001 : 0x1002;
    u.src_qpn = 0x2001 + salt;
    u.qkey = salt == 2 ? 0x22222222 : 0x11111111;
    u.has_imm = salt % 2 == 1;
    u.imm = 0xCAFEBABE;
    const size_t length = salt * 300;
    Bytes b(kUdHeaderBytes + length, static_cast<uint8_t>(0x40 + salt));
    encode_ud(b, {0, kHomePortBase}, u, length);
    seeds.push_back(std::move(b));
  }
  return seeds;
}

uint8_t interesting_byte(SplitMix& rng) {
  static constexpr uint8_t kValues[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x10,
                                        0x11, 0x20, 0x21, 0x3F, 0x40, 0x41, 0x7F, 0x80, 0xFE, 0xFF};
  if (rng.below(2) == 0) return kValues[rng.below(sizeof(kValues))];
  return static_cast<uint8_t>(rng.next());
}

void mutate(Bytes& b, SplitMix& rng) {
  const size_t steps = 1 + rng.below(4);
  for (size_t s = 0; s < steps; ++s) {
    switch (rng.below(5)) {
      case 0:  // flip one bit
        if (!b.empty()) b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // set one byte
        if (!b.empty()) b[rng.below(b.size())] = interesting_byte(rng);
        break;
      case 2:  // truncate
        b.resize(rng.below(b.size() + 1));
        break;
      case 3: {  // insert a run of bytes
        const size_t at = rng.below(b.size() + 1);
        const size_t n = 1 + rng.below(rng.below(2) == 0 ? 4 : 64);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), n, interesting_byte(rng));
        break;
      }
      default:  // set a byte in the headers, where the checks are
        if (!b.empty()) b[rng.below(std::min<size_t>(b.size(), 72))] = interesting_byte(rng);
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool ok = true;
  for (int i = 1; i < argc; ++i) ok = run_path(argv[i]) && ok;

  const std::vector<Bytes> seeds = valid_packets();
  for (const Bytes& seed : seeds) {
    for (size_t len = 0; len <= seed.size(); ++len) run_one(seed.data(), len);
  }
  SplitMix rng{kSeed ^ 0xA5A5A5A5u};
  for (int i = 0; i < kMutations; ++i) {
    Bytes b = seeds[rng.below(seeds.size())];
    mutate(b, rng);
    run_one(b);
  }
  std::printf("replay: %zu inputs (%zu seeds), no failure\n", replay::inputs_run, seeds.size());
  return ok ? 0 : 1;
}
