// Domain names in DNS messages; see name.h for the rules read_name checks.
#include "dns/name.h"

#include <algorithm>

#include "dns/wire.h"

namespace abox::dns {

namespace {

constexpr std::uint8_t kLabelTypeMask = 0xC0;
constexpr std::uint8_t kPointerType = 0xC0;
constexpr std::uint16_t kPointerOffsetMask = 0x3FFF;

}  // namespace

std::optional<NameError> read_name(base::ByteReader& r, WireName* out) {
  std::size_t run_start = r.position();  // where the current run of labels began
  std::size_t resume = 0;                // where the cursor goes once the name ends
  bool jumped = false;
  int pointers = 0;
  std::size_t wire_len = 0;  // without the root label
  for (;;) {
    auto length = r.u8();
    if (!length) return NameError::truncated;
    const std::uint8_t type = *length & kLabelTypeMask;
    if (type == kPointerType) {
      auto low = r.u8();
      if (!low) return NameError::truncated;
      const std::size_t target = ((std::size_t{*length} << 8) | *low) & kPointerOffsetMask;
      if (++pointers > kMaxNamePointers) return NameError::bad_pointer;
      if (target < kHeaderSize || target >= run_start) return NameError::bad_pointer;
      if (!jumped) {
        resume = r.position();
        jumped = true;
      }
      // target < run_start <= size(), so the seek cannot fail.
      if (!r.seek(target)) return NameError::truncated;
      run_start = target;
      continue;
    }
    if (type != 0) return NameError::bad_label;  // 0x40 (extended) and 0x80: undefined or obsolete
    if (*length == 0) break;
    if (*length > kMaxLabel) return NameError::bad_label;
    // This label's length byte and bytes, plus the root label still to come.
    if (wire_len + 1 + *length + 1 > kMaxWireName) return NameError::bad_label;
    auto label = r.bytes(*length);
    if (!label) return NameError::truncated;
    if (out != nullptr) {
      out->bytes[wire_len] = *length;
      std::copy(label->begin(), label->end(), out->bytes.begin() + static_cast<std::ptrdiff_t>(wire_len + 1));
    }
    wire_len += 1 + *length;
  }
  if (out != nullptr) {
    out->bytes[wire_len] = 0;
    out->size = static_cast<std::uint8_t>(wire_len + 1);  // <= 255 by the check above
  }
  if (jumped && !r.seek(resume)) return NameError::truncated;
  return std::nullopt;
}

bool names_equal(NameView a, NameView b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (fold_ascii(a[i]) != fold_ascii(b[i])) return false;
  return true;
}

std::string name_to_text(NameView wire) {
  std::string text;
  std::size_t at = 0;
  while (at < wire.size() && wire[at] != 0) {
    const std::size_t length = wire[at];
    for (std::size_t i = at + 1; i <= at + length && i < wire.size(); ++i) {
      const std::uint8_t c = wire[i];
      const bool plain =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (plain) {
        text.push_back(static_cast<char>(c));
      } else if (c == '.' || c == '\\') {
        text.push_back('\\');
        text.push_back(static_cast<char>(c));
      } else {
        text.push_back('\\');
        text.push_back(static_cast<char>('0' + c / 100));
        text.push_back(static_cast<char>('0' + c / 10 % 10));
        text.push_back(static_cast<char>('0' + c % 10));
      }
    }
    text.push_back('.');
    at += 1 + length;
  }
  if (text.empty()) text.push_back('.');  // the root
  return text;
}

}  // namespace abox::dns
