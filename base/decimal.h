// Numbers from text, strictly: the whole text is the number's digits (no
// sign, no blank, no "0x", nothing after), read with std::from_chars, so a
// value past the type's range is refused instead of wrapping. One place for
// what about ten hand-written digit loops did, each with its own overflow
// guard (or none).
//
// Leading zeros are a choice of the caller: a wire format that must have one
// spelling per value (an IPv4 part, a hand-off port) refuses them; "0" alone
// is always one number.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>

namespace abox::base {

enum class LeadingZeros : bool { allowed, refused };

template <std::unsigned_integral T>
std::optional<T> parse_decimal(std::string_view text, LeadingZeros zeros = LeadingZeros::allowed) {
  if (text.empty()) return std::nullopt;
  if (zeros == LeadingZeros::refused && text.size() > 1 && text.front() == '0') return std::nullopt;
  T value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// parse_decimal(), then lo <= value <= hi.
template <std::unsigned_integral T>
std::optional<T> parse_decimal_in(std::string_view text, T lo, T hi,
                                  LeadingZeros zeros = LeadingZeros::allowed) {
  auto v = parse_decimal<T>(text, zeros);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

// Hex digits only (either case), no "0x".
template <std::unsigned_integral T>
std::optional<T> parse_hex(std::string_view text) {
  if (text.empty()) return std::nullopt;
  T value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, 16);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A TCP or UDP port: 1 to 65535 in decimal.
inline std::optional<std::uint16_t> parse_port(std::string_view text,
                                               LeadingZeros zeros = LeadingZeros::allowed) {
  auto v = parse_decimal_in<std::uint32_t>(text, 1, 65535, zeros);
  if (!v) return std::nullopt;
  return static_cast<std::uint16_t>(*v);
}

}  // namespace abox::base
