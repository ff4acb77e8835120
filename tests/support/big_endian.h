// Network byte order on a growing byte vector, for tests that build or read
// packets by hand: put16/put32 append, get16/get32 read at an offset (and
// throw std::out_of_range past the end, through vector::at, so a short
// packet fails its test instead of reading past it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace abox::testing {

inline void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
inline void put32(std::vector<std::uint8_t>& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v));
}
inline std::uint16_t get16(const std::vector<std::uint8_t>& b, std::size_t at) {
  return static_cast<std::uint16_t>((b.at(at) << 8) | b.at(at + 1));
}
inline std::uint32_t get32(const std::vector<std::uint8_t>& b, std::size_t at) {
  return (std::uint32_t{get16(b, at)} << 16) | get16(b, at + 2);
}

}  // namespace abox::testing
