// IpAddress, Cidr and Endpoint: the address types every layer above policy
// uses. Parsing is strict because it runs on operator input and, in the DNS
// gate, on addresses taken from upstream answers.
//
// Invariants: an IpAddress is either IPv4 (4 bytes used) or IPv6 (16 bytes);
// a Cidr's base has no bits set past its prefix (parse refuses "10.0.0.1/8").
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace abox::policy {

class IpAddress {
 public:
  enum class Family : std::uint8_t { v4, v6 };

  IpAddress() = default;  // 0.0.0.0
  // From a value in host byte order: IpAddress::v4(0x7F000001) is 127.0.0.1.
  static IpAddress v4(std::uint32_t host_order);
  // From four bytes in network order.
  static IpAddress v4_bytes(const std::uint8_t bytes[4]);
  static IpAddress v6(const std::array<std::uint8_t, 16>& bytes);

  // Dotted quad (exactly four decimal parts, no leading zeros, each 0..255) or
  // RFC 4291 text (with "::" and a trailing dotted quad). No zone ids, no
  // brackets, no surrounding blanks.
  static std::optional<IpAddress> parse(std::string_view text);

  Family family() const { return family_; }
  bool is_v4() const { return family_ == Family::v4; }
  bool is_v6() const { return family_ == Family::v6; }
  // IPv4 only: the address in host byte order.
  std::uint32_t v4_value() const;
  // Network-order bytes; for IPv4 the first 4 are used, the rest are zero.
  const std::array<std::uint8_t, 16>& bytes() const { return bytes_; }
  std::size_t byte_length() const { return is_v4() ? 4 : 16; }

  // Dotted quad, or RFC 5952 canonical IPv6 text.
  std::string to_string() const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;
  friend std::strong_ordering operator<=>(const IpAddress&, const IpAddress&) = default;

 private:
  Family family_ = Family::v4;
  std::array<std::uint8_t, 16> bytes_{};
};

struct IpAddressHash {
  std::size_t operator()(const IpAddress& a) const noexcept;
};

class Cidr {
 public:
  Cidr() = default;
  // Fails (nullopt) when prefix is too long for the family or the base has
  // host bits set.
  static std::optional<Cidr> make(const IpAddress& base, unsigned prefix);
  // "10.0.0.0/8", "fc00::/7". A bare address means a single host (/32, /128).
  static std::optional<Cidr> parse(std::string_view text);

  const IpAddress& base() const { return base_; }
  unsigned prefix() const { return prefix_; }
  // False for an address of the other family.
  bool contains(const IpAddress& a) const;
  // True when every address of `inner` is inside this range.
  bool covers(const Cidr& inner) const;
  std::string to_string() const;

  friend bool operator==(const Cidr&, const Cidr&) = default;

 private:
  IpAddress base_;
  unsigned prefix_ = 0;
};

// An address and a port: "192.0.2.1:53", "[2001:db8::1]:53", or a bare
// address with the default port.
struct Endpoint {
  IpAddress address;
  std::uint16_t port = 0;

  // A destination: ADDR, ADDR:PORT, [IPV6] or [IPV6]:PORT; a missing port
  // is default_port; port 0 is refused (nobody can connect to it).
  static std::optional<Endpoint> parse(std::string_view text, std::uint16_t default_port);
  // Where to listen: ADDR:PORT or [IPV6]:PORT, the port required; port 0
  // lets the kernel pick one ("127.0.0.1:0", "[::1]:0", "0.0.0.0:0").
  static std::optional<Endpoint> parse_listen(std::string_view text);
  std::string to_string() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

}  // namespace abox::policy
