// NdpResponder: router and neighbour solicitations answered with the
// instance's prefix, MTU and RDNSS, or the gateway's MAC; everything a guest
// should not send (router advertisements, solicitations for other targets,
// forwarded or malformed messages) ignored and counted; floods bounded.
// Every reply is read back through GuestFrame and its checksum checked.
#include "netstack/gateway/ndp_responder.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/byte_reader.h"
#include "tests/netstack/stack/ipv6_wire.h"

namespace abox::netstack {
namespace {

using namespace ipv6_wire;  // NOLINT(google-build-using-namespace): the builders are this test's vocabulary

constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};
constexpr std::array<std::uint8_t, 6> kGuestMac = {0x02, 0x02, 0x02, 0x02, 0x02, 0x02};  // ipv6_frame's
constexpr Ipv6Prefix64 kPrefix = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0};
constexpr Address kGatewayLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kGatewayGlobal = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kAllRouters = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
constexpr Address kAllNodes = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

Bytes sllao() {
  Bytes o{1, 1};
  o.insert(o.end(), kGuestMac.begin(), kGuestMac.end());
  return o;
}
Bytes rs_body(bool with_sllao = true) {
  Bytes b(4, 0);
  if (with_sllao) {
    const Bytes o = sllao();
    b.insert(b.end(), o.begin(), o.end());
  }
  return b;
}
Bytes ns_body(const Address& target, bool with_sllao = true) {
  Bytes b(4, 0);
  b.insert(b.end(), target.begin(), target.end());
  if (with_sllao) {
    const Bytes o = sllao();
    b.insert(b.end(), o.begin(), o.end());
  }
  return b;
}

struct Reply {
  Bytes frame;
  Ipv6Fields ip;
  std::array<std::uint8_t, 6> dst_mac{};
  std::array<std::uint8_t, 6> src_mac{};
};

class NdpResponderTest : public ::testing::Test {
 protected:
  NdpResponderTest() : ndp_(NdpConfig{kGatewayMac, kPrefix, 1500, 1800}) {}

  NdpResult handle(const Bytes& f) {
    frame_ = f;
    const auto v = GuestFrame::parse(frame_);
    EXPECT_TRUE(v.ok());
    if (!v.ok()) return {};
    view_.emplace(*v);
    return ndp_.handle(frame_, *view_, now_);
  }
  // The reply, parsed, its checksum and hop limit checked.
  static Reply read(const NdpResult& r) {
    Reply out;
    out.frame.assign(r.reply.begin(), r.reply.end());
    const auto v = GuestFrame::parse(out.frame);
    EXPECT_TRUE(v.ok());
    if (!v.ok()) return out;
    out.ip = v->ipv6();
    EXPECT_EQ(out.ip.hop_limit, 255);
    EXPECT_EQ(out.ip.upper_protocol, 58);
    EXPECT_EQ(icmpv6_checksum_sum(out.ip.source, out.ip.destination, out.ip.upper_layer), 0)
        << "reply checksum";
    std::copy(out.frame.begin(), out.frame.begin() + 6, out.dst_mac.begin());
    std::copy(out.frame.begin() + 6, out.frame.begin() + 12, out.src_mac.begin());
    return out;
  }

  NdpResponder ndp_;
  Bytes frame_;
  std::optional<GuestFrame> view_;
  base::MonoTime now_ = base::MonoTime{} + base::Seconds(100);
};

// The options of an RA, by type.
struct RaOptions {
  std::optional<std::array<std::uint8_t, 6>> source_mac;
  std::optional<std::uint32_t> mtu;
  std::optional<Bytes> prefix_option;  // the whole 32 bytes
  std::optional<Bytes> rdnss_option;   // the whole 24 bytes
};
RaOptions ra_options(std::span<const std::uint8_t> msg) {
  RaOptions o;
  std::size_t at = 16;
  while (at + 2 <= msg.size()) {
    const std::size_t len = std::size_t{msg[at + 1]} * 8;
    EXPECT_GT(len, 0u);
    if (len == 0 || at + len > msg.size()) break;
    const Bytes opt(msg.begin() + static_cast<long>(at), msg.begin() + static_cast<long>(at + len));
    switch (opt[0]) {
      case 1: {
        std::array<std::uint8_t, 6> m{};
        std::copy(opt.begin() + 2, opt.begin() + 8, m.begin());
        o.source_mac = m;
        break;
      }
      case 5:
        o.mtu = abox::testing::get32(opt, 4);
        break;
      case 3:
        o.prefix_option = opt;
        break;
      case 25:
        o.rdnss_option = opt;
        break;
      default:
        ADD_FAILURE() << "unexpected option " << int{opt[0]};
    }
    at += len;
  }
  EXPECT_EQ(at, msg.size());
  return o;
}

