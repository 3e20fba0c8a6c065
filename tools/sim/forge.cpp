// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "forge.h"

#include <cstring>

#include "packet_protection.h"

namespace metaroce::sim::forge {

Bytes data_packet(wire::Origin origin, const wire::DataHeader& header, std::span<const uint8_t> payload,
                  const wire::ReadRequest* read, const wire::AtomicRequest* atomic, const uint64_t* atomic_original) {
  Bytes out(wire::data_header_bytes(header.opcode) + payload.size());
  const size_t headers = wire::encode_data(out, origin, header, read, atomic, atomic_original, payload.size());
  if (headers == 0) return {};
  if (!payload.empty()) std::memcpy(out.data() + headers, payload.data(), payload.size());
  out.resize(headers + payload.size());
  return out;
}

Bytes ack_packet(wire::Origin origin, const wire::Ack& ack) {
  Bytes out(wire::kMaxAckBytes);
  out.resize(wire::encode_ack(out, origin, ack));
  return out;
}

Bytes nak_packet(wire::Origin origin, const wire::Nak& nak) {
  Bytes out(wire::kMaxAckBytes);
  out.resize(wire::encode_nak(out, origin, nak));
  return out;
}

Bytes encode(const wire::Packet& p) {
  const wire::CommonHeader& c = p.common;
  const wire::Origin origin(c.path_id, c.home_port, c.heard_paths);
  Bytes out;
  switch (c.type) {
    case wire::PacketType::Data:
      out = data_packet(origin, p.data, p.payload, &p.read, &p.atomic, &p.atomic_original);
      break;
    case wire::PacketType::Ack: out = ack_packet(origin, p.ack); break;
    case wire::PacketType::Nak: out = nak_packet(origin, p.nak); break;
    case wire::PacketType::Probe:
    case wire::PacketType::ProbeReply: {
      out.resize(wire::kCommonHeaderBytes + sizeof(wire::ProbeWire));
      out.resize(wire::encode_probe(out, origin, c.type, p.probe));
      break;
    }
    case wire::PacketType::UdSend: break;
  }
  if (out.size() >= wire::kCommonHeaderBytes)
    wire::stamp_common(out, c.security, c.src_epoch, c.dst_epoch, c.packet_number);
  else out.clear();
  return out;
}

Bytes frame_with_crc(Bytes body, std::span<const uint8_t> filler) {
  const size_t length = body.size();
  body.resize(length + wire::kIntegrityTrailerBytes);
  transport::seal_integrity(body, length);
  body.insert(body.end(), filler.begin(), filler.end());
  return body;
}

}  // namespace metaroce::sim::forge
