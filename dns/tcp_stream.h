// DnsTcpReader: the receiving half of DNS over TCP (RFC 7766: each message is
// a two-byte big-endian length, then the message), shared by the host-socket
// server and the gateway's lwIP listener. Sans-I/O: the owner appends the
// bytes it read and takes whole messages out.
//
// Invariants: at most `limit` bytes are ever buffered (append() refuses more);
// a message handed to the callback is a view into the buffer that stays valid
// for the whole callback, even if the callback clear()s the reader (clear
// keeps the allocation), so a gate may answer, and close, while reading it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace abox::dns {

class DnsTcpReader {
 public:
  explicit DnsTcpReader(std::size_t limit) : limit_(limit) {}

  // Room for n more bytes at the end (write them, then nothing else is
  // needed), or an empty span when that would pass the limit.
  std::span<std::uint8_t> append(std::size_t n) {
    if (n > limit_ - in_.size()) return {};
    const std::size_t old = in_.size();
    in_.resize(old + n);
    return std::span<std::uint8_t>(in_).subspan(old, n);
  }

  // Calls fn(message) for each whole message buffered, in order. fn returns
  // false when the connection went away (it may have clear()ed the reader):
  // then nothing more is read and for_each_message returns false.
  template <class Fn>
  bool for_each_message(Fn&& fn) {
    std::size_t pos = 0;
    while (in_.size() - pos >= 2) {
      const std::size_t len = (std::size_t{in_[pos]} << 8) | in_[pos + 1];
      if (in_.size() - pos - 2 < len) break;
      const auto message = std::span<const std::uint8_t>(in_).subspan(pos + 2, len);
      pos += 2 + len;
      if (!fn(message)) return false;
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(pos));
    return true;
  }

  // Gives back the last n bytes of an append() that were not filled (a
  // short read).
  void unappend(std::size_t n) { in_.resize(in_.size() - std::min(n, in_.size())); }

  std::size_t buffered() const { return in_.size(); }
  // Forgets what is buffered (the allocation stays; see the invariants).
  void clear() { in_.clear(); }
  // Forgets it and gives the memory back (a closed connection).
  void release() {
    in_.clear();
    in_.shrink_to_fit();
  }

 private:
  std::size_t limit_;
  std::vector<std::uint8_t> in_;
};

// The two bytes that go before a message of `size` bytes (size <= 65535).
inline std::array<std::uint8_t, 2> tcp_length_prefix(std::size_t size) {
  return {static_cast<std::uint8_t>(size >> 8), static_cast<std::uint8_t>(size & 0xFF)};
}

}  // namespace abox::dns
