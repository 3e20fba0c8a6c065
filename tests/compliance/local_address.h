// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// IP literals as socket addresses, and the local interface that holds one:
// shared by the suite and by metaroce-compliance-target.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace metaroce::compliance {

// An IP literal and port as a socket address; false when it is not one.
bool make_address(const std::string& ip, uint16_t port, sockaddr_storage& out);
socklen_t address_length(const sockaddr_storage& address);

// The index of the interface that holds the local address `ip`, or 0.
unsigned interface_of(const std::string& ip);

// The MTU of interface `index`; 0 when it cannot be read.
uint32_t interface_mtu(unsigned index);

}  // namespace metaroce::compliance
