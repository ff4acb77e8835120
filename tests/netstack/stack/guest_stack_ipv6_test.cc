// A GuestStack given IPv6 frames over a StreamLink (the test is the VMM):
// until abox-net carries IPv6 (issue 21), every IPv6 frame is dropped, and
// each is counted under what is wrong with it: malformed, a routing header,
// a fragment, a first fragment hiding its upper layer, a next header nothing
// can see past, a spoofed source; a well-formed one from the guest's own
// link-local address as "not supported yet". Nothing goes back to the guest
// and no flow is admitted or refused.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "netstack/gateway/guest_dns.h"
#include "netstack/stack/guest_stack.h"
#include "tests/netstack/gateway/dhcpv6_wire.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/ipv6_wire.h"
#include "tests/netstack/stack/stream_stack_support.h"

namespace abox::netstack {
namespace {

using namespace ipv6_wire;  // NOLINT(google-build-using-namespace): the builders are this test's vocabulary
using stream_stack_test::write_all;

class GuestStackIpv6Test : public ::testing::Test {
 protected:
  GuestStackIpv6Test() : rig_(1500) {}
  void SetUp() override { make(config()); }
  virtual GuestConfig config() const { return GuestConfig{}; }
  // Once per test: a GuestDns leaves its deadline with the loop, so a second
  // stack on the same loop would find the first one's freed (ASan).
  void make(const GuestConfig& config) {
    ASSERT_TRUE(rig_.link);
    stack_ = std::make_unique<GuestStack>(rig_.loop, *rig_.link, rig_.policy, rig_.upstreams, rig_.events,
                                          rig_.random, config);
    (void)sent_back();
  }
  void send(const Bytes& frame) { stream_stack_test::send_frame(rig_, *stack_, frame); }
  // The frames the stack sent the guest since the last call.
  std::vector<Bytes> frames_sent_back() { return sent_.take(); }
  // The IPv6 frames the stack sent the guest since the last call. Their
  // spans (upper_layer) point into last_sent_, kept until the next call.
  std::vector<Ipv6Fields> ipv6_sent_back() {
    std::vector<Ipv6Fields> out;
    last_sent_ = frames_sent_back();
    for (const Bytes& f : last_sent_)
      if (const auto v = GuestFrame::parse(f); v.ok() && v->is_ipv6()) out.push_back(v->ipv6());
    return out;
  }
  std::vector<EtherKind> sent_back() {
    std::vector<EtherKind> kinds;
    for (const Bytes& f : frames_sent_back()) {
      const auto v = GuestFrame::parse(f);
      kinds.push_back(v.ok() ? v->kind() : EtherKind::other);
    }
    return kinds;
  }

