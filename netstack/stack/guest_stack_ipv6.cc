// GuestStack's IPv6 frames (issue 21; see guest_stack.h for the whole path).
//
// Every IPv6 frame is checked first (ipv6_guest_checks.h): a header trick or
// a source that is not the guest's is dropped under its own reason. With
// GuestConfig::ipv6_neighbour_discovery, neighbour discovery goes to the
// NdpResponder and its answer straight to the link, and the guest's
// addresses in the instance's /64 are its own. Everything else (and all of
// it when the option is off) is dropped as not carried yet. lwIP (built with
// IPv6, lwipopts.h) sees the guest's neighbour advertisements to the gateway,
// for its ND, and with GuestConfig::ipv6_flows the guest's TCP, unicast UDP
// and echo requests; never a packet with extension headers. A DHCPv6
// Information-Request (to ff02::1:2 port 547) goes to the Dhcpv6Server.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "base/byte_reader.h"
#include "base/unique_fd.h"
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/ipv6_guest_checks.h"
#include "netstack/stack/packet_too_big.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

namespace {
constexpr std::uint8_t kNeighbourAdvertisementType = 136;  // RFC 4861 section 4.4
constexpr std::uint8_t kEchoRequestType = 128;             // RFC 4443 section 4.1
constexpr std::uint8_t kMulticastByte = 0xFF;              // ff00::/8, RFC 4291 section 2.7
}  // namespace

void GuestStack::take_ipv6(std::span<const std::uint8_t> bytes, const GuestFrame& frame) {
  const bool ndp_on = config_.ipv6_neighbour_discovery;
  const std::optional<Ipv6Prefix64> own_prefix =
      ndp_on ? std::optional<Ipv6Prefix64>(ndp_.prefix()) : std::nullopt;
  const Ipv6Address gateway[] = {ndp_.link_local(), ndp_.global()};
  if (const auto refusal = ipv6_guest_refusal(frame.ipv6(), own_prefix, gateway)) {
    drop(*refusal, "ipv6");
    return;
  }
  if (ndp_on && frame.ipv6().upper_protocol == GuestFrame::kProtoIcmpv6) {
    const NdpResult r = ndp_.handle(bytes, frame, loop_.now());
    if (!r.reply.empty()) (void)link_.send(r.reply);  // a full link loses it; the guest asks again
    // lwIP's own solicitation for the guest (from PREFIX::1 or fe80::1, when
    // it has a segment for it) is answered to one of the gateway's addresses:
    // lwIP's ND takes the answer and learns the guest's MAC. The input hook
    // lets ICMPv6 to those addresses in only (abox_lwip.h).
    if (r.outcome == NdpOutcome::ignored && frame.ipv6().icmp_type == kNeighbourAdvertisementType &&
        frame.ipv6().extension_headers == 0 &&
        (frame.ipv6().destination == ndp_.link_local() || frame.ipv6().destination == ndp_.global())) {
      to_lwip(bytes);
      return;
    }
    if (r.outcome != NdpOutcome::not_ndp) return;  // answered, or ignored and counted there
  }
  // With IPv6 flows on: TCP to lwIP, whose SYN hook admits as for IPv4
  // (on_syn()); UDP to a unicast address, which lwIP hands to on_udp() (the
  // DNS gate's own pcb when it is to PREFIX::1 port 53); echo requests,
  // which lwIP answers for the gateway's addresses only (the IPv6 input
  // hook eats the rest, counted). Multicast UDP (mDNS, LLMNR, SSDP) stays
  // on the link: dropped as not carried (but DHCPv6 to ff02::1:2, next).
  // Only a packet without extension headers: the IPv6 input hook reads the
  // fixed header alone, and lwIP would answer options it does not know with
  // ICMPv6 errors from the destination's address.
  const Ipv6Fields& ip = frame.ipv6();
  // The one multicast UDP carried: a DHCPv6 client asking ff02::1:2 for
  // the DNS server (dhcpv6_server.h), answered by the gateway itself.
  if (ndp_on && config_.ipv6_flows && Dhcpv6Server::is_for_server(frame)) {
    // A tap's guest kernel leaves the UDP checksum partial: the link says so.
    const Dhcpv6Result r = dhcpv6_.handle(bytes, frame, loop_.now(), link_.last_frame_checksum_trusted());
    if (!r.reply.empty()) (void)link_.send(r.reply);  // a full link loses it; the client asks again
    return;
  }
  const bool carried =
      ip.upper_protocol == GuestFrame::kProtoTcp ||
      (ip.upper_protocol == GuestFrame::kProtoUdp && frame.is_udp() && ip.destination[0] != kMulticastByte) ||
      (ip.upper_protocol == GuestFrame::kProtoIcmpv6 && ip.icmp_type == kEchoRequestType);
  if (ndp_on && config_.ipv6_flows && ip.extension_headers == 0 && carried) {
    // Echo to anything but the gateway's own addresses: relayed
    // (guest_stack_echo.cc); the gateway's stays lwIP's.
    if (ip.upper_protocol == GuestFrame::kProtoIcmpv6 &&
        !is_gateway_ipv6(policy::IpAddress::v6(ip.destination)) && ip.destination[0] != kMulticastByte) {
      take_echo(frame);
      return;
    }
    if (dns_half_open_full(frame)) return;
    to_lwip(bytes);
    return;
  }
  drop(DropReason::frame_ipv6, "ipv6");
}

