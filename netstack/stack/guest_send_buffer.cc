#include "netstack/stack/guest_send_buffer.h"

#include <cstdio>
#include <cstdlib>

namespace abox::netstack {

std::span<std::uint8_t> GuestSendBuffer::tail() {
  if (chunks_.empty() || chunks_.back().used == kChunkSize) {
    // Uninitialized: only what the host sends is ever written or read.
    chunks_.push_back(Chunk{std::make_unique_for_overwrite<std::uint8_t[]>(kChunkSize), 0});
  }
  Chunk& c = chunks_.back();
  return {c.data.get() + c.used, kChunkSize - c.used};
}

void GuestSendBuffer::commit(std::size_t n) {
  if (chunks_.empty() || n > kChunkSize - chunks_.back().used) {
    std::fprintf(stderr, "abox-net: GuestSendBuffer: commit past the tail\n");
    std::abort();
  }
  chunks_.back().used += n;
  held_ += n;
}

void GuestSendBuffer::release(std::size_t n) {
  if (n > held_) {
    std::fprintf(stderr, "abox-net: GuestSendBuffer: release of more than is held\n");
    std::abort();
  }
  held_ -= n;
  while (n > 0) {
    Chunk& front = chunks_.front();
    const std::size_t left = front.used - front_released_;
    const std::size_t step = n < left ? n : left;
    front_released_ += step;
    n -= step;
    if (front_released_ == front.used) {  // wholly acknowledged (a later read starts a new chunk)
      chunks_.pop_front();
      front_released_ = 0;
    }
  }
  if (held_ == 0) {  // an idle flow holds no chunk (not even an empty one tail() made)
    chunks_.clear();
    front_released_ = 0;
  }
}

}  // namespace abox::netstack