  stream_stack_test::StreamStackRig rig_;
  stream_stack_test::FramesSentBack sent_{rig_.vmm.get()};
  std::unique_ptr<GuestStack> stack_;
  std::vector<Bytes> last_sent_;
};

TEST_F(GuestStackIpv6Test, EveryIpv6FrameIsDroppedAndCountedUnderItsReason) {
  const Address global = kServer;
  const Address ula = {0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x15};
  const Bytes syn = tcp(40000, 443, 0x02);
  // Malformed: the header cut short.
  Bytes cut = ipv6_frame(kTcp, syn);
  cut.resize(14 + 30);
  send(cut);
  // Extension-header tricks, each from the guest's own link-local address.
  send(ipv6_frame(kRouting, routing(kTcp, 0, syn)));             // routing header type 0
  send(ipv6_frame(kFragment, fragment(kTcp, 0, true, {0, 1})));  // a first fragment hiding TCP
  send(ipv6_frame(253, syn));                                    // an unknown next header before TCP
  send(ipv6_frame(kFragment, fragment(kTcp, 1, false, syn)));    // a later fragment
  // Spoofed sources: a global address, a ULA that is not the instance's, ::
  // for anything but ICMPv6.
  send(ipv6_frame(kTcp, syn, global));
  send(ipv6_frame(kUdp, udp(40000, 53, {1}), ula));
  send(ipv6_frame(kUdp, udp(40000, 53, {1}), Address{}));
  // Well formed, from the guest: IPv6 is not carried yet.
  send(ipv6_frame(kTcp, syn));
  send(ipv6_frame(kIcmpv6, icmpv6(133, 0), Address{}));  // a router solicitation from ::

  const StackCounters& c = stack_->counters();
  EXPECT_EQ(c.frames_in, 10u);
  EXPECT_EQ(c.frames_dropped_malformed, 1u);
  EXPECT_EQ(c.frames_dropped_ipv6_extension, 3u);
  EXPECT_EQ(c.frames_dropped_fragment, 1u);
  EXPECT_EQ(c.frames_dropped_spoofed, 3u);
  EXPECT_EQ(c.frames_dropped_ipv6, 2u);
  EXPECT_EQ(c.tcp_admitted + c.tcp_refused + c.udp_admitted + c.udp_refused, 0u);
  for (const EtherKind k : sent_back())
    EXPECT_NE(k, EtherKind::ipv6) << "an IPv6 frame went back to the guest";
}

// With neighbour discovery on (GuestConfig::ipv6_neighbour_discovery), the
// gateway answers router and neighbour solicitations, ignores the guest's
// router advertisements (counted), and the guest's addresses in the
// instance's /64 pass the source check; everything else is still dropped.
class GuestStackNdpTest : public GuestStackIpv6Test {
 protected:
  GuestConfig config() const override {
    GuestConfig c;
    c.instance = "ipv6-test";
    c.ipv6_neighbour_discovery = true;
    return c;
  }
};

TEST_F(GuestStackNdpTest, NeighbourDiscoveryIsAnsweredWhenOn) {
  const Ipv6Prefix64 prefix = instance_ula_prefix("ipv6-test");
  Address gateway_global{};
  std::copy(prefix.begin(), prefix.end(), gateway_global.begin());
  gateway_global[15] = 1;
  const Address all_routers = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  const Address all_nodes = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

  send(ndp(133, Bytes(4, 0), kLinkLocal, all_routers));
  auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].icmp_type, 134);
  EXPECT_EQ(back[0].destination, kLinkLocal);
  // The prefix information option carries the instance's /64.
  const auto ra = back[0].upper_layer;
  bool prefix_seen = false;
  for (std::size_t at = 16; at + 2 <= ra.size() && ra[at + 1] != 0; at += std::size_t{ra[at + 1]} * 8) {
    if (ra[at] == 3 && at + 32 <= ra.size())
      prefix_seen = std::equal(prefix.begin(), prefix.end(), ra.begin() + static_cast<long>(at + 16));
  }
  EXPECT_TRUE(prefix_seen);

  Bytes ns_body(4, 0);
  ns_body.insert(ns_body.end(), gateway_global.begin(), gateway_global.end());
  send(ndp(135, ns_body, kLinkLocal, solicited_node(gateway_global)));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].icmp_type, 136);
  EXPECT_EQ(back[0].source, gateway_global);

  // The guest's router advertisement: ignored, counted, nothing back.
  send(ndp(134, Bytes(12, 0), kLinkLocal, all_nodes));
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->ndp_counters().guest_router_advertisements, 1u);

  // From an address in the instance's /64: the guest's own, so not spoofed
  // (and dropped as not carried yet); from another /64: spoofed.
  Address own = gateway_global;
  own[15] = 0x42;
  Address other = own;
  other[7] = 1;
  const std::uint64_t spoofed = stack_->counters().frames_dropped_spoofed;
  const std::uint64_t not_carried = stack_->counters().frames_dropped_ipv6;
  send(ipv6_frame(kTcp, tcp(40000, 443, 0x02), own));
  send(ipv6_frame(kTcp, tcp(40000, 443, 0x02), other));
  EXPECT_EQ(stack_->counters().frames_dropped_ipv6, not_carried + 1);
  EXPECT_EQ(stack_->counters().frames_dropped_spoofed, spoofed + 1);
  EXPECT_TRUE(ipv6_sent_back().empty());
}

