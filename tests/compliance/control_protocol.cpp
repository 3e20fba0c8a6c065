// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "control_protocol.h"

#include <array>
#include <limits>
#include <utility>

namespace metaroce::compliance::control {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<const char*, Op>, 12> kOps{{
    {"hello", Op::Hello},
    {"connect", Op::Connect},
    {"destroy_qp", Op::DestroyQp},
    {"qp_state", Op::QpState},
    {"register", Op::Register},
    {"deregister", Op::Deregister},
    {"read", Op::Read},
    {"write", Op::Write},
    {"post_recv", Op::PostRecv},
    {"post_send", Op::PostSend},
    {"poll", Op::Poll},
    {"counters", Op::Counters},
}};

constexpr std::array<std::pair<const char*, uint32_t>, 4> kAccess{{
    {"local_write", kLocalWrite},
    {"remote_write", kRemoteWrite},
    {"remote_read", kRemoteRead},
    {"remote_atomic", kRemoteAtomic},
}};

constexpr std::array<std::pair<const char*, SendOpcode>, 7> kSendOpcodes{{
    {"write", SendOpcode::Write},
    {"write_imm", SendOpcode::WriteImm},
    {"send", SendOpcode::Send},
    {"send_imm", SendOpcode::SendImm},
    {"read", SendOpcode::Read},
    {"compare_swap", SendOpcode::CompareSwap},
    {"fetch_add", SendOpcode::FetchAdd},
}};

constexpr size_t kMaxAddressText = 64;

const char* op_name(Op op) {
  for (const auto& [name, value] : kOps)
    if (value == op) return name;
  return "?";
}

// Reads member `name` as an unsigned integer in [min, max] into `out`;
// absent is an error unless `optional` (then out keeps its value).
bool read_uint(const json& j, const char* name, uint64_t min, uint64_t max, uint64_t& out, std::string& error,
               bool optional = false) {
  const auto it = j.find(name);
  if (it == j.end()) {
    if (optional) return true;
    error = std::string("missing '") + name + "'";
    return false;
  }
  const std::optional<uint64_t> value = get_u64(j, name);
  if (!value || *value < min || *value > max) {
    error =
        std::string("'") + name + "' is not an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return false;
  }
  out = *value;
  return true;
}

template <typename T>
bool read_field(const json& j, const char* name, T& out, std::string& error, bool optional = false, uint64_t min = 0) {
  uint64_t value = out;
  if (!read_uint(j, name, min, std::numeric_limits<T>::max(), value, error, optional)) return false;
  out = static_cast<T>(value);
  return true;
}

bool read_sges(const json& j, std::vector<Sge>& out, std::string& error) {
  const auto it = j.find("sge");
  if (it == j.end()) return true;
  if (!it->is_array() || it->size() > kMaxSge) {
    error = "'sge' is not an array of at most 4 entries";
    return false;
  }
  for (const json& entry : *it) {
    if (!entry.is_object()) {
      error = "an 'sge' entry is not an object";
      return false;
    }
    Sge sge;
    if (!read_field(entry, "addr", sge.addr, error) || !read_field(entry, "length", sge.length, error) ||
        !read_field(entry, "key", sge.key, error))
      return false;
    out.push_back(sge);
  }
  return true;
}

bool read_named(const json& j, const char* name, std::string& out, std::string& error) {
  const std::optional<std::string> text = get_string(j, name);
  if (!text) {
    error = std::string("'") + name + "' is missing or not a string";
    return false;
  }
  out = *text;
  return true;
}

bool parse_fields(const json& j, Request& r, std::string& error) {
  switch (r.op) {
    case Op::Hello:
    case Op::Counters: return true;
    case Op::Connect:
      if (!read_named(j, "peer_address", r.peer_address, error)) return false;
      if (r.peer_address.empty() || r.peer_address.size() > kMaxAddressText) {
        error = "'peer_address' is not an address";
        return false;
      }
      return read_field(j, "peer_home_port", r.peer_home_port, error, false, 1) &&
             read_field(j, "peer_qpn", r.peer_qpn, error) && read_field(j, "sq_psn", r.sq_psn, error) &&
             read_field(j, "rq_psn", r.rq_psn, error);
    case Op::DestroyQp:
    case Op::QpState: return read_field(j, "qpn", r.qpn, error);
    case Op::Register: {
      if (!read_uint(j, "length", 1, kMaxRegionBytes, r.length, error)) return false;
      const auto it = j.find("access");
      if (it == j.end()) return true;
      if (!it->is_array()) {
        error = "'access' is not an array";
        return false;
      }
      for (const json& name : *it) {
        bool known = false;
        for (const auto& [text, bit] : kAccess) {
          if (name.is_string() && name.get_ref<const std::string&>() == text) {
            r.access |= bit;
            known = true;
          }
        }
        if (!known) {
          error = "unknown access right " + name.dump();
          return false;
        }
      }
      return true;
    }
    case Op::Deregister: return read_field(j, "key", r.key, error);
    case Op::Read:
      return read_field(j, "addr", r.addr, error) && read_uint(j, "length", 0, kMaxRegionBytes, r.length, error);
    case Op::Write: {
      if (!read_field(j, "addr", r.addr, error)) return false;
      std::string hex;
      if (!read_named(j, "hex", hex, error)) return false;
      std::optional<std::vector<uint8_t>> bytes = from_hex(hex);
      if (!bytes || bytes->size() > kMaxRegionBytes) {
        error = "'hex' is not hexadecimal bytes";
        return false;
      }
      r.bytes = std::move(*bytes);
      return true;
    }
    case Op::PostRecv:
      return read_field(j, "qpn", r.qpn, error) && read_field(j, "wr_id", r.wr_id, error) && read_sges(j, r.sge, error);
    case Op::PostSend: {
      if (!read_field(j, "qpn", r.qpn, error) || !read_field(j, "wr_id", r.wr_id, error) || !read_sges(j, r.sge, error))
        return false;
      std::string opcode;
      if (!read_named(j, "opcode", opcode, error)) return false;
      bool known = false;
      for (const auto& [name, value] : kSendOpcodes) {
        if (opcode == name) {
          r.opcode = value;
          known = true;
        }
      }
      if (!known) {
        error = "unknown opcode '" + opcode + "'";
        return false;
      }
      return read_field(j, "remote_addr", r.remote_addr, error, true) && read_field(j, "rkey", r.rkey, error, true) &&
             read_field(j, "imm", r.imm, error, true) && read_field(j, "compare_add", r.compare_add, error, true) &&
             read_field(j, "swap", r.swap, error, true);
    }
    case Op::Poll: {
      uint64_t count = 0;
      uint64_t wait_ms = 0;
      if (!read_field(j, "qpn", r.qpn, error) || !read_uint(j, "count", 0, kMaxPollCount, count, error) ||
          !read_uint(j, "wait_ms", 0, kMaxWaitMs, wait_ms, error))
        return false;
      r.count = static_cast<uint32_t>(count);
      r.wait_ms = static_cast<uint32_t>(wait_ms);
      return true;
    }
  }
  return false;
}

json sges_json(const std::vector<Sge>& sges) {
  json out = json::array();
  for (const Sge& s : sges) out.push_back({{"addr", s.addr}, {"length", s.length}, {"key", s.key}});
  return out;
}

}  // namespace

