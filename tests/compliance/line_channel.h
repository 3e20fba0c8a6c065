// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Newline-delimited messages over a connected TCP socket: the transport of
// the suite's side channel to its target (control_protocol.h).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace metaroce::compliance {

class LineChannel {
 public:
  LineChannel() = default;
  explicit LineChannel(int fd, size_t max_line) : fd_(fd), max_line_(max_line) {}
  ~LineChannel();
  LineChannel(LineChannel&& other) noexcept;
  LineChannel& operator=(LineChannel&& other) noexcept;
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;

  bool valid() const { return fd_ >= 0; }
  // Writes `line` and a newline; false when the peer is gone.
  bool send_line(const std::string& line);
  // The next line without its newline; nothing on end of stream, an error,
  // a line longer than max_line, or (with a timeout) when none came in time.
  std::optional<std::string> read_line(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

 private:
  int fd_ = -1;
  size_t max_line_ = 0;
  std::string buffer_;
};

// A TCP connection to `address` (IPv4 or IPv6 literal) and port; invalid
// with `error` set when it cannot be made.
LineChannel connect_line_channel(const std::string& address, uint16_t port, size_t max_line, std::string& error);

}  // namespace metaroce::compliance