TEST_F(GuestStackIpv6Test, NeighbourDiscoveryIsNotAnsweredWhenOff) {
  send(ndp(133, Bytes(4, 0), kLinkLocal, {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->counters().frames_dropped_ipv6, 1u);
  EXPECT_EQ(stack_->ndp_counters().router_advertisements, 0u);
}

// With IPv6 TCP flows on (GuestConfig::ipv6_flows): the guest's TCP goes
// through lwIP and the same admission as IPv4. A SYN to an address the gate
// never answered is refused with a RST from that address (after lwIP's own
// neighbour solicitation, answered by the guest); one to the gateway's
// address too; echo to the gateway's address is answered, to anything else
// refused (echo flows: guest_stack_echo.cc) unless admitted.
class GuestStackIpv6TcpTest : public GuestStackIpv6Test {
 protected:
  GuestConfig config() const override {
    GuestConfig c;
    c.instance = "ipv6-test";
    c.ipv6_neighbour_discovery = true;
    c.ipv6_flows = true;
    return c;
  }
  // lwIP solicits the guest's address before its first answer; the guest
  // (the test) advertises it, and lwIP sends what it held.
  void resolve_guest(const Address& gateway, const Address& guest = kLinkLocal) {
    const auto back = ipv6_sent_back();
    ASSERT_EQ(back.size(), 1u);
    ASSERT_EQ(back[0].icmp_type, 135);
    Bytes na{0x60, 0, 0, 0};  // solicited, override
    na.insert(na.end(), guest.begin(), guest.end());
    na.insert(na.end(), {2, 1, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02});  // the guest's MAC
    send(ndp(136, na, guest, gateway));
  }
  static Bytes checksummed(std::uint8_t next, Bytes upper, std::size_t field, const Address& src,
                           const Address& dst) {
    std::uint32_t sum = sum16(src);
    sum = sum16(dst, sum);
    sum += static_cast<std::uint32_t>(upper.size());
    sum += next;
    const std::uint16_t c = fold_checksum(sum16(upper, sum));
    upper[field] = static_cast<std::uint8_t>(c >> 8);
    upper[field + 1] = static_cast<std::uint8_t>(c);
    return ipv6_frame(next, upper, src, dst);
  }
};

TEST_F(GuestStackIpv6TcpTest, TcpGoesThroughAdmissionAndEchoIsForTheGatewayOnly) {
  const Ipv6Prefix64 prefix = instance_ula_prefix("ipv6-test");
  Address gateway_global{};
  std::copy(prefix.begin(), prefix.end(), gateway_global.begin());
  gateway_global[15] = 1;
  const Address gateway_link_local = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

  send(checksummed(kTcp, tcp(40000, 443, 0x02), 16, kLinkLocal, kServer));
  auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);  // lwIP resolves the guest before it answers
  EXPECT_EQ(back[0].icmp_type, 135);
  EXPECT_EQ(back[0].source, gateway_link_local);
  Bytes na{0x60, 0, 0, 0};  // solicited, override
  na.insert(na.end(), kLinkLocal.begin(), kLinkLocal.end());
  na.insert(na.end(), {2, 1, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02});  // the guest's MAC
  send(ndp(136, na, kLinkLocal, gateway_link_local));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].source, kServer);
  EXPECT_EQ(back[0].upper_protocol, kTcp);
  ASSERT_GE(back[0].upper_layer.size(), 20u);
  EXPECT_NE(back[0].upper_layer[13] & 0x04, 0);  // RST
  EXPECT_EQ(stack_->counters().tcp_refused, 1u);
  EXPECT_EQ(stack_->counters().syn_reset, 1u);

  send(checksummed(kTcp, tcp(40001, 80, 0x02), 16, kLinkLocal, gateway_global));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].source, gateway_global);
  EXPECT_NE(back[0].upper_layer[13] & 0x04, 0);
  EXPECT_EQ(stack_->counters().syn_reset, 2u);

  send(checksummed(kIcmpv6, icmpv6(128, 0), 2, kLinkLocal, gateway_global));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].icmp_type, 129);
  EXPECT_EQ(back[0].source, gateway_global);
  // Echo to anything else is an echo flow (guest_stack_echo.cc): never
  // answered on the destination's behalf; this one, to an address no answer
  // named, is refused with an administratively prohibited error from the
  // gateway's link-local address (the guest's source is link-local),
  // quoting the request, and a deny event.
  const Bytes echo = checksummed(kIcmpv6, icmpv6(128, 0), 2, kLinkLocal, kServer);
  send(echo);
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].icmp_type, 1);
  EXPECT_EQ(back[0].icmp_code, 1);
  EXPECT_EQ(back[0].source, gateway_link_local);
  EXPECT_EQ(back[0].destination, kLinkLocal);
  ASSERT_EQ(back[0].upper_layer.size(), 8u + echo.size() - kIp);
  EXPECT_TRUE(std::equal(back[0].upper_layer.begin() + 8, back[0].upper_layer.end(), echo.begin() + kIp));
  EXPECT_EQ(stack_->counters().echo_refused, 1u);
  EXPECT_EQ(stack_->echo_flows(), 0u);
  // A checksum left 0 is wrong: malformed, dropped, nothing back.
  const std::uint64_t malformed = stack_->counters().frames_dropped_malformed;
  send(ipv6_frame(kIcmpv6, icmpv6(128, 0), kLinkLocal, kServer));
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->counters().frames_dropped_malformed, malformed + 1);

  EXPECT_EQ(stack_->counters().tcp_admitted + stack_->counters().udp_admitted, 0u);
  EXPECT_EQ(stack_->counters().echo_admitted, 0u);
}

