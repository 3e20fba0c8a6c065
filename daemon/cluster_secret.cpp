// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "cluster_secret.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "hkdf.h"

namespace metaroce::daemon {
namespace {

constexpr char kClusterSalt[] = "metaroce v2 cluster";
constexpr char kHostPairInfo[] = "metaroce v2 host pair";
constexpr char kEndpointPairInfo[] = "metaroce v2 endpoint pair";

using Name = std::array<uint8_t, 18>;  // IPv6-form address, home port (big-endian)

bool ip16(const std::string& text, uint8_t out[16]) {
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    std::memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    std::memcpy(out + 12, &v4, 4);
    return true;
  }
  return inet_pton(AF_INET6, text.c_str(), out) == 1;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

template <typename T>
std::span<const uint8_t> bytes_of(const T& text) {
  return {reinterpret_cast<const uint8_t*>(text), sizeof text - 1};
}

}  // namespace

std::optional<std::vector<uint8_t>> load_cluster_secret(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok) {
    error = path + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    ok = false;
  } else if (st.st_uid != ::geteuid()) {
    error = path + ": owned by uid " + std::to_string(st.st_uid) + ", not by the daemon's uid " +
            std::to_string(::geteuid());
    ok = false;
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = path + ": mode " + mode + " lets group or others at it (chmod 600)";
    ok = false;
  } else {
    char buf[512];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > 4096) break;
    }
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  std::vector<uint8_t> secret;
  int high = -1;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    const int v = hex_value(c);
    if (v < 0) {
      error = path + ": not hexadecimal text (make one with: openssl rand -hex 32)";
      return std::nullopt;
    }
    if (high < 0) {
      high = v;
    } else {
      secret.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  if (high >= 0 || secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    error = path + ": the secret must be " + std::to_string(kMinSecretBytes) + " to " +
            std::to_string(kMaxSecretBytes) + " bytes of hex (found " + std::to_string(text.size()) + " characters)";
    return std::nullopt;
  }
  return secret;
}

std::optional<PairKeyResult> derive_pair_key(const std::vector<uint8_t>& secret, const std::string& local_ip,
                                             uint16_t local_port, const std::string& peer_ip, uint16_t peer_port,
                                             std::string& error) {
  Name local{}, peer{};
  if (!ip16(local_ip, local.data()) || !ip16(peer_ip, peer.data())) {
    error = "not an IP address: '" + (ip16(local_ip, local.data()) ? peer_ip : local_ip) + "'";
    return std::nullopt;
  }
  local[16] = static_cast<uint8_t>(local_port >> 8);
  local[17] = static_cast<uint8_t>(local_port);
  peer[16] = static_cast<uint8_t>(peer_port >> 8);
  peer[17] = static_cast<uint8_t>(peer_port);
  PairKeyResult out;
  out.role = local < peer ? 0 : 1;
  const Name& lo = out.role == 0 ? local : peer;
  const Name& hi = out.role == 0 ? peer : local;

  std::array<uint8_t, 32> host_key{};
  std::vector<uint8_t> info(bytes_of(kHostPairInfo).begin(), bytes_of(kHostPairInfo).end());
  info.insert(info.end(), lo.begin(), lo.begin() + 16);
  info.insert(info.end(), hi.begin(), hi.begin() + 16);
  // Extract(salt, secret) then Expand with the host pair's info.
  bool ok = transport::hkdf_sha256(bytes_of(kClusterSalt), secret, info, host_key);
  info.assign(bytes_of(kEndpointPairInfo).begin(), bytes_of(kEndpointPairInfo).end());
  info.insert(info.end(), lo.begin(), lo.end());
  info.insert(info.end(), hi.begin(), hi.end());
  ok = ok && transport::hkdf_sha256_expand(host_key, info, out.key);
  std::fill(host_key.begin(), host_key.end(), 0);
  if (!ok) {
    error = "HKDF failed";
    return std::nullopt;
  }
  return out;
}

std::string to_hex(const transport::PairKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : key) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool from_hex(const std::string& hex, transport::PairKey& key) {
  if (hex.size() != 2 * key.size()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const int h = hex_value(hex[2 * i]), l = hex_value(hex[2 * i + 1]);
    if (h < 0 || l < 0) return false;
    key[i] = static_cast<uint8_t>(h << 4 | l);
  }
  return true;
}

}  // namespace metaroce::daemon
