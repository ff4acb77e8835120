// ByteReader: the one way to read untrusted bytes (frames, DNS messages, HTTP
// heads). A span plus a cursor; every read checks the bounds and fails
// without moving the cursor when too few bytes remain. No pointer arithmetic
// on untrusted data happens anywhere else.
//
// Invariant: position() <= size() always. The reader never owns the bytes;
// the span must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace abox::base {

class ByteReader {
 public:
  ByteReader() = default;
  explicit ByteReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::size_t size() const { return bytes_.size(); }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return bytes_.size() - pos_; }
  bool empty() const { return remaining() == 0; }

  // Moves the cursor to an absolute offset (DNS compression pointers).
  // Fails, leaving the cursor where it was, past the end.
  [[nodiscard]] bool seek(std::size_t offset) {
    if (offset > bytes_.size()) return false;
    pos_ = offset;
    return true;
  }
  [[nodiscard]] bool skip(std::size_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }

  std::optional<std::uint8_t> u8() {
    if (remaining() < 1) return std::nullopt;
    return bytes_[pos_++];
  }
  // Network byte order (big-endian).
  std::optional<std::uint16_t> u16be() {
    if (remaining() < 2) return std::nullopt;
    auto v = static_cast<std::uint16_t>((bytes_[pos_] << 8) | bytes_[pos_ + 1]);
    pos_ += 2;
    return v;
  }
  std::optional<std::uint32_t> u32be() {
    if (remaining() < 4) return std::nullopt;
    std::uint32_t v = (std::uint32_t{bytes_[pos_]} << 24) | (std::uint32_t{bytes_[pos_ + 1]} << 16) |
                      (std::uint32_t{bytes_[pos_ + 2]} << 8) | std::uint32_t{bytes_[pos_ + 3]};
    pos_ += 4;
    return v;
  }
  // The next n bytes as a sub-span of the input (no copy).
  std::optional<std::span<const std::uint8_t>> bytes(std::size_t n) {
    if (n > remaining()) return std::nullopt;
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  // Looks at the byte `ahead` positions past the cursor without moving.
  std::optional<std::uint8_t> peek(std::size_t ahead = 0) const {
    if (ahead >= remaining()) return std::nullopt;
    return bytes_[pos_ + ahead];
  }
  // Everything from the cursor to the end, without moving.
  std::span<const std::uint8_t> rest() const { return bytes_.subspan(pos_); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

// Views text as bytes for the reader (HTTP heads, policy text in fuzzers).
inline std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace abox::base