// IPv6 UDP goes through the same admission as IPv4: a datagram to an address
// the gate never answered is refused with an ICMPv6 destination unreachable,
// administratively prohibited (type 1, code 1), from the gateway, quoting
// the datagram; so is one to the gateway's own address on a port other than
// DNS. Multicast UDP (mDNS) stays dropped as not carried.
TEST_F(GuestStackIpv6TcpTest, RefusedUdpGetsAnIcmpv6AdministrativelyProhibited) {
  const Address gateway_link_local = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Bytes datagram = checksummed(kUdp, udp(40002, 443, Bytes(2, 0x68)), 6, kLinkLocal, kServer);
  send(datagram);
  resolve_guest(gateway_link_local);
  auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].upper_protocol, kIcmpv6);
  EXPECT_EQ(back[0].icmp_type, 1);
  EXPECT_EQ(back[0].icmp_code, 1);
  EXPECT_EQ(back[0].source, gateway_link_local);
  EXPECT_EQ(back[0].destination, kLinkLocal);
  // The quote: 4 unused bytes, then the datagram's IPv6 header on.
  ASSERT_GE(back[0].upper_layer.size(), 8u + 40 + 8);
  EXPECT_TRUE(std::equal(back[0].upper_layer.begin() + 8, back[0].upper_layer.begin() + 8 + 40 + 8,
                         datagram.begin() + kIp));
  EXPECT_EQ(stack_->counters().udp_refused, 1u);
  EXPECT_EQ(stack_->counters().icmp_unreachable_sent, 1u);
  EXPECT_EQ(stack_->udp_flows(), 0u);

  send(checksummed(kUdp, udp(40003, 123, {1}), 6, kLinkLocal, gateway_link_local));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].icmp_type, 1);
  EXPECT_EQ(stack_->counters().udp_refused, 2u);

  const std::uint64_t not_carried = stack_->counters().frames_dropped_ipv6;
  const Address mdns = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFB};
  send(checksummed(kUdp, udp(5353, 5353, {1}), 6, kLinkLocal, mdns));
  EXPECT_EQ(stack_->counters().frames_dropped_ipv6, not_carried + 1);
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->counters().udp_refused, 2u);
  EXPECT_EQ(stack_->counters().udp_admitted, 0u);
}

// A guest spraying refused datagrams gets a burst of unreachables, then
// none until the budget refills (the token bucket: 20, then 10 a second):
// every datagram is still refused and counted.
TEST_F(GuestStackIpv6TcpTest, UnreachablesForRefusedUdpAreRateLimited) {
  const Address gateway_link_local = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  send(checksummed(kUdp, udp(41000, 443, {1}), 6, kLinkLocal, kServer));
  resolve_guest(gateway_link_local);
  std::size_t unreachables = ipv6_sent_back().size();
  for (std::uint16_t i = 1; i < 30; ++i) {
    send(checksummed(kUdp, udp(static_cast<std::uint16_t>(41000 + i), 443, {1}), 6, kLinkLocal, kServer));
    for (const Ipv6Fields& f : ipv6_sent_back())
      if (f.upper_protocol == kIcmpv6 && f.icmp_type == 1) ++unreachables;
  }
  EXPECT_EQ(stack_->counters().udp_refused, 30u);
  EXPECT_EQ(unreachables, 20u);
  EXPECT_EQ(stack_->counters().icmp_unreachable_sent, 20u);
  EXPECT_EQ(stack_->counters().icmp_unreachable_limited, 10u);
}