TEST_F(NdpResponderTest, ARouterSolicitationGetsTheInstancesPrefixMtuAndDns) {
  const NdpResult r = handle(ndp(133, rs_body(), kLinkLocal, kAllRouters));
  ASSERT_EQ(r.outcome, NdpOutcome::router_advertisement);
  const Reply reply = read(r);
  EXPECT_EQ(reply.dst_mac, kGuestMac);
  EXPECT_EQ(reply.src_mac, kGatewayMac);
  EXPECT_EQ(reply.ip.source, kGatewayLinkLocal);
  EXPECT_EQ(reply.ip.destination, kLinkLocal);
  const auto msg = reply.ip.upper_layer;
  ASSERT_GE(msg.size(), 16u);
  EXPECT_EQ(msg[0], 134);
  EXPECT_EQ(msg[4], 64);  // current hop limit
  EXPECT_EQ(msg[5], 0);   // no M, no O
  EXPECT_EQ((msg[6] << 8) | msg[7], 1800);
  const RaOptions o = ra_options(msg);
  EXPECT_EQ(o.source_mac, kGatewayMac);
  EXPECT_EQ(o.mtu, 1500u);
  ASSERT_TRUE(o.prefix_option.has_value());
  const Bytes& p = *o.prefix_option;
  ASSERT_EQ(p.size(), 32u);
  EXPECT_EQ(p[2], 64);                        // prefix length
  EXPECT_EQ(p[3], 0xC0);                      // on-link, autonomous
  EXPECT_GT(abox::testing::get32(p, 4), 0u);  // valid
  EXPECT_LE(abox::testing::get32(p, 8), abox::testing::get32(p, 4));
  EXPECT_TRUE(std::equal(kPrefix.begin(), kPrefix.end(), p.begin() + 16));
  EXPECT_TRUE(std::all_of(p.begin() + 24, p.end(), [](std::uint8_t b) { return b == 0; }));
  ASSERT_TRUE(o.rdnss_option.has_value());
  const Bytes& d = *o.rdnss_option;
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(abox::testing::get32(d, 4), 1800u);
  EXPECT_TRUE(std::equal(kGatewayGlobal.begin(), kGatewayGlobal.end(), d.begin() + 8));
  EXPECT_EQ(ndp_.counters().router_advertisements, 1u);
}

TEST_F(NdpResponderTest, ASolicitationFromTheUnspecifiedAddressIsAnsweredToAllNodes) {
  const Reply reply = read(handle(ndp(133, rs_body(false), Address{}, kAllRouters)));
  EXPECT_EQ(reply.ip.destination, kAllNodes);
  EXPECT_EQ(reply.dst_mac, (std::array<std::uint8_t, 6>{0x33, 0x33, 0, 0, 0, 1}));
  // RFC 4861 6.1.1: from :: it must not carry a link-layer address.
  EXPECT_EQ(handle(ndp(133, rs_body(true), Address{}, kAllRouters)).outcome, NdpOutcome::malformed);
}

TEST_F(NdpResponderTest, ARouterLifetimeOfZeroNamesNoRouterAndNoDns) {
  NdpResponder off(NdpConfig{kGatewayMac, kPrefix, 9000, 0, 0});
  const Bytes f = ndp(133, rs_body(), kLinkLocal, kAllRouters);
  const auto v = GuestFrame::parse(f);
  ASSERT_TRUE(v.ok());
  const Reply reply = read(off.handle(f, *v, now_));
  const auto msg = reply.ip.upper_layer;
  EXPECT_EQ((msg[6] << 8) | msg[7], 0);
  const RaOptions o = ra_options(msg);
  EXPECT_EQ(o.mtu, 9000u);
  ASSERT_TRUE(o.rdnss_option.has_value());
  EXPECT_EQ(abox::testing::get32(*o.rdnss_option, 4), 0u);
}

