// Text parsing is strict and allocation-free: every scan is an index checked
// against size(), so it is safe on bytes from the network. Only the plain
// forms are taken; the legacy ones that inet_aton still reads would let one
// address hide behind another spelling in a policy file or an upstream
// answer ("010.0.0.1" is 8.0.0.1 to it, "127.1" is 127.0.0.1, "0x7f.1" too).
// Zone ids are refused because they name an interface of this host, and
// blanks and brackets because they belong to the syntax around an address.
//
// Formatting follows RFC 5952 so that the same address always prints the same
// way in events, explain output and tests.
#include "policy/ip_address.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "base/decimal.h"

namespace abox::policy {
namespace {

using Bytes = std::array<std::uint8_t, 16>;

[[noreturn]] void misuse(const char* what) {
  std::fprintf(stderr, "abox: IpAddress misuse: %s\n", what);
  std::abort();
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A decimal without sign, blanks or leading zeros ("0" itself is fine), at
// most `max`. The length cap keeps the accumulator far from overflow.
std::optional<unsigned> parse_decimal(std::string_view text, unsigned max) {
  return base::parse_decimal_in<unsigned>(text, 0, max, base::LeadingZeros::refused);
}

// Exactly four parts of 1..3 digits, each 0..255, no leading zeros.
std::optional<std::array<std::uint8_t, 4>> parse_dotted_quad(std::string_view text) {
  std::array<std::uint8_t, 4> out{};
  std::size_t i = 0;
  for (std::size_t part = 0; part < 4; ++part) {
    if (part > 0) {
      if (i == text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
    std::size_t start = i;
    while (i < text.size() && is_digit(text[i]) && i - start < 4) ++i;
    auto value = parse_decimal(text.substr(start, i - start), 255);
    if (!value) return std::nullopt;
    out[part] = static_cast<std::uint8_t>(*value);
  }
  if (i != text.size()) return std::nullopt;
  return out;
}

// RFC 4291 section 2.2: groups of 1..4 hex digits, at most one "::" standing
// for at least one zero group, and optionally a dotted quad as the last 32
// bits. Nothing may follow the quad.
std::optional<Bytes> parse_v6(std::string_view text) {
  std::array<std::uint16_t, 8> groups{};
  std::size_t count = 0;           // groups written so far
  std::optional<std::size_t> gap;  // index in `groups` where "::" stands
  std::size_t i = 0;

  if (text.size() >= 2 && text[0] == ':' && text[1] == ':') {
    gap = 0;
    i = 2;
    if (i == text.size()) return Bytes{};
  } else if (!text.empty() && text[0] == ':') {
    return std::nullopt;
  }

  for (;;) {
    std::size_t start = i;
    while (i < text.size() && hex_value(text[i]) >= 0) ++i;
    if (i < text.size() && text[i] == '.') {
      if (count + 2 > 8) return std::nullopt;
      auto quad = parse_dotted_quad(text.substr(start));
      if (!quad) return std::nullopt;
      groups[count++] = static_cast<std::uint16_t>((*quad)[0] << 8 | (*quad)[1]);
      groups[count++] = static_cast<std::uint16_t>((*quad)[2] << 8 | (*quad)[3]);
      break;
    }
    std::size_t digits = i - start;
    if (digits == 0 || digits > 4 || count == 8) return std::nullopt;
    unsigned group = 0;
    for (std::size_t k = start; k < i; ++k) group = group << 4 | static_cast<unsigned>(hex_value(text[k]));
    groups[count++] = static_cast<std::uint16_t>(group);

    if (i == text.size()) break;
    if (text[i] != ':') return std::nullopt;
    ++i;
    if (i < text.size() && text[i] == ':') {
      if (gap) return std::nullopt;  // a second "::"
      gap = count;
      ++i;
      if (i == text.size()) break;
    } else if (i == text.size()) {
      return std::nullopt;  // a trailing single ':'
    }
  }

  if (gap ? count > 7 : count != 8) return std::nullopt;
  // Slide the groups after "::" to the end; the zeros between are the gap.
  std::array<std::uint16_t, 8> full{};
  std::size_t head = gap.value_or(count);
  std::size_t tail = count - head;
  for (std::size_t k = 0; k < head; ++k) full[k] = groups[k];
  for (std::size_t k = 0; k < tail; ++k) full[8 - tail + k] = groups[head + k];

  Bytes out{};
  for (std::size_t k = 0; k < 8; ++k) {
    out[2 * k] = static_cast<std::uint8_t>(full[k] >> 8);
    out[2 * k + 1] = static_cast<std::uint8_t>(full[k] & 0xFF);
  }
  return out;
}

// Appends `value` in `base`; callers pass values of at most five digits.
void append_number(std::string& out, unsigned value, int base = 10) {
  std::array<char, 8> buf{};
  auto result = std::to_chars(buf.data(), buf.data() + buf.size(), value, base);
  out.append(buf.data(), result.ptr);
}

void append_dotted_quad(std::string& out, std::span<const std::uint8_t, 4> b) {
  for (std::size_t k = 0; k < 4; ++k) {
    if (k > 0) out += '.';
    append_number(out, b[k]);
  }
}

bool is_v4_mapped(const Bytes& b) {
  for (std::size_t k = 0; k < 10; ++k) {
    if (b[k] != 0) return false;
  }
  return b[10] == 0xFF && b[11] == 0xFF;
}

// RFC 5952 section 4: lower-case hex without leading zeros; the longest run
// of two or more zero groups (the first one on a tie) becomes "::".
// Section 5: IPv4-mapped addresses keep their dotted quad.
std::string format_v6(const Bytes& b) {
  std::string out;
  out.reserve(45);
  if (is_v4_mapped(b)) {
    out = "::ffff:";
    append_dotted_quad(out, std::span(b).last<4>());
    return out;
  }
  std::array<unsigned, 8> g{};
  for (std::size_t k = 0; k < 8; ++k) g[k] = static_cast<unsigned>(b[2 * k] << 8 | b[2 * k + 1]);

  std::size_t best_start = 8;  // 8: no run worth compressing
  std::size_t best_len = 0;
  for (std::size_t k = 0; k < 8;) {
    if (g[k] != 0) {
      ++k;
      continue;
    }
    std::size_t start = k;
    while (k < 8 && g[k] == 0) ++k;
    if (k - start > best_len) {
      best_start = start;
      best_len = k - start;
    }
  }
  if (best_len < 2) best_start = 8;

  for (std::size_t k = 0; k < 8; ++k) {
    if (k == best_start) {
      out += "::";
      k += best_len - 1;
      continue;
    }
    if (k > 0 && k != best_start + best_len) out += ':';
    append_number(out, g[k], 16);
  }
  return out;
}

std::size_t byte_length_of(IpAddress::Family f) {
  return f == IpAddress::Family::v4 ? 4 : 16;
}

// True when the first `prefix` bits of a and b agree.
bool same_prefix(const Bytes& a, const Bytes& b, unsigned prefix) {
  std::size_t whole = prefix / 8;
  if (std::memcmp(a.data(), b.data(), whole) != 0) return false;
  unsigned rest = prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<std::uint8_t>(0xFF << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

bool host_bits_clear(const Bytes& b, unsigned prefix, std::size_t length) {
  std::size_t k = prefix / 8;
  unsigned rest = prefix % 8;
  if (rest != 0) {
    auto host_mask = static_cast<std::uint8_t>(0xFF >> rest);
    if ((b[k] & host_mask) != 0) return false;
    ++k;
  }
  for (; k < length; ++k) {
    if (b[k] != 0) return false;
  }
  return true;
}

}  // namespace

IpAddress IpAddress::v4(std::uint32_t host_order) {
  IpAddress a;
  a.bytes_[0] = static_cast<std::uint8_t>(host_order >> 24);
  a.bytes_[1] = static_cast<std::uint8_t>(host_order >> 16);
  a.bytes_[2] = static_cast<std::uint8_t>(host_order >> 8);
  a.bytes_[3] = static_cast<std::uint8_t>(host_order);
  return a;
}

IpAddress IpAddress::v4_bytes(const std::uint8_t bytes[4]) {
  IpAddress a;
  std::memcpy(a.bytes_.data(), bytes, 4);
  return a;
}

IpAddress IpAddress::v6(const std::array<std::uint8_t, 16>& bytes) {
  IpAddress a;
  a.family_ = Family::v6;
  a.bytes_ = bytes;
  return a;
}

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.find(':') != std::string_view::npos) {
    auto bytes = parse_v6(text);
    if (!bytes) return std::nullopt;
    return v6(*bytes);
  }
  auto quad = parse_dotted_quad(text);
  if (!quad) return std::nullopt;
  return v4_bytes(quad->data());
}

std::uint32_t IpAddress::v4_value() const {
  if (!is_v4()) misuse("v4_value() on an IPv6 address");
  return std::uint32_t{bytes_[0]} << 24 | std::uint32_t{bytes_[1]} << 16 | std::uint32_t{bytes_[2]} << 8 |
         std::uint32_t{bytes_[3]};
}

std::string IpAddress::to_string() const {
  if (is_v6()) return format_v6(bytes_);
  std::string out;
  out.reserve(15);
  append_dotted_quad(out, std::span(bytes_).first<4>());
  return out;
}

std::size_t IpAddressHash::operator()(const IpAddress& a) const noexcept {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  std::memcpy(&hi, a.bytes().data(), 8);
  std::memcpy(&lo, a.bytes().data() + 8, 8);
  // Mix both halves so that IPv4 addresses (whose second half is zero) and
  // IPv6 addresses differing only in the interface id still spread.
  std::uint64_t h = hi * 0x9E3779B97F4A7C15ULL ^ lo ^ static_cast<std::uint64_t>(a.family());
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return static_cast<std::size_t>(h);
}

std::optional<Cidr> Cidr::make(const IpAddress& base, unsigned prefix) {
  std::size_t length = byte_length_of(base.family());
  if (prefix > length * 8) return std::nullopt;
  if (!host_bits_clear(base.bytes(), prefix, length)) return std::nullopt;
  Cidr c;
  c.base_ = base;
  c.prefix_ = prefix;
  return c;
}

std::optional<Cidr> Cidr::parse(std::string_view text) {
  std::size_t slash = text.find('/');
  auto base = IpAddress::parse(text.substr(0, slash));
  if (!base) return std::nullopt;
  auto max = static_cast<unsigned>(byte_length_of(base->family()) * 8);
  if (slash == std::string_view::npos) return make(*base, max);
  auto prefix = parse_decimal(text.substr(slash + 1), max);
  if (!prefix) return std::nullopt;
  return make(*base, *prefix);
}

bool Cidr::contains(const IpAddress& a) const {
  return a.family() == base_.family() && same_prefix(a.bytes(), base_.bytes(), prefix_);
}

bool Cidr::covers(const Cidr& inner) const {
  return inner.prefix_ >= prefix_ && contains(inner.base_);
}

std::string Cidr::to_string() const {
  std::string out = base_.to_string();
  out += '/';
  append_number(out, prefix_);
  return out;
}

namespace {

// Endpoint::parse() and parse_listen(): the same address and port syntax;
// a listener must name its port and may name 0, a destination may not.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::uint16_t default_port, bool listen) {
  std::string_view address_text = text;
  std::optional<std::string_view> port_text;
  bool bracketed = !text.empty() && text[0] == '[';

  if (bracketed) {
    // RFC 3986 IP-literal: brackets hold an IPv6 address, and only they let
    // an IPv6 address carry a port.
    std::size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    address_text = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port_text = rest.substr(1);
    }
  } else if (std::size_t colon = text.find(':');
             colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
    // One colon separates an IPv4 address from its port. More than one is a
    // bare IPv6 address: "2001:db8::1:53" is an address, not an address and
    // a port.
    address_text = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }

  auto address = IpAddress::parse(address_text);
  if (!address) return std::nullopt;
  if (bracketed && !address->is_v6()) return std::nullopt;

  Endpoint e{*address, default_port};
  if (!port_text && listen) return std::nullopt;
  if (port_text) {
    // Port 0 is not a destination anyone can connect to; a listener given
    // port 0 lets the kernel pick one.
    auto port = parse_decimal(*port_text, 65535);
    if (!port || (*port == 0 && !listen)) return std::nullopt;
    e.port = static_cast<std::uint16_t>(*port);
  }
  return e;
}

}  // namespace

std::optional<Endpoint> Endpoint::parse(std::string_view text, std::uint16_t default_port) {
  return parse_endpoint(text, default_port, false);
}

std::optional<Endpoint> Endpoint::parse_listen(std::string_view text) {
  return parse_endpoint(text, 0, true);
}

std::string Endpoint::to_string() const {
  // Built by appending to an empty string: assigning a one-character
  // literal first (out = "[") made GCC 12 at -O3 report a false -Wrestrict
  // overlap in basic_string::assign (GCC bug 105329).
  std::string out;
  if (address.is_v6()) {
    out.push_back('[');
    out.append(address.to_string());
    out.append("]:");
  } else {
    out.append(address.to_string());
    out.push_back(':');
  }
  append_number(out, port);
  return out;
}

}  // namespace abox::policy
