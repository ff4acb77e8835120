// Dhcpv6ClientMessage: the parts of a DHCPv6 client message (RFC 8415) that
// the gateway's stateless server (dhcpv6_server.h) needs, parsed from
// untrusted bytes; and the one message it writes, a Reply naming the DNS
// server (RFC 3646). Sans-I/O; the parser does not allocate.
//
// parse_dhcpv6_client_message() reads the UDP payload (everything after the
// UDP header) through one base::ByteReader and checks:
//   - the 4-byte header is all there: a message type a client sends
//     (Solicit, Request, Confirm, Renew, Rebind, Release, Decline,
//     Information-Request); a server's or a relay's type, or one RFC 8415
//     does not define for a client, is refused;
//   - options: each 4-byte option header and its data lie inside the message
//     (a length past the end is refused, however large);
//   - client identifier (1) and server identifier (2): at most once each,
//     1 to 130 bytes (a DUID's type and at most 128 bytes, RFC 8415 section
//     11.1); a zero-length identifier is refused;
//   - option request (6): at most once, an even length; it is read for DNS
//     recursive name servers (23) only;
//   - elapsed time (8): at most once, exactly 2 bytes;
//   - IA_NA (3), IA_TA (4), IA_PD (25): noted (an Information-Request with
//     one is discarded, RFC 8415 section 16.12), their contents unread.
// Every other option is skipped by its length, unread. The number of options
// is bounded by the message's size (each takes at least 4 bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/result.h"

namespace abox::netstack {

enum class Dhcpv6MessageType : std::uint8_t {
  solicit = 1,
  request = 3,
  confirm = 4,
  renew = 5,
  rebind = 6,
  release = 8,
  decline = 9,
  information_request = 11,
};

// Message type 7 (RFC 8415 section 7.3), what the server sends.
inline constexpr std::uint8_t kDhcpv6ReplyType = 7;
// Option codes (RFC 8415 section 21, RFC 3646 section 3).
inline constexpr std::uint16_t kDhcpv6OptClientId = 1;
inline constexpr std::uint16_t kDhcpv6OptServerId = 2;
inline constexpr std::uint16_t kDhcpv6OptDnsServers = 23;
// The longest DUID: a 2-byte type and at most 128 bytes (RFC 8415 section 11.1).
inline constexpr std::size_t kDhcpv6MaxDuid = 130;

struct Dhcpv6ClientMessage {
  Dhcpv6MessageType type = Dhcpv6MessageType::solicit;
  std::uint32_t transaction_id = 0;         // 24 bits
  std::span<const std::uint8_t> client_id;  // the DUID, empty when absent
  std::span<const std::uint8_t> server_id;  // the DUID, empty when absent
  bool requests_dns_servers = false;        // option 6 names 23
  bool has_identity_association = false;    // IA_NA, IA_TA or IA_PD
  std::optional<std::uint16_t> elapsed_centiseconds;
};

enum class Dhcpv6ParseError : std::uint8_t {
  truncated_header,         // shorter than type and transaction id
  not_a_client_type,        // a server's, a relay's or an undefined type
  option_header_truncated,  // fewer than 4 bytes left for an option's code and length
  option_runs_past_end,     // an option's length goes past the message
  duplicate_option,         // 1, 2, 6 or 8 appears twice
  bad_option_length,        // an identifier of 0 or over 130 bytes, 6 odd, 8 not 2
};

// What an error value means, as a short phrase for logs and tests.
const char* to_string(Dhcpv6ParseError e);

base::Result<Dhcpv6ClientMessage, Dhcpv6ParseError> parse_dhcpv6_client_message(
    std::span<const std::uint8_t> payload);

// A DUID-LL (RFC 8415 section 11.4): type 3, hardware type 1 (Ethernet), the MAC.
std::array<std::uint8_t, 10> dhcpv6_duid_ll(const std::array<std::uint8_t, 6>& mac);

// Writes a Reply into `out` (cleared first): type 7, the transaction id,
// server identifier `server_duid`, client identifier `client_id` when it is
// not empty, DNS recursive name servers naming `dns_server`; nothing else.
// Preconditions: client_id.size() <= kDhcpv6MaxDuid (what the parser lets
// through), server_duid likewise.
void write_dhcpv6_reply(std::vector<std::uint8_t>& out, std::uint32_t transaction_id,
                        std::span<const std::uint8_t> server_duid, std::span<const std::uint8_t> client_id,
                        const std::array<std::uint8_t, 16>& dns_server);

}  // namespace abox::netstack