// The DNS gate is served on PREFIX::1 (what the router advertisement's RDNSS
// names), UDP and TCP, by the same gate as on the IPv4 gateway.
TEST_F(GuestStackIpv6TcpTest, TheDnsGateAnswersOnTheGatewaysUlaAddress) {
  const Ipv6Prefix64 prefix = instance_ula_prefix("ipv6-test");
  Address gateway_global{};
  std::copy(prefix.begin(), prefix.end(), gateway_global.begin());
  gateway_global[15] = 1;
  Address guest_ula = gateway_global;
  guest_ula[15] = 0x15;
  // A query for a name the policy does not allow: the gate answers it
  // itself (REFUSED), without an upstream.
  Bytes query = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  for (const std::string_view label : {std::string_view("not-allowed"), std::string_view("example")}) {
    query.push_back(static_cast<std::uint8_t>(label.size()));
    for (const char ch : label) query.push_back(static_cast<std::uint8_t>(ch));
  }
  for (const std::uint8_t b : {0, 0, 28, 0, 1}) query.push_back(b);  // the root, AAAA, IN
  send(checksummed(kUdp, udp(42000, 53, query), 6, guest_ula, gateway_global));
  resolve_guest(gateway_global, guest_ula);
  const auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].upper_protocol, kUdp);
  EXPECT_EQ(back[0].source, gateway_global);
  EXPECT_EQ(back[0].destination, guest_ula);
  ASSERT_GE(back[0].upper_layer.size(), 8u + 12);
  EXPECT_EQ(back[0].upper_layer[8], 0x12);  // the query's ID
  EXPECT_EQ(back[0].upper_layer[9], 0x34);
  EXPECT_NE(back[0].upper_layer[10] & 0x80, 0);  // a response
  EXPECT_EQ(back[0].upper_layer[11] & 0x0F, 5);  // REFUSED
  EXPECT_EQ(stack_->dns().counters().udp_queries, 1u);
  EXPECT_EQ(stack_->counters().udp_refused, 0u);

  // TCP: the gate's own listener completes the handshake (a SYN-ACK, not
  // the RST every other port of the gateway gets).
  send(checksummed(kTcp, tcp(42001, 53, 0x02), 16, guest_ula, gateway_global));
  const auto synack = ipv6_sent_back();
  ASSERT_EQ(synack.size(), 1u);
  EXPECT_EQ(synack[0].upper_layer[13] & 0x12, 0x12);  // SYN, ACK
  EXPECT_EQ(stack_->counters().syn_reset, 0u);
}

// With IPv6 flows on, the stateless DHCPv6 server (dhcpv6_server.h): the
// router advertisement sets O, an Information-Request to ff02::1:2 gets a
// Reply from fe80::1 naming PREFIX::1 (the DNS gate), a Solicit nothing.
TEST_F(GuestStackIpv6TcpTest, AnInformationRequestGetsTheDnsServerAndASolicitNothing) {
  const Ipv6Prefix64 prefix = instance_ula_prefix("ipv6-test");
  Address gateway_global{};
  std::copy(prefix.begin(), prefix.end(), gateway_global.begin());
  gateway_global[15] = 1;
  const Address gateway_link_local = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

  send(ndp(133, Bytes(4, 0), kLinkLocal, {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  ASSERT_EQ(back[0].icmp_type, 134);
  EXPECT_EQ(back[0].upper_layer[5] & 0xC0, 0x40);  // O, not M

  send(dhcpv6_wire::frame(dhcpv6_wire::information_request()));
  back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].upper_protocol, kUdp);
  EXPECT_EQ(back[0].source, gateway_link_local);
  EXPECT_EQ(back[0].destination, kLinkLocal);
  const auto udp_bytes = back[0].upper_layer;
  ASSERT_GE(udp_bytes.size(), 8u + 4 + 20);
  EXPECT_EQ(udp_bytes[8], 7);  // Reply
  EXPECT_EQ(udp_bytes[9], 0xAB);
  // The last option: DNS recursive name servers (23), 16 bytes, PREFIX::1.
  const auto dns = udp_bytes.last(20);
  EXPECT_EQ(dns[1], 23);
  EXPECT_EQ(dns[3], 16);
  EXPECT_TRUE(std::equal(gateway_global.begin(), gateway_global.end(), dns.begin() + 4));
  EXPECT_EQ(stack_->dhcpv6_counters().answered, 1u);

  send(dhcpv6_wire::frame(dhcpv6_wire::message(1, {dhcpv6_wire::option(1, dhcpv6_wire::kClientDuid)})));
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->dhcpv6_counters().ignored, 1u);
  EXPECT_EQ(stack_->counters().frames_dropped_ipv6, 0u);
}

// With neighbour discovery alone (--ipv6 nd), no DHCPv6: the request is
// dropped as not carried, and the router advertisement has no O flag.
TEST_F(GuestStackNdpTest, NoDhcpv6WithoutIpv6Flows) {
  send(ndp(133, Bytes(4, 0), kLinkLocal, {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  auto back = ipv6_sent_back();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].upper_layer[5], 0);
  send(dhcpv6_wire::frame(dhcpv6_wire::information_request()));
  EXPECT_TRUE(ipv6_sent_back().empty());
  EXPECT_EQ(stack_->counters().frames_dropped_ipv6, 1u);
  EXPECT_EQ(stack_->dhcpv6_counters().answered + stack_->dhcpv6_counters().ignored, 0u);
}

}  // namespace
}  // namespace abox::netstack
