// GuestFrame over IPv6 (issue 21): the fixed header, the walk of extension
// headers, and the oddities the stack drops (routing header, fragments, a
// first fragment hiding the upper layer, a next header nothing can see
// past); every cut and lying length refused, never read past its end (the
// ASan build checks that). Then the checks of ipv6_guest_checks.h: which
// sources are the guest's, and which DropReason each oddity gets.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "netstack/stack/guest_frame.h"
#include "netstack/stack/ipv6_guest_checks.h"
#include "tests/netstack/stack/ipv6_wire.h"

namespace abox::netstack {
namespace {

using namespace ipv6_wire;  // NOLINT(google-build-using-namespace): the builders are this test's vocabulary

std::optional<FrameRefusal> refusal(const Bytes& f) {
  const auto v = GuestFrame::parse(f);
  if (v.ok()) return std::nullopt;
  return v.error();
}
Ipv6Fields fields(const Bytes& f) {
  const auto v = GuestFrame::parse(f);
  EXPECT_TRUE(v.ok()) << (v.ok() ? "" : describe(v.error()));
  EXPECT_TRUE(v.ok() && v->is_ipv6());
  return v.ok() ? v->ipv6() : Ipv6Fields{};
}

// --- what a good packet gives ---------------------------------------------

TEST(GuestFrameIpv6Test, AUdpDatagramGivesItsAddressesPortsAndExactlyItsPayload) {
  Bytes f = ipv6_frame(kUdp, udp(40000, 53, {1, 2, 3}));
  f.insert(f.end(), 10, 0xEE);  // Ethernet padding past the payload length
  const auto v = GuestFrame::parse(f);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->is_ipv6());
  EXPECT_FALSE(v->is_ipv4());
  EXPECT_TRUE(v->is_udp());
  EXPECT_EQ(v->ipv6().source, kLinkLocal);
  EXPECT_EQ(v->ipv6().destination, kServer);
  EXPECT_EQ(v->ipv6().hop_limit, 64);
  EXPECT_EQ(v->ipv6().upper_protocol, kUdp);
  EXPECT_EQ(v->ipv6().oddity, Ipv6Oddity::none);
  EXPECT_EQ(v->ipv6().extension_headers, 0);
  EXPECT_EQ(v->transport().source_port, 40000);
  EXPECT_EQ(v->transport().destination_port, 53);
  EXPECT_EQ(v->transport().udp_payload.size(), 3u);
  EXPECT_EQ(v->transport().udp_payload.data(), f.data() + kIp + 40 + 8);
}

TEST(GuestFrameIpv6Test, ATcpSynIsATcpSyn) {
  const auto v = GuestFrame::parse(ipv6_frame(kTcp, tcp(1234, 443, 0x02)));
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->is_tcp_syn_only());
  EXPECT_EQ(v->transport().destination_port, 443);
}

TEST(GuestFrameIpv6Test, Icmpv6GivesItsTypeCodeAndBytes) {
  const Bytes f = ipv6_frame(kIcmpv6, icmpv6(135, 0, 20));  // a neighbour solicitation
  const Ipv6Fields ip = fields(f);
  EXPECT_EQ(ip.upper_protocol, kIcmpv6);
  EXPECT_EQ(ip.icmp_type, 135);
  EXPECT_EQ(ip.icmp_code, 0);
  EXPECT_EQ(ip.upper_layer.size(), 24u);
  EXPECT_EQ(ip.upper_layer.data(), f.data() + kIp + 40);
  EXPECT_EQ(refusal(ipv6_frame(kIcmpv6, Bytes{135, 0, 0})), FrameRefusal::icmpv6_short);
}

TEST(GuestFrameIpv6Test, ExtensionHeadersAreWalkedToTheUpperLayer) {
  // Hop-by-Hop (as MLD reports carry), then Destination Options, then TCP.
  const auto v = GuestFrame::parse(ipv6_frame(kHopByHop, ext(kDestOpts, ext(kTcp, tcp(1, 443, 0x02), 1))));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->ipv6().extension_headers, 2);
  EXPECT_EQ(v->ipv6().oddity, Ipv6Oddity::none);
  EXPECT_TRUE(v->is_tcp_syn_only());
  EXPECT_EQ(v->transport().destination_port, 443);
  // No Next Header ends the walk with nothing to read.
  const Ipv6Fields none = fields(ipv6_frame(kDestOpts, ext(kNoNext, {})));
  EXPECT_EQ(none.upper_protocol, kNoNext);
  EXPECT_EQ(none.oddity, Ipv6Oddity::none);
}

