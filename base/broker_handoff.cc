#include "base/broker_handoff.h"

#include <algorithm>
#include <array>

#include "base/decimal.h"

namespace abox::base {

namespace {

constexpr std::string_view kMagic = "ABOX/";
constexpr std::string_view kVersion = "1";
constexpr std::size_t kMaxName = 253;
constexpr std::size_t kMinAddress = 2;
constexpr std::size_t kMaxAddress = 45;  // the longest IPv6 text form

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}

bool valid_instance(std::string_view s) {
  if (s.empty() || s.size() > kMaxHandoffInstance) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return is_digit(c) || is_lower(c) || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '-';
  });
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxName || s.front() == '.' || s.back() == '.') return false;
  char prev = 0;
  for (char c : s) {
    if (c == '.' && prev == '.') return false;  // an empty label
    if (!(is_digit(c) || is_lower(c) || c == '-' || c == '_' || c == '.')) return false;
    prev = c;
  }
  return true;
}

bool valid_address(std::string_view s) {
  if (s.size() < kMinAddress || s.size() > kMaxAddress) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || c == '.' || c == ':'; });
}

Result<std::uint16_t, HandoffError> handoff_port(std::string_view s) {
  auto port = parse_port(s, LeadingZeros::refused);
  if (!port) return Err{HandoffError::bad_port};
  return *port;
}

// Splits `line` at single spaces into exactly fields.size() parts; false if
// the count differs (a leading, trailing or doubled space makes an extra,
// empty field, so it is refused here or by the field's own check).
template <std::size_t N>
bool split_fields(std::string_view line, std::array<std::string_view, N>& fields) {
  std::size_t i = 0;
  while (true) {
    const std::size_t sp = line.find(' ');
    if (i == N) return false;
    fields[i++] = line.substr(0, sp);
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  return i == N;
}

}  // namespace

bool valid_handoff_instance(std::string_view s) {
  return valid_instance(s);
}

std::string_view describe(HandoffError e) {
  switch (e) {
    case HandoffError::incomplete:
      return "the hand-off line is not complete yet";
    case HandoffError::too_long:
      return "the hand-off line is longer than 512 bytes";
    case HandoffError::bad_magic:
      return "the connection does not start with an ABOX hand-off line";
    case HandoffError::bad_version:
      return "the hand-off line's version is not 1";
    case HandoffError::bad_instance:
      return "the hand-off line's instance name is invalid";
    case HandoffError::bad_name:
      return "the hand-off line's name is not a canonical DNS name";
    case HandoffError::bad_port:
      return "the hand-off line's port is not 1-65535";
    case HandoffError::bad_address:
      return "the hand-off line's address is not an IP address";
    case HandoffError::bad_syntax:
      return "the hand-off line is malformed";
  }
  return "the hand-off line is malformed";
}

Result<ParsedHandoff, HandoffError> parse_handoff(std::span<const std::uint8_t> bytes) {
  const std::size_t window = std::min(bytes.size(), kMaxHandoffLine);
  const auto* begin = bytes.data();
  const auto* end = begin + window;
  const auto* nl = std::find(begin, end, std::uint8_t{'\n'});
  // Refuse a wrong start as soon as it shows, without waiting for a line.
  const std::size_t magic_seen = std::min(window, kMagic.size());
  if (!std::equal(begin, begin + magic_seen, kMagic.begin(),
                  [](std::uint8_t b, char c) { return b == static_cast<std::uint8_t>(c); })) {
    return Err{HandoffError::bad_magic};
  }
  if (nl == end) return Err{window == kMaxHandoffLine ? HandoffError::too_long : HandoffError::incomplete};

  const std::string_view line(reinterpret_cast<const char*>(begin),  // NOLINT: bytes viewed as text
                              static_cast<std::size_t>(nl - begin));
  std::array<std::string_view, 5> f;  // version, instance, name, port, address
  const bool five = split_fields(line.substr(kMagic.size()), f);
  if (f[0] != kVersion) return Err{HandoffError::bad_version};
  if (!five) return Err{HandoffError::bad_syntax};
  const std::string_view instance = f[1];
  const std::string_view name = f[2];
  const std::string_view port = f[3];
  const std::string_view address = f[4];
  if (!valid_instance(instance)) return Err{HandoffError::bad_instance};
  if (!valid_name(name)) return Err{HandoffError::bad_name};
  auto p = handoff_port(port);
  if (!p.ok()) return Err{p.error()};
  if (!valid_address(address)) return Err{HandoffError::bad_address};

  ParsedHandoff out;
  out.handoff.instance = std::string(instance);
  out.handoff.name = std::string(name);
  out.handoff.port = p.value();
  out.handoff.address = std::string(address);
  out.consumed = line.size() + 1;
  return out;
}

Result<std::string, HandoffError> encode_handoff(const BrokerHandoff& h) {
  if (!valid_instance(h.instance)) return Err{HandoffError::bad_instance};
  if (!valid_name(h.name)) return Err{HandoffError::bad_name};
  if (h.port == 0) return Err{HandoffError::bad_port};
  if (!valid_address(h.address)) return Err{HandoffError::bad_address};
  std::string line;
  line.reserve(kMagic.size() + 8 + h.instance.size() + h.name.size() + h.address.size());
  line.append(kMagic).append(kVersion).append(" ");
  line.append(h.instance).append(" ").append(h.name).append(" ");
  line.append(std::to_string(h.port)).append(" ").append(h.address).append("\n");
  return line;
}

}  // namespace abox::base
