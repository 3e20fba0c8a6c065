// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "control_client.h"

#include <chrono>

namespace metaroce::compliance {
namespace {

using control::get_string;
using control::get_u64;
using control::Op;
using nlohmann::json;

// A Poll waits at most control::kMaxWaitMs in the target; anything else
// answers at once.
constexpr std::chrono::milliseconds kReplyTimeout(control::kMaxWaitMs + 10'000);

uint64_t need_u64(const json& reply, const char* name, uint64_t max) {
  const std::optional<uint64_t> v = get_u64(reply, name);
  if (!v || *v > max) throw CaseAbort(std::string("target reply without a valid '") + name + "': " + reply.dump());
  return *v;
}

std::string need_string(const json& reply, const char* name) {
  const std::optional<std::string> v = get_string(reply, name);
  if (!v) throw CaseAbort(std::string("target reply without '") + name + "': " + reply.dump());
  return *v;
}

control::Request request(Op op) {
  control::Request r;
  r.op = op;
  return r;
}

}  // namespace

json ControlClient::call(const control::Request& r) {
  if (!channel_.send_line(control::encode_request(r))) throw CaseAbort("side channel to the target is gone");
  const std::optional<std::string> line = channel_.read_line(kReplyTimeout);
  if (!line) throw CaseAbort("no reply from the target to " + control::encode_request(r));
  json reply = json::parse(*line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) throw CaseAbort("target reply is not a JSON object: " + *line);
  const auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) throw CaseAbort("target reply without 'ok': " + *line);
  if (!ok->get<bool>())
    throw CaseAbort("target refused " + control::encode_request(r) + ": " +
                    get_string(reply, "error").value_or("(no reason)"));
  return reply;
}

TargetInfo ControlClient::hello() {
  const json reply = call(request(Op::Hello));
  TargetInfo info;
  info.address = need_string(reply, "address");
  info.home_port = static_cast<uint16_t>(need_u64(reply, "home_port", 65535));
  info.mtu = static_cast<uint32_t>(need_u64(reply, "mtu", 65536));
  info.paths = static_cast<uint32_t>(need_u64(reply, "paths", 64));
  info.security = need_string(reply, "security");
  return info;
}

uint32_t ControlClient::connect(const std::string& address, uint16_t home_port, uint32_t peer_qpn, uint32_t sq_psn,
                                uint32_t rq_psn) {
  control::Request r = request(Op::Connect);
  r.peer_address = address;
  r.peer_home_port = home_port;
  r.peer_qpn = peer_qpn;
  r.sq_psn = sq_psn;
  r.rq_psn = rq_psn;
  return static_cast<uint32_t>(need_u64(call(r), "qpn", UINT32_MAX));
}

void ControlClient::destroy_qp(uint32_t qpn) {
  control::Request r = request(Op::DestroyQp);
  r.qpn = qpn;
  call(r);
}

std::string ControlClient::qp_state(uint32_t qpn) {
  control::Request r = request(Op::QpState);
  r.qpn = qpn;
  return need_string(call(r), "state");
}

Region ControlClient::register_region(uint64_t length, uint32_t access) {
  control::Request r = request(Op::Register);
  r.length = length;
  r.access = access;
  const json reply = call(r);
  return {need_u64(reply, "addr", UINT64_MAX), static_cast<uint32_t>(need_u64(reply, "key", UINT32_MAX)), length};
}

void ControlClient::deregister(uint32_t key) {
  control::Request r = request(Op::Deregister);
  r.key = key;
  call(r);
}

std::vector<uint8_t> ControlClient::read(uint64_t addr, uint64_t length) {
  control::Request r = request(Op::Read);
  r.addr = addr;
  r.length = length;
  const std::optional<std::vector<uint8_t>> bytes = control::from_hex(need_string(call(r), "hex"));
  if (!bytes || bytes->size() != length)
    throw CaseAbort("target read returned other than " + std::to_string(length) + " bytes");
  return *bytes;
}

void ControlClient::write(uint64_t addr, const std::vector<uint8_t>& bytes) {
  control::Request r = request(Op::Write);
  r.addr = addr;
  r.bytes = bytes;
  call(r);
}

void ControlClient::post_recv(uint32_t qpn, uint64_t wr_id, const std::vector<control::Sge>& sge) {
  control::Request r = request(Op::PostRecv);
  r.qpn = qpn;
  r.wr_id = wr_id;
  r.sge = sge;
  call(r);
}

void ControlClient::post_send(const control::Request& request_fields) {
  control::Request r = request_fields;
  r.op = Op::PostSend;
  call(r);
}

std::vector<TargetCompletion> ControlClient::poll(uint32_t qpn, uint32_t count, uint32_t wait_ms) {
  control::Request r = request(Op::Poll);
  r.qpn = qpn;
  r.count = count;
  r.wait_ms = wait_ms;
  const json reply = call(r);
  const auto list = reply.find("completions");
  if (list == reply.end() || !list->is_array()) throw CaseAbort("poll reply without 'completions': " + reply.dump());
  std::vector<TargetCompletion> out;
  for (const json& c : *list) {
    TargetCompletion t;
    t.wr_id = need_u64(c, "wr_id", UINT64_MAX);
    t.status = need_string(c, "status");
    t.opcode = need_string(c, "opcode");
    t.byte_len = static_cast<uint32_t>(need_u64(c, "byte_len", UINT32_MAX));
    if (c.contains("imm")) t.imm = static_cast<uint32_t>(need_u64(c, "imm", UINT32_MAX));
    out.push_back(std::move(t));
  }
  return out;
}

std::map<std::string, uint64_t> ControlClient::counters() {
  const json reply = call(request(Op::Counters));
  const auto object = reply.find("counters");
  if (object == reply.end() || !object->is_object()) throw CaseAbort("counters reply without 'counters'");
  std::map<std::string, uint64_t> out;
  for (const char* name : control::kDropCounters) out[name] = need_u64(*object, name, UINT64_MAX);
  for (const char* name : control::kDuplicateCounters) out[name] = need_u64(*object, name, UINT64_MAX);
  return out;
}

}  // namespace metaroce::compliance