TEST(GuestFrameIpv6Test, TheWalkIsBounded) {
  Bytes chain = udp(1, 2, {});
  std::uint8_t next = kUdp;
  for (std::size_t i = 0; i < kMaxIpv6ExtensionHeaders; ++i) {
    chain = ext(next, chain);
    next = kDestOpts;
  }
  EXPECT_EQ(fields(ipv6_frame(kDestOpts, chain)).extension_headers, kMaxIpv6ExtensionHeaders);
  EXPECT_EQ(refusal(ipv6_frame(kDestOpts, ext(kDestOpts, chain))), FrameRefusal::ipv6_extension_chain);
}

TEST(GuestFrameIpv6Test, HopByHopAnywhereButFirstIsRefused) {
  EXPECT_EQ(refusal(ipv6_frame(kDestOpts, ext(kHopByHop, ext(kUdp, udp(1, 2, {}))))),
            FrameRefusal::ipv6_extension_chain);
  EXPECT_EQ(refusal(ipv6_frame(kHopByHop, ext(kHopByHop, ext(kUdp, udp(1, 2, {}))))),
            FrameRefusal::ipv6_extension_chain);
}

// --- the oddities: dropped by the stack, each under its own reason --------

TEST(GuestFrameIpv6Test, ARoutingHeaderOfAnyTypeIsAnOddity) {
  for (const std::uint8_t type : {0, 2, 3, 4}) {
    const auto v = GuestFrame::parse(ipv6_frame(kRouting, routing(kTcp, type, tcp(1, 443, 0x02))));
    ASSERT_TRUE(v.ok()) << int{type};
    EXPECT_EQ(v->ipv6().oddity, Ipv6Oddity::routing_header) << int{type};
    EXPECT_EQ(v->ipv6().routing_type, type);
    EXPECT_FALSE(v->is_tcp()) << "nothing past a routing header is read";
  }
  // Behind a Destination Options header too.
  EXPECT_EQ(fields(ipv6_frame(kDestOpts, ext(kRouting, routing(kUdp, 0, udp(1, 2, {}))))).oddity,
            Ipv6Oddity::routing_header);
}

TEST(GuestFrameIpv6Test, FragmentsAreOdditiesAndAHiddenUpperLayerIsNamed) {
  // A later fragment: its bytes are not headers.
  const auto later =
      GuestFrame::parse(ipv6_frame(kFragment, fragment(kUdp, 1, false, Bytes{0, 1, 0, 2, 0xFF, 0xFF})));
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->ipv6().oddity, Ipv6Oddity::fragment);
  EXPECT_FALSE(later->is_udp());
  // A first fragment holding the whole chain and the TCP header: a fragment.
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kTcp, 0, true, tcp(1, 443, 0x02)))).oddity,
            Ipv6Oddity::fragment);
  // An atomic fragment (offset 0, no more): still a fragment, still dropped.
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kUdp, 0, false, udp(1, 2, {})))).oddity,
            Ipv6Oddity::fragment);
  // First fragments that leave the upper-layer header to a later one.
  Bytes cut_tcp = tcp(1, 443, 0x02);
  cut_tcp.resize(12);
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kTcp, 0, true, cut_tcp))).oddity,
            Ipv6Oddity::fragment_hides_upper_layer);
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kUdp, 0, true, Bytes{0, 1, 0}))).oddity,
            Ipv6Oddity::fragment_hides_upper_layer);
  // A Destination Options header that runs past the fragment's end.
  Bytes long_options = ext(kTcp, {}, 4);
  long_options.resize(16);
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kDestOpts, 0, true, long_options))).oddity,
            Ipv6Oddity::fragment_hides_upper_layer);
  // Nothing at all after the fragment header.
  EXPECT_EQ(fields(ipv6_frame(kFragment, fragment(kTcp, 0, true, {}))).oddity,
            Ipv6Oddity::fragment_hides_upper_layer);
  // Two fragment headers in one chain: malformed.
  EXPECT_EQ(
      refusal(ipv6_frame(kFragment, fragment(kFragment, 0, true, fragment(kUdp, 0, true, udp(1, 2, {}))))),
      FrameRefusal::ipv6_extension_chain);
}

