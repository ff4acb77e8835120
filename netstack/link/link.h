// Link: where a guest's Ethernet frames come from and go to. The netstack
// sees only this interface, so tap, QEMU stream, AF_PACKET and vsock links
// drop in without changing the stack (one contract test runs against every
// implementation).
//
// A link is non-blocking and owned by the event loop's thread. Frames are
// whole Ethernet frames (no vnet header, no length prefix: the link strips
// and adds its own framing). A frame larger than max_receive_size() is never
// delivered by receive(): the link drops and counts it. That is mtu() + 14,
// except for a link that takes TCP segmentation offload from the guest's
// kernel (TSO: one large TCP segment, IPv4 or IPv6, instead of many MTU-sized
// ones),
// which delivers such segments up to 65535 bytes and nothing else over
// mtu() + 14.
//
// Sending takes a frame in pieces (OutFrame: a pbuf chain as it is), so a
// link that can write a scatter list (writev) never copies it. A link whose
// far end is a kernel that finishes checksums (a tap with a vnet header)
// says so with tx_checksum_offload() and last_frame_checksum_trusted(); the
// defaults say no, and a link that implements only send(span) still works:
// send_frame() then gathers the pieces into one buffer.
//
// Reading through the event loop's ring (optional): a link that can says so
// by returning the iovecs of one read of one frame from
// ring_receive_iovecs(); the stack then posts that read on the loop's ring
// and hands its result to finish_ring_receive(), instead of calling
// receive() on readiness. No readiness wake-up and no read that finds
// nothing: one completion per frame, taken with the turn's wait.
//
// A link whose medium is bytes, not frames (a stream socket: one read may
// end inside a frame or hold a hundred), points its iovecs at a receive
// buffer of its own instead of buf. finish_ring_receive() then takes the
// bytes the read brought, keeps the link's own checks (length prefix,
// runts, oversize, a frame torn across reads) and copies the first whole
// frame into buf; receive_buffered() hands out the others, one per call,
// from what was already read: no system call, so no read that finds
// EAGAIN. After every finish_ring_receive() the stack calls
// receive_buffered() until it returns 0, then posts the next read. A link
// read one frame per read keeps receive_buffered()'s default (0).
//
// The head of a frame over the MTU (optional): a frame too large is still
// dropped and counted (dropped_oversize), but a link may keep its start so
// that the stack can tell the guest (an ICMP "packet too big", RFC 4443 and
// 1191). Such a link returns 0 from the receive() (or finish_ring_receive(),
// receive_buffered()) that dropped it, without going on to the next frame,
// and last_oversize_head() then gives the frame's first bytes, in the buffer
// that call was given, and its real length. That 0 does not mean "nothing
// waiting": a caller that takes heads calls again. The head is at least
// min(frame length, kOversizeHeadBytes, the buffer) bytes, or there is none
// (a stream link that has only part of it: it never waits for more). It
// costs nothing on the normal path: the bytes are where the read put them
// (a stream link copies them as it copies a frame; a tap's read spills the
// rest of the frame into scratch storage, to learn its length), and no call
// makes a system call more than before. A link that keeps no head keeps the
// default (nullopt);
// one that does clears it in every receive call, receive_buffered() too
// (else a caller would take the same head twice).
#pragma once

#include <sys/uio.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/result.h"

namespace abox::netstack {

// One frame to send, in pieces that follow each other.
struct OutFrame {
  std::span<const std::span<const std::uint8_t>> pieces;
  // Non-zero only when the link said tx_checksum_offload(): the TCP or UDP
  // checksum field at checksum_start + checksum_offset (from the start of
  // the frame) holds the pseudo-header sum, and the receiving kernel
  // computes the rest (a vnet header's NEEDS_CSUM).
  std::uint16_t checksum_start = 0;
  std::uint16_t checksum_offset = 0;
  // Non-zero only when the link said tx_tso() (and with the checksum fields
  // set): a TCP frame larger than the MTU, up to 65535 bytes, that the
  // receiving kernel takes as segments of gso_size payload bytes each (GSO);
  // gso_header_size is its Ethernet, IP and TCP headers together, and
  // gso_tcp_ipv6 says the frame is TCP/IPv6 (else TCP/IPv4).
  std::uint16_t gso_size = 0;
  std::uint16_t gso_header_size = 0;
  bool gso_tcp_ipv6 = false;

  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& p : pieces) n += p.size();
    return n;
  }
};

// The frame's pieces one after the other in out (cleared first): for a
// link or a recorder that needs the frame whole.
inline void gather_frame(const OutFrame& frame, std::vector<std::uint8_t>& out) {
  out.clear();
  for (const auto& p : frame.pieces) out.insert(out.end(), p.begin(), p.end());
}

// True when a send()'s errno means the link is dead, not one frame dropped
// (see Link::send()).
inline bool send_error_ends_link(int err) {
  return err != EAGAIN && err != EMSGSIZE;
}

// The start of a frame the link dropped as over the MTU (see the top of
// this file).
struct OversizeHead {
  std::span<const std::uint8_t> head;  // the frame's first bytes, in the caller's buffer
  std::size_t frame_size = 0;          // the frame's real length (> head.size() when cut)
};

struct LinkCounters {
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;  // frames written (a frame queued is counted once written)
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t dropped_oversize = 0;  // frames larger than the MTU allows
  std::uint64_t dropped_send = 0;      // frames the other side could not take
};

class Link {
 public:
  virtual ~Link() = default;

