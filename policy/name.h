// Domain names in canonical form, as policy files and the DNS gate compare
// them.
//
// Canonical form: ASCII, lower case, no trailing dot; labels of 1..63 bytes
// from [a-z0-9_-]; at most 253 bytes in all. Input may end in one dot
// ("github.com." is "github.com"). Internationalized names must be written as
// A-labels ("xn--..."); a byte >= 0x80 is a U-label and an error. A wildcard
// pattern is "*." followed by a canonical name and matches names with at least
// one more label (see NameMatcher).
//
// CanonicalName holds its text inline so the data path can canonicalize a name
// from the wire without allocating.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::policy {

enum class NameError : std::uint8_t {
  empty,               // "" or "."
  too_long,            // more than 253 bytes (a wildcard pattern counts its "*.")
  empty_label,         // "a..b", ".a", "a.b.."
  label_too_long,      // a label over 63 bytes
  not_ascii,           // a byte >= 0x80: write IDNs as A-labels (xn--)
  bad_character,       // anything but letters, digits, '-' and '_' in a label
  misplaced_wildcard,  // '*' anywhere but as the whole first label of a pattern
};

// A sentence fragment for error messages: "a label is longer than 63 bytes".
std::string_view describe(NameError e);

inline constexpr std::size_t kMaxNameLength = 253;
inline constexpr std::size_t kMaxLabelLength = 63;

class CanonicalName {
 public:
  // Validates and folds a name (no wildcard allowed).
  static base::Result<CanonicalName, NameError> from(std::string_view text);

  std::string_view view() const { return {buf_.data(), len_}; }
  std::string str() const { return std::string(view()); }

 private:
  std::array<char, kMaxNameLength + 1> buf_{};
  std::uint8_t len_ = 0;
};

// A name or a wildcard pattern from a policy file, canonicalized.
struct NamePattern {
  std::string base;  // canonical name; for "*.github.com" this is "github.com"
  bool wildcard = false;

  static base::Result<NamePattern, NameError> parse(std::string_view text);
  std::string to_string() const { return wildcard ? "*." + base : base; }
  friend bool operator==(const NamePattern&, const NamePattern&) = default;
};

}  // namespace abox::policy