TEST(GuestFrameIpv6Test, ANextHeaderNothingCanSeePastIsAnOddity) {
  // An unknown next header before what would be a TCP SYN, and the known
  // ones abox-net does not handle (ESP, AH, mobility, HIP, shim6, experimental).
  for (const std::uint8_t next : {50, 51, 135, 139, 140, 143, 253, 254, 255, 1, 4, 41}) {
    const auto v = GuestFrame::parse(ipv6_frame(next, tcp(1, 443, 0x02)));
    ASSERT_TRUE(v.ok()) << int{next};
    EXPECT_EQ(v->ipv6().oddity, Ipv6Oddity::unhandled_next_header) << int{next};
    EXPECT_EQ(v->ipv6().upper_protocol, next);
    EXPECT_FALSE(v->is_tcp()) << int{next};
  }
  EXPECT_EQ(fields(ipv6_frame(kDestOpts, ext(253, tcp(1, 443, 0x02)))).oddity,
            Ipv6Oddity::unhandled_next_header);
}

// --- malformed: refused -------------------------------------------------

TEST(GuestFrameIpv6Test, EveryCutOfAFrameIsRefusedNotOverRead) {
  for (const Bytes& whole : {ipv6_frame(kUdp, udp(1, 53, Bytes(30, 7))), ipv6_frame(kTcp, tcp(1, 80, 0x02)),
                             ipv6_frame(kHopByHop, ext(kDestOpts, ext(kTcp, tcp(1, 443, 0x02), 1))),
                             ipv6_frame(kRouting, routing(kTcp, 0, tcp(1, 443, 0x02))),
                             ipv6_frame(kFragment, fragment(kTcp, 0, true, tcp(1, 443, 0x02)))}) {
    for (std::size_t n = 0; n < whole.size(); ++n) {
      const Bytes cut(whole.begin(), whole.begin() + static_cast<long>(n));
      const auto r = refusal(cut);
      ASSERT_TRUE(r.has_value()) << n;
      if (n < 14) {
        EXPECT_EQ(*r, FrameRefusal::ethernet_short) << n;
      } else if (n < 14 + 40) {
        EXPECT_EQ(*r, FrameRefusal::ipv6_short) << n;
      } else {
        EXPECT_EQ(*r, FrameRefusal::ipv6_payload_length) << n;
      }
    }
  }
}

TEST(GuestFrameIpv6Test, HeaderFieldsThatLieAreRefused) {
  const Bytes good = ipv6_frame(kUdp, udp(1, 2, Bytes(10, 0)));
  Bytes f = good;
  f[kIp] = 0x45;  // version 4 under the IPv6 ethertype
  EXPECT_EQ(refusal(f), FrameRefusal::ipv6_version);
  // A payload length past the frame.
  f = good;
  f[kIp + 5] = static_cast<std::uint8_t>(f[kIp + 5] + 1);
  EXPECT_EQ(refusal(f), FrameRefusal::ipv6_payload_length);
  // A payload length that cuts the UDP header: its length lies.
  f = good;
  f[kIp + 4] = 0;
  f[kIp + 5] = 8 + 4;
  EXPECT_EQ(refusal(f), FrameRefusal::udp_length);
  f[kIp + 5] = 4;
  EXPECT_EQ(refusal(f), FrameRefusal::udp_short);
  // Payload length 0 (a jumbogram's) under UDP: nothing there.
  f[kIp + 5] = 0;
  EXPECT_EQ(refusal(f), FrameRefusal::udp_short);
  // An extension header whose length runs past the packet, and one cut
  // before its length byte.
  Bytes long_options = ext(kUdp, {}, 4);
  long_options.resize(16);
  EXPECT_EQ(refusal(ipv6_frame(kDestOpts, long_options)), FrameRefusal::ipv6_extension_short);
  EXPECT_EQ(refusal(ipv6_frame(kDestOpts, Bytes{kUdp})), FrameRefusal::ipv6_extension_short);
  EXPECT_EQ(refusal(ipv6_frame(kRouting, Bytes{kUdp, 2, 0, 1})), FrameRefusal::ipv6_extension_short);
  EXPECT_EQ(refusal(ipv6_frame(kFragment, Bytes{kUdp, 0, 0, 0})), FrameRefusal::ipv6_extension_short);
  // A TCP header shorter than its data offset says.
  Bytes seg = tcp(1, 2, 0x02);
  seg[12] = 0x60;
  EXPECT_EQ(refusal(ipv6_frame(kTcp, seg)), FrameRefusal::tcp_data_offset);
}

