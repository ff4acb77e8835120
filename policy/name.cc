// Name canonicalization. CanonicalName::from runs on the data path for every
// name the guest asks about, so it makes one pass over the bytes with a
// 256-entry table and never allocates; NamePattern::parse runs on policy
// files only and reuses it.
//
// Checks, in order: at most one trailing dot is dropped; the rest must be
// 1..253 bytes (length first, so the copy into the inline buffer is
// bounded); then each byte, left to right, must be a letter, digit, '-', '_'
// or a dot between two non-empty labels of at most 63 bytes. The first
// failure is the one reported.
#include "policy/name.h"

#include <array>
#include <cstddef>

namespace abox::policy {

using base::Err;

namespace {

// Per byte: its canonical form, or 0 for a byte that may not appear in a
// name. The dot maps to itself and is told apart from label bytes by value.
constexpr std::array<char, 256> make_fold_table() {
  std::array<char, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = static_cast<char>(c);
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = static_cast<char>(c - 'A' + 'a');
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = static_cast<char>(c);
  t['-'] = '-';
  t['_'] = '_';
  t['.'] = '.';
  return t;
}
constexpr std::array<char, 256> kFold = make_fold_table();

// Only reached for a byte the table refuses, so the error path pays for the
// distinction and the common path does not.
NameError classify_bad_byte(unsigned char c) {
  if (c >= 0x80) return NameError::not_ascii;
  if (c == '*') return NameError::misplaced_wildcard;
  return NameError::bad_character;
}

std::string_view drop_one_trailing_dot(std::string_view text) {
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  return text;
}

}  // namespace

std::string_view describe(NameError e) {
  switch (e) {
    case NameError::empty:
      return "the name is empty";
    case NameError::too_long:
      return "the name is longer than 253 bytes";
    case NameError::empty_label:
      return "the name has an empty label (two dots in a row, or a leading dot)";
    case NameError::label_too_long:
      return "a label is longer than 63 bytes";
    case NameError::not_ascii:
      return "the name has a non-ASCII byte (write internationalized names as xn-- A-labels)";
    case NameError::bad_character:
      return "a label has a character other than a letter, digit, '-' or '_'";
    case NameError::misplaced_wildcard:
      return "'*' may only be the whole first label of a pattern, as in \"*.example.com\"";
  }
  // Only reachable through a cast from an out-of-range integer.
  return "the name is invalid";
}

base::Result<CanonicalName, NameError> CanonicalName::from(std::string_view text) {
  text = drop_one_trailing_dot(text);
  if (text.empty()) return Err{NameError::empty};
  if (text.size() > kMaxNameLength) return Err{NameError::too_long};

  CanonicalName name;
  std::size_t label_length = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const char folded = kFold[byte];
    if (folded == '.') {
      if (label_length == 0) return Err{NameError::empty_label};
      label_length = 0;
    } else if (folded == 0) {
      return Err{classify_bad_byte(byte)};
    } else if (++label_length > kMaxLabelLength) {
      return Err{NameError::label_too_long};
    }
    name.buf_[i] = folded;
  }
  // A second trailing dot ("a.com..") survives the strip and lands here.
  if (label_length == 0) return Err{NameError::empty_label};
  name.len_ = static_cast<std::uint8_t>(text.size());
  return name;
}

// Wildcard rule: "*." then a valid name of at least one label, so "*.com" is
// accepted here (whether a policy may say it is Policy's call, not syntax's).
// The whole pattern, "*." included, must fit in 253 bytes: a longer one could
// never match, since every name it matches is at least that long.
base::Result<NamePattern, NameError> NamePattern::parse(std::string_view text) {
  if (text.empty() || text.front() != '*') {
    auto name = CanonicalName::from(text);
    if (!name) return Err{name.error()};
    return NamePattern{name->str(), false};
  }

  std::string_view rest = text.substr(1);
  // "*", "*a.b", "**.b": the star is not a whole label.
  if (rest.empty() || rest.front() != '.') return Err{NameError::misplaced_wildcard};
  rest.remove_prefix(1);
  // "*." has a wildcard and nothing for it to sit on.
  if (rest.empty()) return Err{NameError::misplaced_wildcard};

  auto base_name = CanonicalName::from(rest);
  if (!base_name) {
    // "*.." : the base is "." and the real fault is the empty second label.
    if (base_name.error() == NameError::empty) return Err{NameError::empty_label};
    return Err{base_name.error()};
  }
  if (base_name->view().size() + 2 > kMaxNameLength) return Err{NameError::too_long};
  return NamePattern{base_name->str(), true};
}

}  // namespace abox::policy
