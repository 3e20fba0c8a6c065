// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The names of the engine's states and verdicts, as dumps, reports and test
// failures print them.
#include "counters.h"
#include "queue_pair.h"
#include "types.h"

namespace metaroce::transport {

const char* to_string(PathHealth health) {
  switch (health) {
    case PathHealth::Active: return "active";
    case PathHealth::Suspect: return "suspect";
    case PathHealth::Failed: return "failed";
  }
  return "?";
}

const char* to_string(QpState state) {
  switch (state) {
    case QpState::Reset: return "reset";
    case QpState::Init: return "init";
    case QpState::ReadyToReceive: return "rtr";
    case QpState::ReadyToSend: return "rts";
    case QpState::Error: return "error";
  }
  return "?";
}

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::Placed: return "placed";
    case Verdict::DuplicateChunk: return "duplicate-chunk";
    case Verdict::DuplicateComplete: return "duplicate-complete";
    case Verdict::OutOfWindow: return "out-of-window";
    case Verdict::QpNotReady: return "qp-not-ready";
    case Verdict::ReceiverNotReady: return "receiver-not-ready";
    case Verdict::AccessError: return "access-error";
    case Verdict::InvalidRequest: return "invalid-request";
    case Verdict::StaleResponse: return "stale-response";
  }
  return "?";
}

}  // namespace metaroce::transport