// Seeded random mutations of good frames (a cheap fuzzer that runs in every
// build, under ASan in that one): whatever is accepted has its spans inside
// the frame and agrees with the oddity rule (no transport past an oddity).
TEST(GuestFrameIpv6Test, RandomMutationsStayInsideTheFrame) {
  const std::vector<Bytes> seeds = {
      ipv6_frame(kUdp, udp(1, 53, Bytes(12, 7))),
      ipv6_frame(kHopByHop, ext(kDestOpts, ext(kTcp, tcp(1, 443, 0x02), 1))),
      ipv6_frame(kRouting, routing(kTcp, 0, tcp(1, 443, 0x02))),
      ipv6_frame(kFragment, fragment(kTcp, 0, true, tcp(1, 443, 0x02))),
      ipv6_frame(kIcmpv6, icmpv6(135, 0, 20)),
  };
  std::mt19937 rng(21);  // NOLINT(cert-msc32-c,cert-msc51-cpp): a fixed seed, so failures reproduce
  for (int i = 0; i < 20000; ++i) {
    Bytes f = seeds[static_cast<std::size_t>(i) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = kIp + rng() % (f.size() - kIp);
      switch (rng() % 3) {
        case 0:
          f[at] = static_cast<std::uint8_t>(rng());
          break;
        case 1:
          f.resize(at);
          break;
        default:
          f.insert(f.begin() + static_cast<long>(at), static_cast<std::uint8_t>(rng()));
          break;
      }
      if (f.size() <= kIp) break;
    }
    const auto v = GuestFrame::parse(f);
    if (!v.ok() || !v->is_ipv6()) continue;
    const Ipv6Fields& ip = v->ipv6();
    const auto inside = [&](std::span<const std::uint8_t> sp) {
      return sp.empty() || (sp.data() >= f.data() && sp.data() + sp.size() <= f.data() + f.size());
    };
    ASSERT_TRUE(inside(ip.upper_layer)) << i;
    ASSERT_LE(ip.extension_headers, kMaxIpv6ExtensionHeaders) << i;
    if (ip.oddity != Ipv6Oddity::none) {
      ASSERT_FALSE(v->is_tcp() || v->is_udp()) << i;
      ASSERT_TRUE(ip.upper_layer.empty()) << i;
    }
    if (v->is_udp()) {
      ASSERT_TRUE(inside(v->transport().udp_payload)) << i;
    }
  }
}

// --- ipv6_guest_checks.h ------------------------------------------------

Address address(std::initializer_list<std::uint8_t> head, std::uint8_t last) {
  Address a{};
  std::copy(head.begin(), head.end(), a.begin());
  a[15] = last;
  return a;
}

