// GuestFrame: the one validated view of a guest frame. What it reads from
// good frames, and the nasty ones: every cut, every length that lies, every
// header field out of range, each refused with its reason and never read
// past its end (the ASan build checks that).
#include "netstack/stack/guest_frame.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "tests/support/big_endian.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
using abox::testing::put16;
using abox::testing::put32;

constexpr std::uint32_t kGuest = 0x0A00'020F;   // 10.0.2.15
constexpr std::uint32_t kServer = 0xC000'0201;  // 192.0.2.1

// Frame offsets: Ethernet 14, IPv4 header at 14.
constexpr std::size_t kIp = 14;

void fix_ip_checksum(Bytes& f, std::size_t ihl = 20) {
  f[kIp + 10] = f[kIp + 11] = 0;
  const std::uint16_t sum = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(kIp, ihl)));
  f[kIp + 10] = static_cast<std::uint8_t>(sum >> 8);
  f[kIp + 11] = static_cast<std::uint8_t>(sum);
}

// Ethernet + IPv4 (+ `options` bytes of IP options) + transport bytes, with
// the total length and header checksum right.
Bytes ipv4_frame(std::uint8_t proto, const Bytes& transport, std::size_t options = 0) {
  Bytes f(12, 0x02);
  put16(f, 0x0800);
  const auto ihl = static_cast<std::uint8_t>((20 + options) / 4);
  f.insert(f.end(), {static_cast<std::uint8_t>(0x40 | ihl), 0});
  put16(f, static_cast<std::uint16_t>(20 + options + transport.size()));
  put32(f, 0);  // id, no fragment
  f.insert(f.end(), {64, proto, 0, 0});
  put32(f, kGuest);
  put32(f, kServer);
  f.insert(f.end(), options, 0x01);  // NOP options
  f.insert(f.end(), transport.begin(), transport.end());
  fix_ip_checksum(f, 20 + options);
  return f;
}
Bytes udp(std::uint16_t sport, std::uint16_t dport, const Bytes& payload) {
  Bytes u;
  put16(u, sport);
  put16(u, dport);
  put16(u, static_cast<std::uint16_t>(8 + payload.size()));
  put16(u, 0);
  u.insert(u.end(), payload.begin(), payload.end());
  return u;
}
Bytes tcp(std::uint16_t sport, std::uint16_t dport, std::uint8_t flags, std::size_t header = 20) {
  Bytes t;
  put16(t, sport);
  put16(t, dport);
  put32(t, 1000);
  put32(t, 0);
  t.push_back(static_cast<std::uint8_t>((header / 4) << 4));
  t.push_back(flags);
  put16(t, 65535);
  put32(t, 0);
  t.resize(header, 0x01);
  return t;
}
std::optional<FrameRefusal> refusal(const Bytes& f) {
  const auto v = GuestFrame::parse(f);
  if (v.ok()) return std::nullopt;
  return v.error();
}
std::uint32_t net(std::uint32_t host_order) {
  const std::uint8_t b[4] = {
      static_cast<std::uint8_t>(host_order >> 24), static_cast<std::uint8_t>(host_order >> 16),
      static_cast<std::uint8_t>(host_order >> 8), static_cast<std::uint8_t>(host_order)};
  std::uint32_t v = 0;
  std::memcpy(&v, b, 4);
  return v;
}

TEST(GuestFrameTest, AUdpDatagramGivesItsPortsAndExactlyItsPayload) {
  Bytes f = ipv4_frame(17, udp(40000, 67, {1, 2, 3, 4, 5}));
  f.insert(f.end(), 20, 0xEE);  // Ethernet padding past the IPv4 total length
  const auto v = GuestFrame::parse(f);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->is_ipv4());
  EXPECT_TRUE(v->is_udp());
  EXPECT_FALSE(v->is_tcp());
  EXPECT_EQ(v->ipv4().source_net, net(kGuest));
  EXPECT_EQ(v->ipv4().destination_net, net(kServer));
  EXPECT_FALSE(v->ipv4().fragment);
  EXPECT_EQ(v->transport().source_port, 40000);
  EXPECT_EQ(v->transport().destination_port, 67);
  EXPECT_EQ(v->transport().udp_payload.size(), 5u);
  EXPECT_EQ(v->transport().udp_payload.data(), f.data() + 14 + 20 + 8);
}

