// The ICMP answers to a guest frame over the link's MTU (issue 21): ICMPv6
// Packet Too Big (RFC 4443 section 3.2) and ICMP Destination Unreachable,
// "fragmentation needed and DF set" (RFC 792, with the next-hop MTU of RFC
// 1191 section 4). A guest whose interface MTU is larger than the link's
// (an operator's tap, a guest that ignores the router advertisement's MTU)
// learns from them to lower its path MTU, instead of losing every large
// datagram in silence.
//
// These functions only build the frame, from the head of the invoking frame
// that GuestFrame::parse_head() checked (OversizeFrame); whether a frame
// gets one is the stack's to decide (GuestStack, take_oversize_head()):
// it must pass the checks every frame passes, and the ICMP error bucket.
//
// What is built: an Ethernet frame from the gateway's MAC to the guest's
// interface (the invoking frame's source MAC), then
//   IPv6: a header from `from` to the invoking packet's source (hop limit
//         64), and ICMPv6 type 2 code 0 with the MTU, quoting as much of the
//         invoking packet as the head holds without the ICMPv6 packet
//         exceeding 1280 bytes (RFC 4443 section 2.4 (c)): at most 1232;
//   IPv4: a header from the invoking packet's destination to its source
//         (TTL 64, no options), and ICMP type 3 code 4 with the next-hop
//         MTU, quoting as much of the invoking packet as keeps the ICMP
//         packet within 576 bytes (RFC 1812 section 4.3.2.3): at most 548.
// Checksums (the ICMPv6 pseudo-header sum, the IPv4 header and ICMP sums)
// are filled in. `out` is cleared first; nothing else is allocated once it
// has grown to a frame's size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "netstack/stack/guest_frame.h"

namespace abox::netstack {

inline constexpr std::size_t kIpv6MinimumMtu = 1280;                 // RFC 8200 section 5
inline constexpr std::size_t kIcmpv6TooBigMaxQuote = 1280 - 40 - 8;  // 1232
inline constexpr std::size_t kIcmpv4ErrorMaxQuote = 576 - 20 - 8;    // 548

// ICMPv6 Packet Too Big for `invoking` (an IPv6 frame), from `from`.
void build_icmpv6_packet_too_big(const OversizeFrame& invoking, const std::array<std::uint8_t, 16>& from,
                                 std::uint32_t mtu, const std::array<std::uint8_t, 6>& gateway_mac,
                                 std::vector<std::uint8_t>& out);

// ICMP fragmentation needed for `invoking` (an IPv4 frame), from its
// destination.
void build_icmp_fragmentation_needed(const OversizeFrame& invoking, std::uint16_t next_hop_mtu,
                                     const std::array<std::uint8_t, 6>& gateway_mac,
                                     std::vector<std::uint8_t>& out);

}  // namespace abox::netstack
