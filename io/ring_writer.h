// RingWriter: small writes (frames to a tap, datagrams to connected host UDP
// sockets) go through the event loop's ring instead of one system call each. The bytes are copied into one
// of a fixed set of slots, the write is handed to the kernel with the turn's
// wait (EventLoop::request, done_at_submit), and the slot is free again when
// the write completes. A write the writer cannot take (larger than a slot,
// or every slot in flight) is the caller's to do directly, after
// EventLoop::submit_now() so that it does not overtake queued ones.
//
// Invariants: at most kSlots writes in flight; a slot's bytes are not
// touched from post to completion; on_done gets every write's result, once,
// in completion order. The slots' memory (kSlots * kSlotBytes) is reserved
// on first use and only the slots used become resident (the free list is a
// stack: the same few slots serve a quiet flow). The destructor takes back
// whatever is still in flight (EventLoop::cancel_all), so the loop must
// outlive the writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "io/event_loop.h"

namespace abox::io {

class RingWriter {
 public:
  static constexpr std::size_t kSlotBytes = 2048;
  static constexpr std::size_t kSlots = 64;
  // res: the write's result (bytes, or -errno); note: what write() was
  // given with it (the caller's own, e.g. the frame's size).
  using Done = std::function<void(int res, std::size_t note)>;

  // fd: where write() goes; -1 for a writer used only with write_to().
  RingWriter(EventLoop& loop, int fd, Done on_done);
  ~RingWriter();
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;

  // Copies the parts, one after the other, into a free slot and posts one
  // write of them. False (nothing done) when they do not fit in a slot or no
  // slot is free.
  bool write(std::span<const std::span<const std::uint8_t>> parts, std::size_t note) {
    return write_to(fd_, parts, note);
  }
  // The same to another fd, which must be non-blocking (the write never
  // waits: a full socket fails it with EAGAIN) and must stay open until the
  // write is submitted: its owner calls EventLoop::submit_now() before it
  // closes the fd (the kernel holds the file from then on).
  bool write_to(int fd, std::span<const std::span<const std::uint8_t>> parts, std::size_t note);
  std::size_t in_flight() const { return kSlots - free_.size(); }

 private:
  struct Slot final : EventLoop::Completion {
    RingWriter* writer = nullptr;
    std::uint8_t* bytes = nullptr;
    std::size_t note = 0;
    std::size_t in_flight = 0;  // 0 or 1
    void on_complete(int res, std::uint32_t /*cqe_flags*/) override { writer->completed(*this, res); }
  };
  void completed(Slot& slot, int res);

  EventLoop& loop_;
  int fd_;
  Done on_done_;
  std::unique_ptr<std::uint8_t[]> memory_;  // kSlots * kSlotBytes, made on first write
  std::vector<Slot> slots_;
  std::vector<std::uint16_t> free_;  // a stack of slot indices
};

}  // namespace abox::io
