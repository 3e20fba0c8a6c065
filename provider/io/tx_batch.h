// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// One batch of outgoing datagrams: a preallocated arena the engine writes
// into (poll_transmit), then the send messages built over it without copying.
//
// GSO batching rules (build()):
//  - datagrams are grouped by path socket, stably, so each path keeps the
//    engine's order (the receiver treats a path as FIFO); paths are
//    independent, so interleaving across them is irrelevant, but which goes
//    first is not (below, first_socket_): each batch starts with the next of
//    its sockets after the one the last batch started with;
//  - within a path, consecutive datagrams to the same peer of the same size
//    form one UDP_SEGMENT super-datagram (one iovec per datagram, three for
//    one whose payload stays in application memory; no copy); a
//    shorter datagram may close a run as its last segment; a run stops at
//    kMaxGsoSegments segments or kMaxGsoBytes bytes;
//  - anything else (another peer, a larger datagram) starts a new message;
//  - for a zero-copy backend, a run of datagrams whose payloads of at least
//    kZeroCopyMinPayload bytes stay in application memory becomes a
//    zero-copy message, and stops before it needs more than
//    kMaxZeroCopyFrags pages: the kernel maps each page a zero-copy send
//    reads into one fragment of one buffer, and refuses a send that needs
//    more (EMSGSIZE). Smaller payloads go in copied runs of the full size.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "endpoint.h"
#include "peer_table.h"
#include "types.h"
#include "udp_socket.h"

namespace metaroce::io {

// Zero-copy sends (BackendConfig::zerocopy): the least payload per datagram
// (below it a run of kMaxZeroCopyFrags pages carries so little that pinning
// and unpinning them and the extra notification cost more than the copy;
// the kernel's MSG_ZEROCOPY notes put the break-even near 10 KB a send),
// and the pages one send may span (the kernel's MAX_SKB_FRAGS).
inline constexpr uint32_t kZeroCopyMinPayload = 4096;
inline constexpr uint32_t kMaxZeroCopyFrags = 17;

class TxBatch {
 public:
  struct MessageInfo {
    uint16_t socket = 0;         // path socket index
    uint16_t segments = 0;       // datagrams in the message
    uint32_t segment_bytes = 0;  // the length of each but the last
    bool zerocopy = false;       // to be sent without a copy (see the rules above)
  };

  // `capacity` datagrams of at most `slot_bytes` each.
  TxBatch(uint32_t capacity, uint32_t slot_bytes);

  void clear() {
    count_ = 0;
    message_count_ = 0;
  }
  bool full() const { return count_ == capacity_; }
  size_t size() const { return count_; }
  uint32_t capacity() const { return capacity_; }

  // Where the next datagram goes (slot_bytes long); requires !full().
  std::span<uint8_t> next_slot() { return {slot(count_), slot_bytes_}; }
  // The datagram poll_transmit wrote to next_slot() (with its payload left
  // in application memory when TxDatagram::payload is set).
  void commit(const transport::TxDatagram& d) {
    entries_[count_++] = {
        d.peer, d.path_id, d.length, 0, d.head, d.payload.data(), static_cast<uint32_t>(d.payload.size())};
  }

  // Builds the send messages (see the rules above). Each datagram's socket
  // is peers.socket(peer, path, default_sockets), below `socket_count`.
  // Datagrams for a peer without a usable destination are left out and
  // counted in `unroutable`.
  void build(const PeerTable::View& peers, uint16_t default_sockets, uint16_t socket_count, bool gso, bool zerocopy,
             uint64_t& unroutable);

  size_t message_count() const { return message_count_; }
  // Contiguous; messages of one path socket are adjacent.
  mmsghdr* messages() { return messages_.get(); }
  const MessageInfo& info(size_t message) const { return info_[message]; }

  // Sends of this batch the kernel has not completed yet (io_uring).
  uint32_t inflight = 0;

 private:
  struct Entry {
    transport::PeerId peer;
    uint16_t path;
    uint32_t length;
    uint16_t socket;  // set by build()
    uint32_t head;    // with a gathered payload: the slot's bytes before it
    const uint8_t* payload;
    uint32_t payload_length;  // 0: the slot holds the whole datagram
  };
  // Appends the iovecs of datagram `index` at iovecs_[iov].
  void add_iovecs(uint32_t index, size_t& iov);
  // The pages a zero-copy send of datagram `index` reads.
  uint32_t pages_of(uint32_t index);
  struct alignas(8) Control {
    uint8_t bytes[kTxControlBytes];
  };

  uint8_t* slot(size_t index) { return data_.get() + index * slot_bytes_; }

  const uint32_t capacity_;
  const uint32_t slot_bytes_;
  std::unique_ptr<uint8_t[]> data_;
  std::unique_ptr<Entry[]> entries_;
  std::unique_ptr<uint32_t[]> order_;
  std::unique_ptr<iovec[]> iovecs_;
  std::unique_ptr<mmsghdr[]> messages_;
  std::unique_ptr<sockaddr_storage[]> destinations_;
  std::unique_ptr<Control[]> controls_;
  std::unique_ptr<MessageInfo[]> info_;
  std::vector<uint32_t> socket_datagrams_;  // this batch's datagrams per socket
  std::vector<uint32_t> bucket_;            // counting sort by socket
  // Where the search for the socket whose messages go first in the next
  // batch starts (modulo the socket count). The engine stamps a datagram's
  // send time when it builds it, so if the same path went first more often,
  // the messages handed to the kernel later would show longer RTTs, get
  // smaller windows and carry fewer packets.
  uint16_t first_socket_ = 0;
  size_t count_ = 0;
  size_t message_count_ = 0;
};

}  // namespace metaroce::io