TEST(GuestFrameTest, ATcpSegmentGivesItsPortsAndFlags) {
  const auto syn = GuestFrame::parse(ipv4_frame(6, tcp(1234, 443, 0x02)));
  ASSERT_TRUE(syn.ok());
  EXPECT_TRUE(syn->is_tcp());
  EXPECT_TRUE(syn->is_tcp_syn_only());
  EXPECT_EQ(syn->transport().source_port, 1234);
  EXPECT_EQ(syn->transport().destination_port, 443);
  EXPECT_TRUE(syn->transport().udp_payload.empty());
  const auto syn_ack = GuestFrame::parse(ipv4_frame(6, tcp(1234, 443, 0x12)));
  ASSERT_TRUE(syn_ack.ok());
  EXPECT_FALSE(syn_ack->is_tcp_syn_only());
  const auto with_options = GuestFrame::parse(ipv4_frame(6, tcp(1, 2, 0x02, 60)));
  ASSERT_TRUE(with_options.ok());
  EXPECT_TRUE(with_options->is_tcp_syn_only());
}

TEST(GuestFrameTest, IpOptionsMoveTheTransportHeader) {
  const auto v = GuestFrame::parse(ipv4_frame(17, udp(53, 54, {9}), 40));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->transport().source_port, 53);
  EXPECT_EQ(v->transport().destination_port, 54);
  EXPECT_EQ(v->transport().udp_payload.size(), 1u);
}

TEST(GuestFrameTest, OtherProtocolsAndFragmentsCarryNoTransport) {
  const auto icmp = GuestFrame::parse(ipv4_frame(1, Bytes(8, 0)));
  ASSERT_TRUE(icmp.ok());
  EXPECT_TRUE(icmp->is_ipv4());
  EXPECT_FALSE(icmp->is_tcp() || icmp->is_udp());
  // A later fragment of a "UDP" packet: its bytes are not a UDP header (a
  // nonsense length there is not read).
  for (const std::uint16_t frag : {std::uint16_t{0x2000}, std::uint16_t{0x0001}, std::uint16_t{0x1FFF}}) {
    Bytes f = ipv4_frame(17, Bytes{0, 1, 0, 2, 0xFF, 0xFF, 0, 0});
    f[kIp + 6] = static_cast<std::uint8_t>(frag >> 8);
    f[kIp + 7] = static_cast<std::uint8_t>(frag);
    fix_ip_checksum(f);
    const auto v = GuestFrame::parse(f);
    ASSERT_TRUE(v.ok()) << frag;
    EXPECT_TRUE(v->ipv4().fragment) << frag;
    EXPECT_FALSE(v->is_udp()) << frag;
  }
  // DF alone is not a fragment.
  Bytes df = ipv4_frame(17, udp(1, 2, {}));
  df[kIp + 6] = 0x40;
  fix_ip_checksum(df);
  const auto v = GuestFrame::parse(df);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->ipv4().fragment);
  EXPECT_TRUE(v->is_udp());
}

