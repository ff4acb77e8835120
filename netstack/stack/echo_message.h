// Echo messages (ping), read and written: the guest's echo requests, the
// replies a host ping socket hands back, and the frames that go to the
// guest (an echo reply, or the "administratively prohibited" error that
// refuses an echo). Sans-I/O: spans in, byte vectors out; EchoFlow
// (echo_flow.h) and GuestStack use them, the guest_frames fuzzer reaches
// them through the stack.
//
// What each reader checks (every byte through base::ByteReader):
//   parse_echo_request(): the 8-byte echo header is there; type 8 (IPv4) or
//     128 (ICMPv6), code 0; the checksum is right (IPv4: over the message;
//     ICMPv6: over the pseudo-header, RFC 8200 section 8.1, and the message).
//     The payload is what follows the header, up to the IP length's end.
//   parse_echo_reply(): what recv() on a ping socket gives (the ICMP(v6)
//     message without the IP header): the 8-byte header is there; type 0
//     (IPv4) or 129 (ICMPv6), code 0; the id is the socket's own (when
//     known): a reply for an id nobody asked for is refused. The kernel
//     checked its checksum; the payload is taken as it came.
//
// The frames written: Ethernet (gateway MAC to the guest's), an IPv4 header
// (TTL 64, no options, checksum) or an IPv6 header (hop limit 64), and the
// ICMP(v6) message with its checksum. An echo reply carries the guest's own
// id and sequence and the payload as the host got it. A prohibited error
// quotes the refused packet: IPv4 its header and first 8 bytes of payload
// (RFC 792), ICMPv6 as much as fits in 1280 bytes (RFC 4443 section 2.4).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/ip_address.h"

namespace abox::netstack {

inline constexpr std::uint8_t kIcmpEchoReply = 0;
inline constexpr std::uint8_t kIcmpEchoRequest = 8;
inline constexpr std::uint8_t kIcmpv6EchoRequest = 128;
inline constexpr std::uint8_t kIcmpv6EchoReply = 129;
inline constexpr std::size_t kEchoHeader = 8;  // type, code, checksum, id, sequence
// The largest echo payload relayed either way: what fits one IPv4 packet.
inline constexpr std::size_t kMaxEchoPayload = 65535 - 20 - kEchoHeader;

enum class EchoRefusal : std::uint8_t {
  short_message,  // fewer than the 8 header bytes
  wrong_type,     // not the echo request (reply) of its family
  wrong_code,     // code not 0
  checksum,       // the guest's checksum is wrong
  wrong_id,       // a reply for an id the socket does not have
  too_long,       // a payload past kMaxEchoPayload
  count_,         // not a refusal: the number of them
};
std::string_view describe(EchoRefusal r);

// An echo request or reply; `payload` refers to the bytes parsed.
struct EchoMessage {
  std::uint16_t id = 0;
  std::uint16_t sequence = 0;
  std::span<const std::uint8_t> payload = {};
};

// The guest's echo request: `message` is the ICMP(v6) message (from its
// header to the IP length's end); `source` and `destination` are the
// packet's, which the ICMPv6 checksum covers and which tell the family.
base::Result<EchoMessage, EchoRefusal> parse_echo_request(std::span<const std::uint8_t> message,
                                                          const policy::IpAddress& source,
                                                          const policy::IpAddress& destination);

// A reply read from a ping socket of family `v6` or not. expected_id: the
// socket's id (its local "port"), 0 when not known (then any id is taken).
base::Result<EchoMessage, EchoRefusal> parse_echo_reply(std::span<const std::uint8_t> message, bool v6,
                                                        std::uint16_t expected_id);

// The echo request to send on a ping socket: id and checksum 0, which the
// kernel fills in (the socket's id; the sum).
std::vector<std::uint8_t> echo_request_message(bool v6, std::uint16_t sequence,
                                               std::span<const std::uint8_t> payload);

// Who a frame to the guest goes between.
struct GuestLink {
  std::array<std::uint8_t, 6> gateway_mac{};
  std::array<std::uint8_t, 6> guest_mac{};
};

// An echo reply frame from `from` (the destination the guest pinged) to
// `to` (the guest's address), carrying the guest's id and sequence.
// `from` and `to` are of one family.
std::vector<std::uint8_t> echo_reply_frame(const GuestLink& link, const policy::IpAddress& from,
                                           const policy::IpAddress& to, std::uint16_t id,
                                           std::uint16_t sequence, std::span<const std::uint8_t> payload);

// ICMP destination unreachable, communication administratively prohibited
// (type 3, code 13), or ICMPv6 destination unreachable, administratively
// prohibited (type 1, code 1), from `from` (the gateway) to `to` (the
// guest), quoting `refused_packet` (the IP packet from its header).
std::vector<std::uint8_t> prohibited_frame(const GuestLink& link, const policy::IpAddress& from,
                                           const policy::IpAddress& to,
                                           std::span<const std::uint8_t> refused_packet);

}  // namespace abox::netstack