TEST(Ipv6GuestChecksTest, OnlyTheGuestsOwnSourcesPass) {
  const Ipv6Prefix64 own = {0xFD, 0x12, 0x34, 0x56, 0x78, 0x9A, 0, 0};
  const Bytes u = udp(1, 53, {});
  auto allowed = [&](const Address& src, std::uint8_t next, const Bytes& payload,
                     const std::optional<Ipv6Prefix64>& prefix) {
    return guest_ipv6_source_allowed(fields(ipv6_frame(next, payload, src)), prefix);
  };
  // Link-local: any interface identifier (EUI-64 or stable-privacy).
  EXPECT_TRUE(allowed(kLinkLocal, kUdp, u, std::nullopt));
  EXPECT_TRUE(allowed(address({0xFE, 0x80}, 0x99), kUdp, u, std::nullopt));
  // fe80::/10 outside fe80::/64 is not a link-local address a guest has.
  EXPECT_FALSE(allowed(address({0xFE, 0x80, 0, 1}, 1), kUdp, u, std::nullopt));
  EXPECT_FALSE(allowed(address({0xFE, 0xBF}, 1), kUdp, u, std::nullopt));
  // The instance's /64, when it has one; another /64 of the same ULA is not.
  const Address in_own = address({0xFD, 0x12, 0x34, 0x56, 0x78, 0x9A, 0, 0, 0xAB}, 7);
  EXPECT_TRUE(allowed(in_own, kUdp, u, own));
  EXPECT_FALSE(allowed(in_own, kUdp, u, std::nullopt));
  EXPECT_FALSE(allowed(address({0xFD, 0x12, 0x34, 0x56, 0x78, 0x9A, 0, 1}, 7), kUdp, u, own));
  // Global, loopback, multicast, IPv4-mapped: spoofed.
  EXPECT_FALSE(allowed(kServer, kUdp, u, own));
  EXPECT_FALSE(allowed(address({}, 1), kUdp, u, own));
  EXPECT_FALSE(allowed(address({0xFF, 0x02}, 1), kUdp, u, own));
  EXPECT_FALSE(allowed(address({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 2}, 15), kUdp, u, own));
  // The gateway's own addresses in those prefixes are never the guest's.
  const Ipv6Address gateway[] = {address({0xFE, 0x80}, 1), address({0xFD, 0x12, 0x34, 0x56, 0x78, 0x9A}, 1)};
  auto allowed_beside_gateway = [&](const Address& src) {
    return guest_ipv6_source_allowed(fields(ipv6_frame(kUdp, u, src)), own, gateway);
  };
  EXPECT_FALSE(allowed_beside_gateway(gateway[0]));
  EXPECT_FALSE(allowed_beside_gateway(gateway[1]));
  EXPECT_TRUE(allowed_beside_gateway(address({0xFE, 0x80}, 2)));
  EXPECT_TRUE(allowed_beside_gateway(address({0xFD, 0x12, 0x34, 0x56, 0x78, 0x9A}, 2)));
  EXPECT_EQ(ipv6_guest_refusal(fields(ipv6_frame(kUdp, u, gateway[1])), own, gateway),
            DropReason::frame_ipv6_spoofed);
  // The unspecified address: ICMPv6 only (DAD, router solicitation, MLD).
  EXPECT_TRUE(allowed(Address{}, kIcmpv6, icmpv6(135, 0, 20), own));
  EXPECT_FALSE(allowed(Address{}, kUdp, u, own));
  EXPECT_FALSE(allowed(Address{}, kTcp, tcp(1, 443, 0x02), own));
}

TEST(Ipv6GuestChecksTest, EachOddityHasItsReasonThenTheSourceIsChecked) {
  const auto reason = [](const Bytes& f) { return ipv6_guest_refusal(fields(f), std::nullopt); };
  EXPECT_EQ(reason(ipv6_frame(kRouting, routing(kTcp, 0, tcp(1, 443, 0x02)))),
            DropReason::frame_ipv6_routing_header);
  EXPECT_EQ(reason(ipv6_frame(kFragment, fragment(kUdp, 1, false, {}))), DropReason::frame_ipv6_fragment);
  EXPECT_EQ(reason(ipv6_frame(kFragment, fragment(kTcp, 0, true, {}))),
            DropReason::frame_ipv6_hidden_upper_layer);
  EXPECT_EQ(reason(ipv6_frame(253, tcp(1, 443, 0x02))), DropReason::frame_ipv6_next_header);
  EXPECT_EQ(reason(ipv6_frame(kUdp, udp(1, 2, {}), kServer)), DropReason::frame_ipv6_spoofed);
  EXPECT_EQ(reason(ipv6_frame(kUdp, udp(1, 2, {}))), std::nullopt);
  EXPECT_EQ(reason(ipv6_frame(kIcmpv6, icmpv6(133, 0), Address{})), std::nullopt);  // a router solicitation
}

}  // namespace
}  // namespace abox::netstack
