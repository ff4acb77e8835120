// ReceiveBufferPool: buffers the kernel picks from when a receive posted on
// the event loop's ring completes (IOSQE_BUFFER_SELECT), so that every host
// UDP socket can have a receive waiting without a 64 KiB buffer of its own.
//
// The buffers are handed to the kernel with IORING_OP_PROVIDE_BUFFERS (an
// operation the ring's restrictions already allow, no registration). A
// completion that carries data names its buffer (IORING_CQE_F_BUFFER); that
// buffer is the completion owner's until give_back(), which provides it
// again with the next submission. Memory is reserved on first use and a
// page is resident only once a datagram reached it.
//
// Invariants: a buffer is either with the kernel or with exactly one
// completion (and given back within that completion's callback, so a
// turn's receives find it again); usable() counts the buffers not lost to
// a provide the kernel refused. Each pool has a
// group id of its own, and the destructor takes its buffers back from the
// kernel (waiting for that), so a later pool on the same loop never meets
// buffers of a freed one. The loop must outlive the pool, and every receive
// into the pool must have completed before it goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "io/event_loop.h"

namespace abox::io {

class ReceiveBufferPool final : public EventLoop::Completion {
 public:
  ReceiveBufferPool(EventLoop& loop, std::uint16_t buffers, std::size_t buffer_bytes);
  ~ReceiveBufferPool() override;
  ReceiveBufferPool(const ReceiveBufferPool&) = delete;
  ReceiveBufferPool& operator=(const ReceiveBufferPool&) = delete;

  // Posts a multishot receive on fd (a socket) into this pool's buffers,
  // whose completions go to c. Every datagram is one completion; the last
  // one lacks IORING_CQE_F_MORE (an error, -ENOBUFS when the pool ran dry,
  // or a cancel).
  void post_multishot_receive(EventLoop::Completion* c, int fd);
  // The res bytes a receive completion delivered into its buffer; nullopt
  // when it names none or res is not a length that fits one.
  std::optional<std::span<const std::uint8_t>> bytes(int res, std::uint32_t cqe_flags) const;
  // Provides the buffer a completion named again (no-op when it named none).
  void give_back(std::uint32_t cqe_flags);
  std::size_t usable() const { return usable_; }

  // A provide that failed (successes post nothing: IOSQE_CQE_SKIP_SUCCESS).
  void on_complete(int res, std::uint32_t cqe_flags) override;

 private:
  void provide(std::uint16_t first, std::uint16_t count);

  EventLoop& loop_;
  std::uint16_t group_;
  std::uint16_t buffers_;
  std::size_t buffer_bytes_;
  std::unique_ptr<std::uint8_t[]> memory_;  // buffers_ * buffer_bytes_, made on first post
  std::size_t usable_ = 0;
  std::size_t removing_ = 0;  // the destructor's removal, in flight
};

}  // namespace abox::io