  // The fd the event loop watches for POLLIN (and POLLOUT while
  // output_pending()).
  virtual int fd() const = 0;
  // The guest-facing MTU (IP packet size, without the Ethernet header).
  virtual std::size_t mtu() const = 0;
  // The largest frame receive() delivers (see the top of this file): give
  // receive() a buffer this big.
  virtual std::size_t max_receive_size() const { return mtu() + 14; }

  // Reads one frame into buf. Returns its length, 0 when no frame is waiting
  // (EAGAIN), or an errno (the link is dead: the peer went away).
  virtual base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) = 0;
  // Writes one frame, or queues it until flush() (a link whose
  // output_pending() says so). Success means the link took the frame (a tap
  // wrote it, a stream link queued it). Otherwise an errno: EAGAIN, "full:
  // this frame is dropped and counted, retry later"; EMSGSIZE, "this frame
  // cannot go (larger than the link allows, shorter than an Ethernet
  // header, offload fields the far kernel refused): dropped and counted, the
  // link is fine"; anything else, the link is dead (send_error_ends_link()).
  // A sender counts the first two and goes on.
  virtual base::Result<void, int> send(std::span<const std::uint8_t> frame) = 0;
  // The same for a frame in pieces. The default gathers them into one buffer
  // and calls send(); links that can, write the pieces as they are.
  virtual base::Result<void, int> send_frame(const OutFrame& frame) {
    if (frame.pieces.size() == 1) return send(frame.pieces[0]);
    gather_frame(frame, gather_);
    return send(gather_);
  }

  // The iovecs of one read of one frame into buf (the link's own framing,
  // such as a vnet header, in storage of its own that stays valid until
  // finish_ring_receive()); empty: this link is read with receive() only.
  virtual std::span<const iovec> ring_receive_iovecs(std::span<std::uint8_t> /*buf*/) { return {}; }
  // The result of that read (bytes, or -errno): the frame's length in buf;
  // 0 when the frame was dropped and counted, or (a stream) nothing whole
  // has arrived yet: read again; or the errno that ends the link. Sets
  // last_frame_checksum_trusted() as receive() does.
  virtual base::Result<std::size_t, int> finish_ring_receive(int res) {
    return base::Err{res < 0 ? -res : EIO};
  }
  // The next whole frame a ring read already brought (a stream link, see
  // the top of this file), copied into buf: its length; 0 when none is left
  // (post the next read); or the errno that ends the link, once every whole
  // frame has been handed out. Never a system call.
  virtual base::Result<std::size_t, int> receive_buffered(std::span<std::uint8_t> /*buf*/) {
    return std::size_t{0};
  }

  // Writing through the event loop's ring (optional): for a frame that
  // passes send_frame()'s checks the link writes its own framing (such as a
  // vnet header, at most kRingSendHeaderMax bytes) into `header` and returns
  // its length; the stack then writes header and frame as one write of its
  // own and hands the result to finish_ring_send(). A frame the checks drop
  // is counted as send_frame() counts it (and would have got EMSGSIZE) and
  // gets nullopt. A link that cannot be written so returns nullopt always
  // (the default) and says so in ring_send_supported().
  static constexpr std::size_t kRingSendHeaderMax = 16;
  virtual bool ring_send_supported() const { return false; }
  virtual std::optional<std::size_t> ring_send_header(
      const OutFrame& /*frame*/, std::span<std::uint8_t, kRingSendHeaderMax> /*header*/) {
    return std::nullopt;
  }
  // The write's result (bytes, or -errno) for a frame of frame_size bytes,
  // counted as send_frame() counts it; an errno that ends the link is
  // returned (a dropped frame is not an error).
  virtual base::Result<void, int> finish_ring_send(int res, std::size_t /*frame_size*/) {
    return res < 0 ? base::Result<void, int>(base::Err{-res}) : base::Result<void, int>();
  }

  // The most of an oversize frame a link needs to keep (see the top of this
  // file): its Ethernet header and the first 1280 bytes of its IP packet, all
  // that an ICMPv6 error may quote (RFC 4443 section 2.4 (c)).
  static constexpr std::size_t kOversizeHeadBytes = 14 + 1280;
  // After a receive call returned 0: the head of the oversize frame it
  // dropped, when the link kept one; valid until the next receive call.
  virtual std::optional<OversizeHead> last_oversize_head() const { return std::nullopt; }

  // True when the frame receive() returned last need not have its TCP/UDP
  // checksums checked: the sending kernel verified them or leaves them to
  // us partial (vnet header DATA_VALID or NEEDS_CSUM).
  virtual bool last_frame_checksum_trusted() const { return false; }
  // True when send_frame() honours OutFrame's checksum offload.
  virtual bool tx_checksum_offload() const { return false; }
  // True when send_frame() takes TCP frames larger than the MTU (OutFrame's
  // gso_size).
  virtual bool tx_tso() const { return false; }

  // A link that queues output (a stream socket: what the fd could not take,
  // and frames it batches until flush()) says so here: while true the loop
  // also watches fd() for POLLOUT and calls flush() when it is writable, and
  // the sender calls flush() when it is done with a burst (GuestStack: at
  // the end of every loop turn). flush() returns an errno when the link is
  // dead; a still-full fd is not an error.
  virtual bool output_pending() const { return false; }
  virtual base::Result<void, int> flush() { return {}; }

  virtual const LinkCounters& counters() const = 0;

 private:
  std::vector<std::uint8_t> gather_;  // send_frame()'s default
};

}  // namespace abox::netstack
