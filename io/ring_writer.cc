#include "io/ring_writer.h"

#include <cstring>
#include <utility>

namespace abox::io {

RingWriter::RingWriter(EventLoop& loop, int fd, Done on_done)
    : loop_(loop), fd_(fd), on_done_(std::move(on_done)), slots_(kSlots) {
  free_.reserve(kSlots);
  for (std::size_t i = kSlots; i-- > 0;) {
    slots_[i].writer = this;
    free_.push_back(static_cast<std::uint16_t>(i));
  }
}

RingWriter::~RingWriter() {
  for (Slot& slot : slots_) loop_.cancel_all(&slot, slot.in_flight);
}

bool RingWriter::write_to(int fd, std::span<const std::span<const std::uint8_t>> parts, std::size_t note) {
  std::size_t size = 0;
  for (const auto& part : parts) size += part.size();
  if (size > kSlotBytes || free_.empty()) return false;
  if (!memory_) {
    // Not value-initialized: a page becomes resident only when a slot on it
    // is first written.
    memory_ = std::make_unique_for_overwrite<std::uint8_t[]>(kSlots * kSlotBytes);
    for (std::size_t i = 0; i < kSlots; ++i) slots_[i].bytes = memory_.get() + i * kSlotBytes;
  }
  Slot& slot = slots_[free_.back()];
  free_.pop_back();
  std::size_t at = 0;
  for (const auto& part : parts) {
    if (part.empty()) continue;
    std::memcpy(slot.bytes + at, part.data(), part.size());
    at += part.size();
  }
  slot.note = note;
  slot.in_flight = 1;
  io_uring_sqe* s = loop_.request(&slot, /*done_at_submit=*/true);
  // Offset -1: the fd's own position, which a tap or socket does not have.
  io_uring_prep_write(s, fd, slot.bytes, static_cast<unsigned>(size), ~std::uint64_t{0});
  return true;
}

void RingWriter::completed(Slot& slot, int res) {
  slot.in_flight = 0;
  free_.push_back(static_cast<std::uint16_t>(&slot - slots_.data()));
  on_done_(res, slot.note);
}

}  // namespace abox::io
