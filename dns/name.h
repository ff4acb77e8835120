// Domain names in DNS messages (RFC 1035 sections 3.1 and 4.1.4): the one
// reader of names from untrusted bytes, shared by the guest query parser
// (wire.cc) and the upstream answer filter (answer_filter.cc).
//
// read_name() accepts labels of 1..63 bytes, at most 255 bytes in wire form,
// and refuses label types 0x40 (extended, RFC 6891) and 0x80. A compression
// pointer must land after the header and strictly before the start of the
// run of labels it ends (for the first pointer, where the name began; after
// that, where the previous pointer landed): targets strictly decrease, which
// rules out loops on its own, and at most 16 pointers are followed per name.
// Nothing is copied before it is checked, so a WireName never holds more than
// 255 bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/byte_reader.h"

namespace abox::dns {

inline constexpr std::size_t kMaxWireName = 255;  // RFC 1035 section 2.3.4
inline constexpr std::size_t kMaxLabel = 63;
inline constexpr int kMaxNamePointers = 16;

using NameView = std::span<const std::uint8_t>;

// A name in uncompressed wire form: length-prefixed labels ending with the
// root label. Invariant: well-formed as read_name checks, size <= 255.
struct WireName {
  std::array<std::uint8_t, kMaxWireName> bytes{};
  std::uint8_t size = 0;
  NameView view() const { return {bytes.data(), size}; }
};

enum class NameError : std::uint8_t {
  truncated,    // the name runs past the end of the message
  bad_label,    // a label over 63 bytes, a name over 255, or a bad label type
  bad_pointer,  // a pointer that does not point strictly backwards past the header, or more than 16
};

// Reads the name at the reader's cursor; the reader spans the whole message
// (pointers are offsets into it). On success the cursor is just past the name
// as it appears in place (after its first pointer, if any) and `out`, when
// not null, holds the uncompressed name. On failure the cursor is unspecified.
std::optional<NameError> read_name(base::ByteReader& r, WireName* out);

// ASCII case folding; safe over a whole wire name (length bytes are <= 63,
// below 'A').
inline std::uint8_t fold_ascii(std::uint8_t c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

// Equal as DNS names: same labels, ASCII case ignored (RFC 4343).
bool names_equal(NameView a, NameView b);

// Presentation form with the final dot ("www.example.com.", "." for the
// root). Bytes outside [A-Za-z0-9_-] are escaped as \DDD (and '.' and '\'
// inside a label as "\." and "\\"), so the text is safe to log. `wire` must
// be well-formed (a WireName's view).
std::string name_to_text(NameView wire);

}  // namespace abox::dns
