#include "io/receive_buffer_pool.h"

#include <liburing.h>

namespace abox::io {

namespace {
// Group ids: one per pool made in this process (tests make many stacks on
// many loops; a fresh id keeps even a stale kernel list out of reach).
std::uint16_t next_group() {
  static std::uint16_t last = 0;
  return ++last;
}
}  // namespace

ReceiveBufferPool::ReceiveBufferPool(EventLoop& loop, std::uint16_t buffers, std::size_t buffer_bytes)
    : loop_(loop), group_(next_group()), buffers_(buffers), buffer_bytes_(buffer_bytes) {}

ReceiveBufferPool::~ReceiveBufferPool() {
  if (!memory_) return;
  // Taken back before the memory goes. The removal completes when it is
  // submitted; cancel_all() submits it and waits for that completion.
  io_uring_sqe* s = loop_.request(this);
  io_uring_prep_remove_buffers(s, buffers_, group_);
  removing_ = 1;
  loop_.cancel_all(this, removing_);
}

void ReceiveBufferPool::provide(std::uint16_t first, std::uint16_t count) {
  io_uring_sqe* s = loop_.request(this);
  io_uring_prep_provide_buffers(s, memory_.get() + std::size_t{first} * buffer_bytes_,
                                static_cast<int>(buffer_bytes_), count, group_, first);
  s->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

void ReceiveBufferPool::post_multishot_receive(EventLoop::Completion* c, int fd) {
  if (!memory_) {
    // Not value-initialized: pages become resident as datagrams reach them.
    memory_ = std::make_unique_for_overwrite<std::uint8_t[]>(std::size_t{buffers_} * buffer_bytes_);
    provide(0, buffers_);
    usable_ = buffers_;
  }
  io_uring_sqe* s = loop_.request(c);
  io_uring_prep_recv_multishot(s, fd, nullptr, 0, 0);
  s->flags |= IOSQE_BUFFER_SELECT;
  s->buf_group = group_;
}

std::optional<std::span<const std::uint8_t>> ReceiveBufferPool::bytes(int res,
                                                                      std::uint32_t cqe_flags) const {
  if ((cqe_flags & IORING_CQE_F_BUFFER) == 0 || res < 0 || !memory_) return std::nullopt;
  const std::size_t id = cqe_flags >> IORING_CQE_BUFFER_SHIFT;
  if (id >= buffers_ || static_cast<std::size_t>(res) > buffer_bytes_) return std::nullopt;
  return std::span<const std::uint8_t>(memory_.get() + id * buffer_bytes_, static_cast<std::size_t>(res));
}

// One provide per datagram, not a batch: measured, a batch is slower. The
// provide is queued right behind the tap write that carries the datagram to
// the guest, and the kernel's provide loop is where the guest that write
// woke takes the CPU; without it abox-net sleeps first and is woken again
// (5.3 context switches per pinned UDP round trip instead of 4.7,
// docs/benchmarks.md).
void ReceiveBufferPool::give_back(std::uint32_t cqe_flags) {
  if ((cqe_flags & IORING_CQE_F_BUFFER) == 0) return;
  const std::size_t id = cqe_flags >> IORING_CQE_BUFFER_SHIFT;
  if (id >= buffers_ || !memory_) return;
  provide(static_cast<std::uint16_t>(id), 1);
}

void ReceiveBufferPool::on_complete(int res, std::uint32_t /*cqe_flags*/) {
  if (removing_ != 0 || res >= 0) return;
  // A provide failed (the kernel is out of memory): that buffer is lost.
  if (usable_ > 0) --usable_;
}

}  // namespace abox::io
