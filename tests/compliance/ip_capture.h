// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The IP headers of the UDP datagrams that reach one port, read from an
// AF_PACKET socket on the interface that holds the suite's address: the only
// way to see the IPv4 DF bit and fragment fields of what a target sends
// (spec 1.2). Needs CAP_NET_RAW.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wire_peer.h"

namespace metaroce::compliance {

struct CapturedIp {
  bool ipv6 = false;
  bool dont_fragment = false;  // IPv4 DF
  bool fragment = false;       // IPv4 MF or a fragment offset; IPv6 a fragment header
  uint16_t source_port = 0;
  size_t ip_bytes = 0;
};

class IpCapture {
 public:
  // UDP datagrams to `port` (first fragments included) on the interface
  // holding `local_ip`. Null, with the reason in `why`, when the socket
  // cannot be had.
  static std::unique_ptr<IpCapture> open(const std::string& local_ip, uint16_t port, std::string& why);
  ~IpCapture();
  IpCapture(const IpCapture&) = delete;
  IpCapture& operator=(const IpCapture&) = delete;

  // What was captured until `deadline`.
  std::vector<CapturedIp> collect(Clock::time_point deadline);

 private:
  IpCapture(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace metaroce::compliance
