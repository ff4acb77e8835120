// DHCPv4 as box-guest's own client speaks it (RFC 2131, RFC 2132): the
// DISCOVER and REQUEST it sends and the OFFER, ACK or NAK it reads back.
// Sans-I/O: whole IPv4 packets in and out, because the client talks over an
// AF_PACKET socket on eth0 before eth0 has an address (the kernel's IP layer
// would drop a reply unicast to an address it does not have yet; the gateway,
// netstack/gateway/dhcp_server.cc, unicasts to the offered address unless the client
// asks for broadcast, and passt always unicasts).
//
// What it sends: 0.0.0.0:68 -> 255.255.255.255:67, IPv4 and UDP checksums
// set, a BOOTREQUEST with the client's MAC in chaddr, the broadcast flag
// clear, options 53 (type), 55 (asks for mask, router, DNS, MTU, lease,
// server id), 57 (max message size 1500), and for REQUEST 50 (the offered
// address) and 54 (the server that offered it); padded to 300 bytes.
//
// What parse_dhcp_reply() checks, every read through one base::ByteReader:
//   IPv4: version 4, header length 20..60 inside the packet, total length
//     inside the packet and holding the header, header checksum right, not
//     a fragment, protocol UDP;
//   UDP: 67 -> 68, length inside the IP payload and at least 8, checksum
//     right when it is not 0 (0: the sender gave none);
//   BOOTP: op BOOTREPLY, htype 1, hlen 6, the fixed header and the magic
//     cookie all there, xid and chaddr the client's own (else the reply is
//     someone else's: kOtherTransaction, kOtherClient);
//   options: pads skipped, every length inside the message, an end option
//     required; 52 (overload: options in sname/file) refused; the options
//     read (53, 54, 1, 3, 6, 26, 51) each at most once with a valid length;
//     53 one of OFFER, ACK, NAK; 54 required; the mask contiguous and not
//     0 (a prefix of 1-32); the MTU
//     at least 68; yiaddr a usable unicast address in an OFFER or ACK.
// Every other option is skipped unread. At most 3 DNS servers are kept.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::guest {

inline constexpr std::uint16_t kDhcpServerPort = 67;
inline constexpr std::uint16_t kDhcpClientPort = 68;

struct DhcpClientIdentity {
  std::uint32_t xid = 0;
  std::array<std::uint8_t, 6> mac{};
};

// Each appends one IPv4 packet (header, UDP, BOOTP) to out.
void build_dhcp_discover(const DhcpClientIdentity& id, std::vector<std::uint8_t>& out);
void build_dhcp_request(const DhcpClientIdentity& id, std::uint32_t requested, std::uint32_t server_id,
                        std::vector<std::uint8_t>& out);

enum class DhcpReplyKind : std::uint8_t { kOffer = 2, kAck = 5, kNak = 6 };

// Addresses in host byte order.
struct DhcpReply {
  DhcpReplyKind kind = DhcpReplyKind::kOffer;
  std::uint32_t your_address = 0;  // yiaddr
  std::uint32_t server_id = 0;     // option 54
  std::optional<std::uint8_t> prefix_len;
  std::optional<std::uint32_t> router;  // the first of option 3
  std::array<std::uint32_t, 3> dns{};
  std::size_t dns_count = 0;
  std::optional<std::uint16_t> mtu;
  std::optional<std::uint32_t> lease_seconds;
};

enum class DhcpReplyError : std::uint8_t {
  kNotIpv4,
  kBadIpHeader,
  kBadIpChecksum,
  kFragment,
  kNotUdp,
  kNotDhcpPorts,
  kBadUdpLength,
  kBadUdpChecksum,
  kNotReply,
  kNotEthernet,
  kTruncatedHeader,
  kNoMagicCookie,
  kOtherTransaction,
  kOtherClient,
  kOptionPastEnd,
  kNoEndOption,
  kOptionOverload,
  kDuplicateOption,
  kBadOptionLength,
  kNoMessageType,
  kNotServerMessage,
  kNoServerId,
  kBadMask,
  kMtuTooSmall,
  kUnusableAddress,
};
std::string_view dhcp_reply_error_name(DhcpReplyError e);

// True for errors that mean "not a reply to this client" rather than "a
// broken reply": the client ignores those without counting them as bad.
bool dhcp_reply_is_someone_elses(DhcpReplyError e);

base::Result<DhcpReply, DhcpReplyError> parse_dhcp_reply(std::span<const std::uint8_t> ipv4_packet,
                                                         const DhcpClientIdentity& id);

// "10.0.2.15" from a host-order address.
std::string ipv4_text(std::uint32_t address);

}  // namespace abox::guest