// The checks take_ipv6() makes, in its order, on what a head shows: the
// guest's own source (ipv6_guest_refusal()), IPv6 flows on, no extension
// headers, and a packet abox-net carries (TCP, unicast UDP, an echo request
// to the gateway: lwIP answers no other, and an ICMPv6 error never gets
// one, RFC 4443 section 2.4 (e)). Not to multicast, and not from :: (which
// passes the source check for ICMPv6, and cannot be answered). The answer
// comes from the address the packet was sent to, as a router on the way
// would send it and as the unreachables do; for another on-link address
// than the gateway's (fe80::/10, or the instance's /64) from the gateway's
// link-local one, the on-link router. An MTU under IPv6's minimum is not
// one a guest may be told (RFC 8201 section 4): nothing then.
void GuestStack::answer_oversize_ipv6(const OversizeFrame& frame) {
  if (!config_.ipv6_neighbour_discovery || !config_.ipv6_flows || link_.mtu() < kIpv6MinimumMtu) return;
  const Ipv6Fields& ip = frame.view.ipv6();
  const Ipv6Address gateway[] = {ndp_.link_local(), ndp_.global()};
  if (ipv6_guest_refusal(ip, ndp_.prefix(), gateway)) return;
  const bool unspecified_source =
      std::all_of(ip.source.begin(), ip.source.end(), [](std::uint8_t b) { return b == 0; });
  const bool to_gateway = ip.destination == ndp_.link_local() || ip.destination == ndp_.global();
  const bool carried =
      ip.upper_protocol == GuestFrame::kProtoTcp || ip.upper_protocol == GuestFrame::kProtoUdp ||
      (ip.upper_protocol == GuestFrame::kProtoIcmpv6 && ip.icmp_type == kEchoRequestType && to_gateway);
  if (unspecified_source || ip.destination[0] == kMulticastByte || ip.extension_headers != 0 || !carried)
    return;
  constexpr std::array<std::uint8_t, 2> kLinkLocal = {0xFE, 0x80};  // fe80::/10: the first 10 bits
  const bool link_local = ip.destination[0] == kLinkLocal[0] && (ip.destination[1] & 0xC0) == kLinkLocal[1];
  const bool own_prefix = std::equal(ndp_.prefix().begin(), ndp_.prefix().end(), ip.destination.begin());
  const Ipv6Address& from = to_gateway || (!link_local && !own_prefix) ? ip.destination : ndp_.link_local();
  build_icmpv6_packet_too_big(frame, from, static_cast<std::uint32_t>(link_.mtu()), config_.gateway_mac,
                              too_big_frame_);
  send_too_big();
}

// The IPv6 twin of checksum_offload_of(): the pseudo-header of RFC 8200
// section 8.1, and for TCP where its headers end (a GSO frame's hdr_len).
GuestStack::ChecksumOffload GuestStack::checksum_offload_of_ipv6(std::span<const std::uint8_t> head,
                                                                 std::size_t frame_size) {
  ChecksumOffload out;
  constexpr std::size_t kHeaders = 14 + 40;  // Ethernet, the fixed IPv6 header
  if (frame_size < head.size() || head.size() < kHeaders) return out;
  base::ByteReader ip(head.subspan(14));
  const auto version = ip.u8();
  const bool flow = ip.skip(3);
  const auto payload_length = ip.u16be();
  const auto next_header = ip.u8();
  const bool hop_limit = ip.skip(1);
  const auto addresses = ip.bytes(32);
  if (!version || !flow || !payload_length || !next_header || !hop_limit || !addresses) return out;
  const std::size_t payload = *payload_length;
  if ((*version >> 4) != 6 || payload > frame_size - kHeaders) return out;
  std::size_t field = 0;
  if (*next_header == GuestFrame::kProtoTcp) {
    field = 16;
  } else if (*next_header == GuestFrame::kProtoUdp) {
    field = 6;
  } else {
    return out;  // ICMPv6 (lwIP sums it itself), or anything with extension headers
  }
  if (payload < field + 2) return out;
  // RFC 8200 section 8.1: addresses, the upper-layer length, the next header.
  std::uint32_t sum = sum16(*addresses);
  sum += *next_header;
  sum += static_cast<std::uint32_t>(payload);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  out.start = static_cast<std::uint16_t>(kHeaders);
  out.offset = static_cast<std::uint16_t>(field);
  out.field_end = kHeaders + field + 2;
  out.pseudo_sum = static_cast<std::uint16_t>(sum);
  out.ipv6 = true;
  if (*next_header == GuestFrame::kProtoTcp)
    out.tcp_headers = tcp_headers_end(head.subspan(14), 40, 40 + payload);
  return out;
}

}  // namespace abox::netstack
