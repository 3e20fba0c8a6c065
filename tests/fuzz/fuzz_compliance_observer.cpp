// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The compliance suite's observer (tests/compliance/observer.h) reads every
// datagram a target sends, field by field: on arbitrary bytes it must not
// read past the datagram, and its memory stays bounded however many
// messages the datagrams claim. One observer sees every input, as it sees a
// whole run.
#include <cstdint>
#include <cstdlib>

#include "observer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::compliance;
  static Observer observer;
  static uint64_t inputs = 0;
  Datagram d;
  d.bytes.assign(data, data + size);
  d.source_port = static_cast<uint16_t>(size > 3 ? data[3] : 0);
  d.ecn = static_cast<int>(size % 4);
  observer.inspect(d);
  if (observer.seen().datagrams != ++inputs) std::abort();
  return 0;
}
