// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The suite's end of the side channel (control_protocol.h): typed calls, each
// one request and one reply. A refused request or a broken channel throws
// CaseAbort, which fails the running case with the target's reason.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "control_protocol.h"
#include "line_channel.h"

namespace metaroce::compliance {

struct CaseAbort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TargetInfo {
  std::string address;
  uint16_t home_port = 0;
  uint32_t mtu = 0;
  uint32_t paths = 0;
  std::string security;
};

struct Region {
  uint64_t addr = 0;
  uint32_t key = 0;
  uint64_t length = 0;
};

struct TargetCompletion {
  uint64_t wr_id = 0;
  std::string status;
  std::string opcode;
  uint32_t byte_len = 0;
  std::optional<uint32_t> imm;
};

class ControlClient {
 public:
  explicit ControlClient(LineChannel channel) : channel_(std::move(channel)) {}

  TargetInfo hello();
  // A QP of the target connected to the suite's QP `peer_qpn` at
  // (address, home_port); the target's first request has msn sq_psn and it
  // expects the suite's first at rq_psn. Returns the target's QP number.
  uint32_t connect(const std::string& address, uint16_t home_port, uint32_t peer_qpn, uint32_t sq_psn, uint32_t rq_psn);
  void destroy_qp(uint32_t qpn);
  std::string qp_state(uint32_t qpn);
  Region register_region(uint64_t length, uint32_t access);
  void deregister(uint32_t key);
  std::vector<uint8_t> read(uint64_t addr, uint64_t length);
  void write(uint64_t addr, const std::vector<uint8_t>& bytes);
  void post_recv(uint32_t qpn, uint64_t wr_id, const std::vector<control::Sge>& sge);
  void post_send(const control::Request& request);  // op is set here
  // Completions of the QP's CQ: returns once `count` came or after wait_ms.
  std::vector<TargetCompletion> poll(uint32_t qpn, uint32_t count, uint32_t wait_ms);
  std::map<std::string, uint64_t> counters();

 private:
  nlohmann::json call(const control::Request& request);

  LineChannel channel_;
};

}  // namespace metaroce::compliance
