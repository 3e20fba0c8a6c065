// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "engine_host.h"

namespace metaroce::sim {

void EngineHost::receive(Time now, Datagram&& d) {
  endpoint_.on_datagram(now, d.src, d.payload, d.ce);
  if (application_) application_(now);
}

void EngineHost::on_timer(Time now) {
  endpoint_.on_timer(now);
  if (application_) application_(now);
}

bool EngineHost::transmit(Time now, Datagram& out) {
  out.payload.resize(endpoint_.max_datagram_bytes());
  auto tx = endpoint_.poll_transmit(now, out.payload);
  // Completions held until their ACK went out are visible now: the
  // application's turn, and anything it posts goes out at once.
  if (!tx && endpoint_.take_completions_released() && application_) {
    application_(now);
    tx = endpoint_.poll_transmit(now, out.payload);
  }
  if (!tx) return false;
  out.payload.resize(tx->length);
  out.dst = tx->peer;
  out.src_port = static_cast<uint16_t>(kBasePort + tx->path_id);
  out.dst_port = kHomePort;
  out.egress = tx->plane;
  out.ce = false;
  return true;
}

}  // namespace metaroce::sim