std::optional<Request> parse_request(std::string_view line, std::string& error) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  const std::optional<std::string> op = get_string(j, "op");
  if (!op) {
    error = "no 'op'";
    return std::nullopt;
  }
  Request r;
  bool known = false;
  for (const auto& [name, value] : kOps) {
    if (*op == name) {
      r.op = value;
      known = true;
    }
  }
  if (!known) {
    error = "unknown op '" + *op + "'";
    return std::nullopt;
  }
  if (!parse_fields(j, r, error)) return std::nullopt;
  return r;
}

std::string encode_request(const Request& r) {
  json j = {{"op", op_name(r.op)}};
  switch (r.op) {
    case Op::Hello:
    case Op::Counters: break;
    case Op::Connect:
      j["peer_address"] = r.peer_address;
      j["peer_home_port"] = r.peer_home_port;
      j["peer_qpn"] = r.peer_qpn;
      j["sq_psn"] = r.sq_psn;
      j["rq_psn"] = r.rq_psn;
      break;
    case Op::DestroyQp:
    case Op::QpState: j["qpn"] = r.qpn; break;
    case Op::Register: {
      j["length"] = r.length;
      json access = json::array();
      for (const auto& [name, bit] : kAccess)
        if (r.access & bit) access.push_back(name);
      j["access"] = access;
      break;
    }
    case Op::Deregister: j["key"] = r.key; break;
    case Op::Read:
      j["addr"] = r.addr;
      j["length"] = r.length;
      break;
    case Op::Write:
      j["addr"] = r.addr;
      j["hex"] = to_hex(r.bytes);
      break;
    case Op::PostRecv:
      j["qpn"] = r.qpn;
      j["wr_id"] = r.wr_id;
      j["sge"] = sges_json(r.sge);
      break;
    case Op::PostSend:
      j["qpn"] = r.qpn;
      j["wr_id"] = r.wr_id;
      j["sge"] = sges_json(r.sge);
      for (const auto& [name, value] : kSendOpcodes)
        if (value == r.opcode) j["opcode"] = name;
      j["remote_addr"] = r.remote_addr;
      j["rkey"] = r.rkey;
      j["imm"] = r.imm;
      j["compare_add"] = r.compare_add;
      j["swap"] = r.swap;
      break;
    case Op::Poll:
      j["qpn"] = r.qpn;
      j["count"] = r.count;
      j["wait_ms"] = r.wait_ms;
      break;
  }
  return j.dump();
}

const char* wc_status_name(uint32_t status) {
  switch (status) {
    case 0: return "success";
    case 1: return "loc_len_err";
    case 2: return "loc_qp_op_err";
    case 3: return "loc_eec_op_err";
    case 4: return "loc_prot_err";
    case 5: return "wr_flush_err";
    case 6: return "mw_bind_err";
    case 7: return "bad_resp_err";
    case 8: return "loc_access_err";
    case 9: return "rem_inv_req_err";
    case 10: return "rem_access_err";
    case 11: return "rem_op_err";
    case 12: return "retry_exc_err";
    case 13: return "rnr_retry_exc_err";
    case 21: return "general_err";
    default: return "unknown";
  }
}

const char* wc_opcode_name(uint32_t opcode) {
  switch (opcode) {
    case 0: return "send";
    case 1: return "rdma_write";
    case 2: return "rdma_read";
    case 3: return "comp_swap";
    case 4: return "fetch_add";
    case 128: return "recv";
    case 129: return "recv_rdma_with_imm";
    default: return "unknown";
  }
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::optional<std::vector<uint8_t>> from_hex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(text[2 * i]);
    const int lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

std::optional<uint64_t> get_u64(const json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(name);
  if (it == object.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0) return static_cast<uint64_t>(it->get<int64_t>());
  return std::nullopt;
}

std::optional<std::string> get_string(const json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace metaroce::compliance::control
