// GuestFrame::parse_head() on the heads of oversize frames, nasty ones
// first (a head cut inside each header, lengths past the real frame, an
// extension chain past the head, a frame_size under the head's), and the
// ICMP "packet too big" builders (packet_too_big.h): sizes, quotes and
// checksums at the limits (a head shorter than the quote, one longer).
#include "netstack/stack/packet_too_big.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "netstack/stack/guest_frame.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/ipv6_wire.h"

namespace abox::netstack {
namespace {

using ipv6_wire::Bytes;

constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};

Bytes udp6(std::size_t payload) {
  return ipv6_wire::ipv6_frame(ipv6_wire::kUdp, ipv6_wire::udp(1, 2, Bytes(payload, 0x33)));
}
Bytes udp4(std::size_t payload, bool df) {
  Bytes f = guest_wire::udp_datagram(40000, 0x5DB8'D822, 443, Bytes(payload, 0x44));
  if (df) {
    f[14 + 6] = 0x40;
    f[14 + 10] = f[14 + 11] = 0;
    const std::uint16_t sum = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(14, 20)));
    f[14 + 10] = static_cast<std::uint8_t>(sum >> 8);
    f[14 + 11] = static_cast<std::uint8_t>(sum);
  }
  return f;
}
std::span<const std::uint8_t> head_of(const Bytes& f, std::size_t n) {
  return std::span<const std::uint8_t>(f).first(std::min(n, f.size()));
}

TEST(ParseHeadTest, AHeadOfAWholeFrameReadsAsParseDoesButWithoutTransport) {
  const Bytes f = udp6(3000);
  const auto h = GuestFrame::parse_head(head_of(f, 1294), f.size());
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->view.is_ipv6());
  EXPECT_FALSE(h->view.is_udp()) << "the transport header is not read from a head";
  EXPECT_EQ(h->view.ipv6().upper_protocol, ipv6_wire::kUdp);
  EXPECT_EQ(h->packet_size, f.size() - 14);
  EXPECT_EQ(h->packet_head.size(), 1280u);
  EXPECT_TRUE(std::equal(h->source_mac.begin(), h->source_mac.end(), f.begin() + 6));
}

TEST(ParseHeadTest, NastyIpv6Heads) {
  const Bytes f = udp6(3000);
  // Cut inside the Ethernet header, inside the IPv6 header.
  EXPECT_EQ(GuestFrame::parse_head(head_of(f, 10), f.size()).error(), FrameRefusal::ethernet_short);
  EXPECT_EQ(GuestFrame::parse_head(head_of(f, 14 + 39), f.size()).error(), FrameRefusal::ipv6_short);
  // A payload length past the real frame (the head is not the whole story).
  EXPECT_EQ(GuestFrame::parse_head(head_of(f, 1294), f.size() - 1).error(),
            FrameRefusal::ipv6_payload_length);
  // A frame_size under the head's own: nothing to trust.
  EXPECT_FALSE(GuestFrame::parse_head(head_of(f, 1294), 1000).ok());
  // An extension chain that runs past the head: short, even though the
  // frame may hold it.
  const Bytes chain = ipv6_wire::ipv6_frame(
      ipv6_wire::kHopByHop,
      ipv6_wire::ext(ipv6_wire::kDestOpts, ipv6_wire::ext(ipv6_wire::kUdp, Bytes(3000), 200)));
  EXPECT_EQ(GuestFrame::parse_head(head_of(chain, 14 + 40 + 8 + 100), chain.size()).error(),
            FrameRefusal::ipv6_extension_short);
  // An ICMPv6 header cut by the head.
  const Bytes icmp = ipv6_wire::ipv6_frame(ipv6_wire::kIcmpv6, ipv6_wire::icmpv6(128, 0, 2000));
  EXPECT_EQ(GuestFrame::parse_head(head_of(icmp, 14 + 40 + 2), icmp.size()).error(),
            FrameRefusal::icmpv6_short);
  EXPECT_TRUE(GuestFrame::parse_head(head_of(icmp, 14 + 40 + 4), icmp.size()).ok());
}

