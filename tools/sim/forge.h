// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Datagrams built by hand, with the engine's own wire encoders: the crafted
// packets of the hostile-input tests and the forgeries of the attacker node
// (attacker.h). What comes out has no trailer, unless framed with
// frame_with_crc(): the framing a forger without keys can do.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "metaroce/wire.h"

namespace metaroce::sim::forge {

using Bytes = std::vector<uint8_t>;

// Unframed datagrams: the common header's security, epochs and packet
// number are zero (stamp_common() or an endpoint's seal_datagram() fill
// them in).
Bytes data_packet(wire::Origin origin, const wire::DataHeader& header, std::span<const uint8_t> payload,
                  const wire::ReadRequest* read = nullptr, const wire::AtomicRequest* atomic = nullptr,
                  const uint64_t* atomic_original = nullptr);
Bytes ack_packet(wire::Origin origin, const wire::Ack& ack);
Bytes nak_packet(wire::Origin origin, const wire::Nak& nak);

// A decoded packet (Data, Ack, Nak, Probe or ProbeReply) encoded again, with
// its common header as decoded (security, epochs, packet number); no
// trailer. Empty for a type it does not rebuild.
Bytes encode(const wire::Packet& packet);

// Appends to `body` (a datagram without trailer) the CRC32C of its bytes,
// then `filler` (e.g. the rest of a genuine AES-GCM tag, to keep an
// authenticated mode's trailer length).
Bytes frame_with_crc(Bytes body, std::span<const uint8_t> filler = {});

}  // namespace metaroce::sim::forge
