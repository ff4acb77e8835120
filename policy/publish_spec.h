// PublishSpec: one published port, `[HOST_ADDR:]HOST_PORT:GUEST_PORT[/udp]`
// (abox-net run --publish, abox run -p): the host listens on
// HOST_ADDR:HOST_PORT and abox-net forwards what arrives there to the
// guest's GUEST_PORT through its own stack.
//
// Invariants of a parsed spec: both ports are 1..65535; the host address is
// an IPv4 dotted quad or a bracketed IPv6 address ("[::1]:8080:80"), and is
// 127.0.0.1 when none was written: the wildcard 0.0.0.0 (or [::]) is never a
// default, only taken when spelled out. A list (check_publish_list()) never
// holds two specs that would listen on the same host address, port and
// protocol, nor a wildcard beside a specific address on the same port.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/ip_address.h"

namespace abox::policy {

struct PublishSpec {
  enum class Protocol : std::uint8_t { tcp, udp };
  IpAddress host_address = IpAddress::v4(0x7F000001);
  std::uint16_t host_port = 0;
  std::uint16_t guest_port = 0;
  Protocol protocol = Protocol::tcp;

  // The spec as an operator would write it, the address always spelled out:
  // "127.0.0.1:8080:80", "[::1]:5353:53/udp".
  std::string to_string() const;
  // The host side alone: "127.0.0.1:8080" or "[::1]:8080".
  std::string host_endpoint() const;
  friend bool operator==(const PublishSpec&, const PublishSpec&) = default;
};

// Why a spec was refused; describe() reads as the rest of a sentence
// ("--publish '...': expected ...").
enum class PublishError : std::uint8_t {
  empty,           // "" or an empty part ("8080::80", ":80", "8080:")
  too_many_parts,  // more than ADDR:HOST:GUEST
  bad_address,     // not an IPv4 dotted quad or a bracketed IPv6 address
  bad_host_port,   // not 1..65535 in decimal
  bad_guest_port,  // the same for the guest's port
  bad_protocol,    // a suffix other than /tcp or /udp
  duplicate,       // check_publish_list(): the same host port twice
};
std::string_view describe(PublishError e);

// Parses one spec. Strict: no blanks, no signs, no leading '+', ports in
// decimal without leading zeros beyond the value (parse_port's rules).
base::Result<PublishSpec, PublishError> parse_publish_spec(std::string_view text);

// Checks a whole list: the index of the first spec that clashes with an
// earlier one (the same protocol and host port on the same address, or on
// a wildcard and a specific address), or -1 when none does.
int first_publish_clash(std::span<const PublishSpec> specs);

}  // namespace abox::policy