TEST(ParseHeadTest, NastyIpv4Heads) {
  const Bytes f = udp4(3000, true);
  EXPECT_EQ(GuestFrame::parse_head(head_of(f, 14 + 19), f.size()).error(), FrameRefusal::ipv4_short);
  EXPECT_EQ(GuestFrame::parse_head(head_of(f, 600), f.size() - 1).error(), FrameRefusal::ipv4_total_length);
  Bytes bad_sum = f;
  bad_sum[14 + 8] ^= 1;  // the TTL: the header checksum no longer adds up
  EXPECT_EQ(GuestFrame::parse_head(head_of(bad_sum, 600), f.size()).error(), FrameRefusal::ipv4_checksum);
  Bytes long_header = f;
  long_header[14] = 0x4F;  // 60 bytes of header: past a 40-byte head
  EXPECT_EQ(GuestFrame::parse_head(head_of(long_header, 14 + 40), f.size()).error(),
            FrameRefusal::ipv4_header_length);
  const auto h = GuestFrame::parse_head(head_of(f, 600), f.size());
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->view.ipv4().dont_fragment);
  EXPECT_FALSE(h->view.ipv4().fragment);
  EXPECT_EQ(h->packet_size, f.size() - 14);
  EXPECT_FALSE(GuestFrame::parse_head(head_of(udp4(3000, false), 600), f.size())->view.ipv4().dont_fragment);
}

TEST(PacketTooBigTest, Ipv6QuotesAtMost1232BytesAndItsChecksumAddsUp) {
  const Bytes f = udp6(3000);
  const auto h = GuestFrame::parse_head(head_of(f, 2000), f.size());
  ASSERT_TRUE(h.ok());
  const std::array<std::uint8_t, 16> from = ipv6_wire::kServer;
  Bytes out;
  build_icmpv6_packet_too_big(*h, from, 1500, kGatewayMac, out);
  ASSERT_EQ(out.size(), 14u + 1280u);
  const auto view = GuestFrame::parse(out);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->ipv6().icmp_type, 2);
  EXPECT_EQ(view->ipv6().source, from);
  EXPECT_EQ(view->ipv6().destination, ipv6_wire::kLinkLocal);
  EXPECT_EQ(view->ipv6().hop_limit, 64);
  const auto& icmp = view->ipv6().upper_layer;
  EXPECT_EQ(ipv6_wire::icmpv6_checksum_sum(view->ipv6().source, view->ipv6().destination, icmp), 0);
  EXPECT_EQ(icmp[4] << 24 | icmp[5] << 16 | icmp[6] << 8 | icmp[7], 1500);
  EXPECT_TRUE(std::equal(icmp.begin() + 8, icmp.end(), f.begin() + 14));
}

TEST(PacketTooBigTest, AShortHeadIsQuotedWhole) {
  // A head of only the headers and 10 bytes (a stream link keeps at least
  // kOversizeHeadBytes; the builder must not read past what it was given).
  const Bytes f = udp6(3000);
  const auto h = GuestFrame::parse_head(head_of(f, 14 + 40 + 8 + 10), f.size());
  ASSERT_TRUE(h.ok());
  Bytes out;
  build_icmpv6_packet_too_big(*h, ipv6_wire::kServer, 1280, kGatewayMac, out);
  EXPECT_EQ(out.size(), 14u + 40 + 8 + 40 + 8 + 10);
  const auto view = GuestFrame::parse(out);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(
      ipv6_wire::icmpv6_checksum_sum(view->ipv6().source, view->ipv6().destination, view->ipv6().upper_layer),
      0);
}

TEST(PacketTooBigTest, Ipv4QuotesWithin576BytesAndBothChecksumsAddUp) {
  const Bytes f = udp4(3000, true);
  for (const std::size_t head : {std::size_t{14 + 28}, std::size_t{300}, std::size_t{1514}}) {
    const auto h = GuestFrame::parse_head(head_of(f, head), f.size());
    ASSERT_TRUE(h.ok());
    Bytes out;
    build_icmp_fragmentation_needed(*h, 1500, kGatewayMac, out);
    const std::size_t quoted = std::min<std::size_t>(head - 14, 548);
    ASSERT_EQ(out.size(), 14u + 20 + 8 + quoted);
    const auto view = GuestFrame::parse(out);
    ASSERT_TRUE(view.ok()) << "the IPv4 header and its checksum add up";
    EXPECT_EQ(view->ipv4().protocol, 1);
    const auto icmp = std::span<const std::uint8_t>(out).subspan(14 + 20);
    EXPECT_EQ(fold_checksum(sum16(icmp)), 0);
    EXPECT_EQ(icmp[0], 3);
    EXPECT_EQ(icmp[1], 4);
    EXPECT_EQ(icmp[6] << 8 | icmp[7], 1500);
    EXPECT_TRUE(std::equal(icmp.begin() + 8, icmp.end(), f.begin() + 14));
  }
}

}  // namespace
}  // namespace abox::netstack