// --ipv6 on: a default router, and the DNS gate on PREFIX::1 as the DNS
// server; a router lifetime alone (RDNSS 0) names a router but no DNS.
TEST_F(NdpResponderTest, RouterAndRdnssLifetimesAreEachTheirOwn) {
  for (const std::uint32_t rdnss : {0u, 1800u}) {
    NdpResponder router(NdpConfig{kGatewayMac, kPrefix, 1500, 1800, rdnss});
    const Bytes f = ndp(133, rs_body(), kLinkLocal, kAllRouters);
    const auto v = GuestFrame::parse(f);
    ASSERT_TRUE(v.ok());
    const Reply reply = read(router.handle(f, *v, now_));
    const auto msg = reply.ip.upper_layer;
    EXPECT_EQ((msg[6] << 8) | msg[7], 1800);
    const RaOptions o = ra_options(msg);
    ASSERT_TRUE(o.rdnss_option.has_value());
    EXPECT_EQ(abox::testing::get32(*o.rdnss_option, 4), rdnss);
    ASSERT_GE(o.rdnss_option->size(), 24u);
    EXPECT_TRUE(std::equal(kGatewayGlobal.begin(), kGatewayGlobal.end(), o.rdnss_option->begin() + 8));
  }
}

TEST_F(NdpResponderTest, NeighbourSolicitationsForTheGatewayAreAnswered) {
  for (const Address& target : {kGatewayLinkLocal, kGatewayGlobal}) {
    const NdpResult r = handle(ndp(135, ns_body(target), kLinkLocal, solicited_node(target)));
    ASSERT_EQ(r.outcome, NdpOutcome::neighbour_advertisement);
    const Reply reply = read(r);
    EXPECT_EQ(reply.dst_mac, kGuestMac);
    EXPECT_EQ(reply.ip.source, target);
    EXPECT_EQ(reply.ip.destination, kLinkLocal);
    const auto msg = reply.ip.upper_layer;
    ASSERT_EQ(msg.size(), 32u);
    EXPECT_EQ(msg[0], 136);
    EXPECT_EQ(msg[4], 0x80 | 0x40 | 0x20);  // router, solicited, override
    EXPECT_TRUE(std::equal(target.begin(), target.end(), msg.begin() + 8));
    EXPECT_EQ(msg[24], 2);  // target link-layer address
    EXPECT_TRUE(std::equal(kGatewayMac.begin(), kGatewayMac.end(), msg.begin() + 26));
  }
  // Duplicate address detection of the gateway's address: defended, to all nodes.
  const Reply dad =
      read(handle(ndp(135, ns_body(kGatewayGlobal, false), Address{}, solicited_node(kGatewayGlobal))));
  EXPECT_EQ(dad.ip.destination, kAllNodes);
  EXPECT_EQ(dad.ip.upper_layer[4], 0x80 | 0x20);  // not solicited
  EXPECT_EQ(ndp_.counters().neighbour_advertisements, 3u);
}

TEST_F(NdpResponderTest, WhatTheGuestShouldNotSendIsIgnoredAndCounted) {
  // Solicitations for other targets (the guest's own DAD among them).
  const Address other = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  EXPECT_EQ(handle(ndp(135, ns_body(other), kLinkLocal, solicited_node(other))).outcome,
            NdpOutcome::not_for_gateway);
  EXPECT_EQ(handle(ndp(135, ns_body(kLinkLocal, false), Address{}, solicited_node(kLinkLocal))).outcome,
            NdpOutcome::not_for_gateway);
  // A router advertisement from the guest, a neighbour advertisement, a redirect.
  EXPECT_EQ(handle(ndp(134, Bytes(12, 0), kLinkLocal, kAllNodes)).outcome,
            NdpOutcome::guest_router_advertisement);
  EXPECT_EQ(handle(ndp(136, ns_body(kLinkLocal), kLinkLocal, kAllNodes)).outcome, NdpOutcome::ignored);
  EXPECT_EQ(handle(ndp(137, Bytes(36, 0), kLinkLocal, kGatewayLinkLocal)).outcome, NdpOutcome::ignored);
  // Not neighbour discovery at all: an echo request is the caller's business.
  EXPECT_EQ(handle(ndp(128, Bytes(4, 0), kLinkLocal, kGatewayLinkLocal)).outcome, NdpOutcome::not_ndp);
  const NdpCounters& c = ndp_.counters();
  EXPECT_EQ(c.not_for_gateway, 2u);
  EXPECT_EQ(c.guest_router_advertisements, 1u);
  EXPECT_EQ(c.ignored, 2u);
  EXPECT_EQ(c.router_advertisements + c.neighbour_advertisements, 0u);
}