TEST(GuestFrameTest, EthertypesBesidesIpv4AreKindsWithoutFields) {
  Bytes arp(14 + 28, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_EQ(GuestFrame::parse(arp)->kind(), EtherKind::arp);
  arp.pop_back();
  EXPECT_EQ(refusal(arp), FrameRefusal::arp_short);
  // IPv6 is parsed (guest_frame_ipv6_test.cc): its header must be there.
  Bytes v6(14, 0);
  v6[12] = 0x86;
  v6[13] = 0xDD;
  EXPECT_EQ(refusal(v6), FrameRefusal::ipv6_short);
  Bytes other(14, 0);
  other[12] = 0x88;
  other[13] = 0xCC;  // LLDP
  EXPECT_EQ(GuestFrame::parse(other)->kind(), EtherKind::other);
}

TEST(GuestFrameTest, EveryCutOfAFrameIsRefusedNotOverRead) {
  for (const Bytes& whole : {ipv4_frame(17, udp(1, 67, Bytes(30, 7))), ipv4_frame(6, tcp(1, 80, 0x02, 40))}) {
    for (std::size_t n = 0; n < whole.size(); ++n) {
      const Bytes cut(whole.begin(), whole.begin() + static_cast<long>(n));
      const auto r = refusal(cut);
      ASSERT_TRUE(r.has_value()) << n;
      if (n < 14) {
        EXPECT_EQ(*r, FrameRefusal::ethernet_short) << n;
      } else if (n < 34) {
        EXPECT_EQ(*r, FrameRefusal::ipv4_short) << n;
      } else {
        EXPECT_EQ(*r, FrameRefusal::ipv4_total_length) << n;
      }
    }
  }
}

TEST(GuestFrameTest, IpHeaderFieldsOutOfRangeAreRefused) {
  const Bytes good = ipv4_frame(17, udp(1, 2, Bytes(40, 0)));
  Bytes f = good;
  f[kIp] = 0x65;  // version 6 under the IPv4 ethertype
  fix_ip_checksum(f);
  EXPECT_EQ(refusal(f), FrameRefusal::ipv4_version);
  for (const std::uint8_t ihl : {0, 1, 4}) {
    f = good;
    f[kIp] = static_cast<std::uint8_t>(0x40 | ihl);
    EXPECT_EQ(refusal(f), FrameRefusal::ipv4_header_length) << int{ihl};
  }
  // A 60-byte header in a frame that holds 20 bytes of IP.
  f = Bytes(good.begin(), good.begin() + 14 + 20);
  f[kIp] = 0x4F;
  EXPECT_EQ(refusal(f), FrameRefusal::ipv4_header_length);
  // Total length below the header, and past the frame.
  for (const std::uint16_t total : {std::uint16_t{0}, std::uint16_t{19}, std::uint16_t{65535}}) {
    f = good;
    f[kIp + 2] = static_cast<std::uint8_t>(total >> 8);
    f[kIp + 3] = static_cast<std::uint8_t>(total);
    fix_ip_checksum(f);
    EXPECT_EQ(refusal(f), FrameRefusal::ipv4_total_length) << total;
  }
  // Every single bit flipped in the header: the checksum catches it (or a
  // check before it does); never accepted.
  for (std::size_t bit = 0; bit < 20 * 8; ++bit) {
    f = good;
    f[kIp + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    EXPECT_TRUE(refusal(f).has_value()) << bit;
  }
}

TEST(GuestFrameTest, TransportLengthsThatLieAreRefused) {
  for (const std::uint16_t len :
       {std::uint16_t{0}, std::uint16_t{7}, std::uint16_t{8 + 11}, std::uint16_t{65535}}) {
    Bytes f = ipv4_frame(17, udp(1, 2, Bytes(10, 0)));
    f[kIp + 20 + 4] = static_cast<std::uint8_t>(len >> 8);
    f[kIp + 20 + 5] = static_cast<std::uint8_t>(len);
    EXPECT_EQ(refusal(f), FrameRefusal::udp_length) << len;
  }
  // A UDP length shorter than the packet is fine: the payload is what it says.
  Bytes shorter = ipv4_frame(17, udp(1, 2, Bytes(10, 0)));
  shorter[kIp + 20 + 5] = 8 + 3;
  EXPECT_EQ(GuestFrame::parse(shorter)->transport().udp_payload.size(), 3u);
  EXPECT_EQ(refusal(ipv4_frame(17, Bytes(7, 0))), FrameRefusal::udp_short);
  EXPECT_EQ(refusal(ipv4_frame(6, Bytes(19, 0))), FrameRefusal::tcp_short);
  for (const std::uint8_t offset : {0x00, 0x40, 0x60}) {  // 0, 16, 24 bytes (the segment has 20)
    Bytes f = ipv4_frame(6, tcp(1, 2, 0x02));
    f[kIp + 20 + 12] = offset;
    EXPECT_EQ(refusal(f), FrameRefusal::tcp_data_offset) << int{offset};
  }
}

TEST(GuestFrameTest, EveryRefusalReadsAsASentence) {
  std::set<std::string_view> sentences;
  for (std::size_t r = 0; r < kFrameRefusals; ++r) {
    EXPECT_FALSE(describe(static_cast<FrameRefusal>(r)).empty()) << r;
    EXPECT_TRUE(sentences.insert(describe(static_cast<FrameRefusal>(r))).second) << r;
  }
}

}  // namespace
}  // namespace abox::netstack
