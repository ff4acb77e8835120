// GuestSendBuffer: the bytes a TcpFlow read from its host socket and gave
// to lwIP without copying (no-copy tcp_write), kept until the guest
// acknowledges them.
//
// How it works: bytes are read into the free tail of the newest 64 KiB
// chunk (tail()); commit() queues them; lwIP's segments point into the
// chunks until the sent callback reports how many bytes the guest
// acknowledged, in order; release() then frees every chunk that is wholly
// acknowledged. Nothing is copied in user space between the host socket and
// the tap (LWIP.md: the copy in tcp_write was 15% of a download's CPU).
//
// Invariants: released bytes never exceed committed bytes (a broken one
// aborts); chunks live exactly as long as lwIP may read them. The bytes held
// are bounded by lwIP's send buffer (tcp_sndbuf), which the flow checks
// before every read; an idle flow holds no chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>

namespace abox::netstack {

class GuestSendBuffer {
 public:
  static constexpr std::size_t kChunkSize = 64 * 1024;

  // Room to read into: the free tail of the newest chunk, or a new chunk.
  // Never empty. Valid until the next commit() or release().
  std::span<std::uint8_t> tail();
  // n bytes were written at the start of tail() and given to lwIP.
  void commit(std::size_t n);
  // The guest acknowledged the oldest n committed bytes.
  void release(std::size_t n);

  // Committed and not yet released.
  std::size_t held() const { return held_; }
  std::size_t chunks() const { return chunks_.size(); }

 private:
  struct Chunk {
    std::unique_ptr<std::uint8_t[]> data;
    std::size_t used = 0;  // committed bytes, from the start
  };
  std::deque<Chunk> chunks_;
  std::size_t front_released_ = 0;  // bytes of chunks_.front() already released
  std::size_t held_ = 0;
};

}  // namespace abox::netstack