TEST_F(NdpResponderTest, MalformedMessagesAreRefused) {
  const Address sn = solicited_node(kGatewayGlobal);
  const Bytes good_ns = ns_body(kGatewayGlobal);
  // Forwarded (hop limit below 255), a non-zero code, a wrong checksum.
  EXPECT_EQ(handle(ndp(135, good_ns, kLinkLocal, sn, 254)).outcome, NdpOutcome::malformed);
  EXPECT_EQ(handle(ndp(135, good_ns, kLinkLocal, sn, 255, 1)).outcome, NdpOutcome::malformed);
  EXPECT_EQ(handle(ndp(135, good_ns, kLinkLocal, sn, 255, 0, false)).outcome, NdpOutcome::malformed);
  EXPECT_EQ(handle(ndp(133, rs_body(), kLinkLocal, kAllRouters, 64)).outcome, NdpOutcome::malformed);
  // Too short for a target; an option of length 0; an option past the end.
  EXPECT_EQ(handle(ndp(135, Bytes(19, 0), kLinkLocal, sn)).outcome, NdpOutcome::malformed);
  Bytes zero_option = ns_body(kGatewayGlobal, false);
  zero_option.insert(zero_option.end(), {1, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(handle(ndp(135, zero_option, kLinkLocal, sn)).outcome, NdpOutcome::malformed);
  Bytes long_option = ns_body(kGatewayGlobal, false);
  long_option.insert(long_option.end(), {1, 2, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(handle(ndp(135, long_option, kLinkLocal, sn)).outcome, NdpOutcome::malformed);
  Bytes odd_option = rs_body(false);
  odd_option.push_back(1);
  EXPECT_EQ(handle(ndp(133, odd_option, kLinkLocal, kAllRouters)).outcome, NdpOutcome::malformed);
  // A multicast target; DAD not to a solicited-node address.
  EXPECT_EQ(handle(ndp(135, ns_body(kAllNodes), kLinkLocal, sn)).outcome, NdpOutcome::malformed);
  EXPECT_EQ(handle(ndp(135, ns_body(kGatewayGlobal, false), Address{}, kAllNodes)).outcome,
            NdpOutcome::malformed);
  EXPECT_EQ(ndp_.counters().malformed, 10u);
  EXPECT_EQ(ndp_.counters().neighbour_advertisements, 0u);
}

TEST_F(NdpResponderTest, AFloodIsAnsweredOnlyUpToTheBucket) {
  const Bytes ns = ndp(135, ns_body(kGatewayLinkLocal), kLinkLocal, solicited_node(kGatewayLinkLocal));
  unsigned answered = 0;
  for (int i = 0; i < 1000; ++i) answered += handle(ns).outcome == NdpOutcome::neighbour_advertisement;
  EXPECT_EQ(answered, NdpResponder::kBurst);
  EXPECT_EQ(ndp_.counters().rate_limited, 1000u - NdpResponder::kBurst);
  now_ += base::Seconds(1);
  answered = 0;
  for (int i = 0; i < 1000; ++i) answered += handle(ns).outcome == NdpOutcome::neighbour_advertisement;
  EXPECT_EQ(answered, NdpResponder::kBurst);  // refilled to the burst, no more
  // Solicitations for random targets take no tokens and get nothing.
  now_ += base::Seconds(10);
  for (std::uint8_t i = 0; i < 200; ++i) {
    Address t = kGatewayGlobal;
    t[15] = static_cast<std::uint8_t>(i + 2);
    EXPECT_EQ(handle(ndp(135, ns_body(t), kLinkLocal, solicited_node(t))).outcome,
              NdpOutcome::not_for_gateway);
  }
  EXPECT_EQ(handle(ns).outcome, NdpOutcome::neighbour_advertisement);
}

TEST(InstanceUlaPrefixTest, AFixedUlaPerInstance) {
  const Ipv6Prefix64 a = instance_ula_prefix("guest1");
  EXPECT_EQ(a[0], 0xFD);
  EXPECT_EQ(a[6], 0);
  EXPECT_EQ(a[7], 0);
  EXPECT_EQ(instance_ula_prefix("guest1"), a);
  EXPECT_NE(instance_ula_prefix("guest2"), a);
  EXPECT_NE(instance_ula_prefix(""), a);
}

}  // namespace
}  // namespace abox::netstack
