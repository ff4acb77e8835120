// Link: where a guest's Ethernet frames come from and go to. The netstack
// sees only this interface, so tap, QEMU stream, AF_PACKET and vsock links
// drop in without changing the stack (one contract test runs against every
// implementation).
//
// A link is non-blocking and owned by the event loop's thread. Frames are
// whole Ethernet frames (no vnet header, no length prefix: the link strips
// and adds its own framing). A frame larger than mtu() + 14 is never
// delivered by receive(): the link drops and counts it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/result.h"

namespace abox::netstack {

struct LinkCounters {
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
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

  // Reads one frame into buf. Returns its length, 0 when no frame is waiting
  // (EAGAIN), or an errno (the link is dead: the peer went away).
  virtual base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) = 0;
  // Writes one frame. Returns an errno on failure; EAGAIN means "full, drop
  // or retry later", anything else means the link is dead.
  virtual base::Result<void, int> send(std::span<const std::uint8_t> frame) = 0;

  // A link that queues output the fd could not take (a stream socket) says
  // so here: while true the loop also watches fd() for POLLOUT and calls
  // flush() when it is writable. flush() returns an errno when the link is
  // dead; a still-full fd is not an error.
  virtual bool output_pending() const { return false; }
  virtual base::Result<void, int> flush() { return {}; }

  virtual const LinkCounters& counters() const = 0;
};

}  // namespace abox::netstack
