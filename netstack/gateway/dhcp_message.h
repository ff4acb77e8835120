// DhcpClientMessage: the parts of a DHCPv4 client message (RFC 2131, RFC
// 2132) the gateway's DHCP server needs, parsed from untrusted bytes.
// Sans-I/O, no allocation.
//
// parse_dhcp_client_message() reads the BOOTP payload of a UDP datagram
// (everything after the UDP header) through one base::ByteReader and checks:
//   - op is BOOTREQUEST (1), htype is Ethernet (1), hlen is 6 (a hlen above
//     16, the size of chaddr, is its own error);
//   - the fixed 236-byte header and the magic cookie are all there;
//   - options: pads (0) are skipped one byte at a time, however many; every
//     other option's length byte and data lie inside the message; an end
//     option (255) is required (bytes after it are padding and not read);
//   - message type (53): exactly once, one byte, a known client type
//     (DISCOVER, REQUEST, DECLINE, RELEASE, INFORM);
//   - requested address (50) and server identifier (54): at most once each,
//     four bytes each;
//   - option overload (52) is refused: the gateway never reads sname or file
//     for options, and no client needs to put them there.
// Every other option is skipped unread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "base/result.h"

namespace abox::netstack {

enum class DhcpMessageType : std::uint8_t {
  discover = 1,
  request = 3,
  decline = 4,
  release = 7,
  inform = 8,
};

struct DhcpClientMessage {
  DhcpMessageType type = DhcpMessageType::discover;
  std::uint32_t xid = 0;
  std::uint16_t flags = 0;   // bit 15: the client wants broadcast replies
  std::uint32_t ciaddr = 0;  // addresses in host order
  std::uint32_t giaddr = 0;
  std::array<std::uint8_t, 6> chaddr{};
  std::optional<std::uint32_t> requested_address;  // option 50
  std::optional<std::uint32_t> server_id;          // option 54

  bool wants_broadcast() const { return (flags & 0x8000) != 0; }
};

enum class DhcpParseError : std::uint8_t {
  not_a_request,            // op is not BOOTREQUEST
  not_ethernet,             // htype is not 1
  hardware_length_over_16,  // hlen larger than chaddr
  hardware_length_not_6,    // an Ethernet address is 6 bytes
  truncated_header,         // shorter than the fixed header and the cookie
  no_magic_cookie,          // not 99.130.83.99
  option_runs_past_end,     // a length byte or an option's data is missing
  no_end_option,            // the options stop without 255
  option_overload,          // option 52: refused
  no_message_type,          // option 53 is missing
  duplicate_option,         // 53, 50 or 54 appears twice
  bad_option_length,        // 53 is not 1 byte, 50 or 54 not 4
  not_a_client_type,        // 53 holds a server's or an unknown type
};

// What an error value means, as a short phrase for logs and tests.
const char* to_string(DhcpParseError e);

// The BOOTP header's size up to the options, the magic cookie included.
inline constexpr std::size_t kDhcpFixedSize = 240;

base::Result<DhcpClientMessage, DhcpParseError> parse_dhcp_client_message(
    std::span<const std::uint8_t> bootp);

}  // namespace abox::netstack
