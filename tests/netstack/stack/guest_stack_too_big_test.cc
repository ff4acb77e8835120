// A GuestStack given frames over the link's MTU (1500 here) through a
// StreamLink (the test is the VMM): the link drops each and hands over its
// head (link.h), and the stack answers the guest with ICMPv6 Packet Too Big
// (RFC 4443 3.2) or ICMP fragmentation needed (RFC 1191) when the frame
// would have passed every other check (packet_too_big.h): the right MTU,
// checksums that add up, the invoking packet quoted within 1280 (IPv6) or
// 576 (IPv4) bytes. Nothing for IPv4 without DF, a spoofed source, a
// multicast destination, an ICMPv6 error, IPv6 while flows are off; and the
// answers share the ICMP error bucket (20, then 10 a second).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "netstack/stack/guest_frame.h"
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/ipv6_guest_checks.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/ipv6_wire.h"
#include "tests/netstack/stack/stream_stack_support.h"

namespace abox::netstack {
namespace {

using ipv6_wire::Address;
using ipv6_wire::Bytes;
using stream_stack_test::write_all;

constexpr std::size_t kMtu = 1500;
constexpr Address kGatewayLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

std::uint16_t get16(const Bytes& b, std::size_t at) {
  return static_cast<std::uint16_t>(b.at(at) << 8 | b.at(at + 1));
}

// An IPv6 frame of `size` bytes in all (a UDP datagram, or an echo request
// when `echo`), from `src` to `dst`.
Bytes ipv6_of_size(std::size_t size, const Address& src, const Address& dst,
                   std::uint8_t next = ipv6_wire::kUdp, std::uint8_t icmp_type = 128) {
  const std::size_t upper = size - 14 - 40;
  Bytes payload;
  if (next == ipv6_wire::kUdp) {
    payload = ipv6_wire::udp(40000, 443, Bytes(upper - 8, 0x5A));
  } else {
    payload = ipv6_wire::icmpv6(icmp_type, 0, upper - 4);
  }
  for (std::size_t i = 8; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
  return ipv6_wire::ipv6_frame(next, payload, src, dst);
}

// An IPv4 UDP frame of `size` bytes in all from the guest to `dst`, with DF
// when asked (the header checksum made right again).
Bytes ipv4_of_size(std::size_t size, std::uint32_t dst, bool dont_fragment,
                   std::uint32_t src = guest_wire::kGuest) {
  Bytes payload(size - 14 - 20 - 8);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 3);
  Bytes f = guest_wire::udp_datagram(40000, dst, 443, payload);
  constexpr std::size_t ip = 14;
  if (dont_fragment) f[ip + 6] = 0x40;
  for (std::size_t i = 0; i < 4; ++i) f[ip + 12 + i] = static_cast<std::uint8_t>(src >> (24 - 8 * i));
  f[ip + 10] = f[ip + 11] = 0;
  const std::uint16_t sum = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(ip, 20)));
  f[ip + 10] = static_cast<std::uint8_t>(sum >> 8);
  f[ip + 11] = static_cast<std::uint8_t>(sum);
  return f;
}

class GuestStackTooBigTest : public ::testing::Test {
 protected:
  GuestStackTooBigTest() : rig_(kMtu) {}
  void SetUp() override { make(config()); }
  virtual GuestConfig config() const {
    GuestConfig c;
    c.instance = "too-big-test";
    c.ipv6_neighbour_discovery = true;
    c.ipv6_flows = true;
    return c;
  }
  void make(const GuestConfig& config) {
    ASSERT_TRUE(rig_.link);
    stack_ = std::make_unique<GuestStack>(rig_.loop, *rig_.link, rig_.policy, rig_.upstreams, rig_.events,
                                          rig_.random, config);
    (void)frames_sent_back();
  }
  void send(const Bytes& frame) { stream_stack_test::send_frame(rig_, *stack_, frame); }
  // The frames the stack sent the guest since the last call.
  std::vector<Bytes> frames_sent_back() { return sent_.take(); }
  // The "packet too big" answers among them (lwIP sends its own frames
  // too: neighbour and router solicitations, ARP).
  std::vector<Bytes> answers() {
    std::vector<Bytes> out;
    for (Bytes& f : frames_sent_back()) {
      const auto v = GuestFrame::parse(f);
      if (!v.ok()) continue;
      const bool v6 =
          v->is_ipv6() && v->ipv6().upper_protocol == ipv6_wire::kIcmpv6 && v->ipv6().icmp_type == 2;
      const bool v4 = v->is_ipv4() && v->ipv4().protocol == 1 && f.size() >= 14 + 20 + 2 && f[14 + 20] == 3 &&
                      f[14 + 21] == 4;
      if (v6 || v4) out.push_back(std::move(f));
    }
    return out;
  }
  Address gateway_global() const {
    const Ipv6Prefix64 prefix = instance_ula_prefix("too-big-test");
    Address a{};
    std::copy(prefix.begin(), prefix.end(), a.begin());
    a[15] = 1;
    return a;
  }

  stream_stack_test::StreamStackRig rig_;
  stream_stack_test::FramesSentBack sent_{rig_.vmm.get()};
  std::unique_ptr<GuestStack> stack_;
};

// The one Packet Too Big, checked field by field: from the address the
// datagram was sent to, to its source and MAC, MTU 1500, a checksum that
// adds up, and the datagram quoted from its IPv6 header on, 1280 bytes in
// all.
TEST_F(GuestStackTooBigTest, AnIpv6FrameOverTheMtuGetsOnePacketTooBig) {
  const Bytes big = ipv6_of_size(kMtu + 14 + 500, ipv6_wire::kLinkLocal, ipv6_wire::kServer);
  send(big);
  const auto back = answers();
  ASSERT_EQ(back.size(), 1u);
  const Bytes& f = back[0];
  const auto view = GuestFrame::parse(f);
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(view->is_ipv6());
  const Ipv6Fields& ip = view->ipv6();
  EXPECT_EQ(f.size(), 14u + 1280u) << "as much as fits in the IPv6 minimum MTU";
  EXPECT_TRUE(std::equal(f.begin(), f.begin() + 6, big.begin() + 6)) << "to the guest's MAC";
  EXPECT_TRUE(std::equal(f.begin() + 6, f.begin() + 12, GuestConfig{}.gateway_mac.begin()));
  EXPECT_EQ(ip.source, ipv6_wire::kServer);
  EXPECT_EQ(ip.destination, ipv6_wire::kLinkLocal);
  EXPECT_EQ(ip.upper_protocol, ipv6_wire::kIcmpv6);
  EXPECT_EQ(ip.icmp_type, 2);
  EXPECT_EQ(ip.icmp_code, 0);
  ASSERT_EQ(ip.upper_layer.size(), 8u + 1232u);
  const Bytes icmp(ip.upper_layer.begin(), ip.upper_layer.end());
  EXPECT_EQ((std::uint32_t{get16(icmp, 4)} << 16) | get16(icmp, 6), kMtu);
  EXPECT_EQ(ipv6_wire::icmpv6_checksum_sum(ip.source, ip.destination, icmp), 0) << "the checksum adds up";
  EXPECT_TRUE(std::equal(icmp.begin() + 8, icmp.end(), big.begin() + 14)) << "the invoking packet, quoted";
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_sent, 1u);
  EXPECT_EQ(rig_.link->counters().dropped_oversize, 1u);
  EXPECT_EQ(stack_->counters().frames_in, 0u) << "the frame itself never reached the stack";
}

// From the gateway's own address for an echo request to it (ping -M do),
// and from its link-local one for another on-link destination.
TEST_F(GuestStackTooBigTest, TheAnswerComesFromTheGatewayForOnLinkDestinations) {
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, gateway_global(), ipv6_wire::kIcmpv6, 128));
  Address neighbour = kGatewayLinkLocal;
  neighbour[15] = 0x99;
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, neighbour));
  const auto back = answers();
  ASSERT_EQ(back.size(), 2u);
  const auto first = GuestFrame::parse(back[0]);
  const auto second = GuestFrame::parse(back[1]);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->ipv6().icmp_type, 2);
  EXPECT_EQ(first->ipv6().source, gateway_global());
  EXPECT_EQ(second->ipv6().icmp_type, 2);
  EXPECT_EQ(second->ipv6().source, kGatewayLinkLocal);
}

// Nothing for what abox-net would have refused anyway: a spoofed source, a
// multicast destination, an ICMPv6 error, an echo request to another host
// (lwIP answers the gateway's only), an extension header; and a frame
// under the MTU gets none either.
TEST_F(GuestStackTooBigTest, NothingForAFrameRefusedForAnotherReason) {
  const Address spoofed = ipv6_wire::kServer;
  const Address multicast = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFB};
  send(ipv6_of_size(2000, spoofed, ipv6_wire::kServer));
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, multicast));
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, ipv6_wire::kServer, ipv6_wire::kIcmpv6, 1));  // unreachable
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, ipv6_wire::kServer, ipv6_wire::kIcmpv6, 128));
  send(ipv6_wire::ipv6_frame(ipv6_wire::kDestOpts,
                             ipv6_wire::ext(ipv6_wire::kUdp, ipv6_wire::udp(1, 2, Bytes(1900))),
                             ipv6_wire::kLinkLocal, ipv6_wire::kServer));
  send(ipv4_of_size(2000, 0x5DB8'D822, true, 0x0A00'0263));    // IPv4 with DF from another address
  send(ipv6_of_size(1000, ipv6_wire::kLinkLocal, multicast));  // under the MTU: dropped as not carried
  EXPECT_TRUE(answers().empty());
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_sent, 0u);
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_limited, 0u);
  EXPECT_EQ(rig_.link->counters().dropped_oversize, 6u);
}

// IPv4 with DF: ICMP type 3 code 4 from the destination, the next-hop MTU
// in the second half of the unused word (RFC 1191), both checksums right,
// the datagram quoted within 576 bytes. Without DF: dropped as before.
TEST_F(GuestStackTooBigTest, Ipv4WithDfGetsFragmentationNeededAndWithoutDfNothing) {
  constexpr std::uint32_t kServer4 = 0x5DB8'D822;  // 93.184.216.34
  send(ipv4_of_size(2000, kServer4, false));
  EXPECT_TRUE(answers().empty()) << "no DF: the guest's kernel would fragment; nothing to say";
  const Bytes big = ipv4_of_size(2000, kServer4, true);
  send(big);
  const auto back = answers();
  ASSERT_EQ(back.size(), 1u);
  const Bytes& f = back[0];
  const auto view = GuestFrame::parse(f);
  ASSERT_TRUE(view.ok()) << "IPv4 header checksum and lengths add up";
  ASSERT_TRUE(view->is_ipv4());
  EXPECT_EQ(view->ipv4().protocol, 1);
  const auto invoking = GuestFrame::parse(big);
  ASSERT_TRUE(invoking.ok());
  EXPECT_EQ(view->ipv4().source_net, invoking->ipv4().destination_net) << "from the destination";
  EXPECT_EQ(view->ipv4().destination_net, invoking->ipv4().source_net);
  EXPECT_EQ(f.size(), 14u + 576u);
  const std::size_t icmp = 14 + 20;
  EXPECT_EQ(f[icmp], 3);
  EXPECT_EQ(f[icmp + 1], 4);
  EXPECT_EQ(get16(f, icmp + 4), 0);
  EXPECT_EQ(get16(f, icmp + 6), kMtu);
  EXPECT_EQ(fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(icmp))), 0);
  EXPECT_TRUE(std::equal(f.begin() + icmp + 8, f.end(), big.begin() + 14));
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_sent, 1u);
  EXPECT_EQ(rig_.link->counters().dropped_oversize, 2u);
}

// The ICMP error bucket is shared with the unreachables: a guest spraying
// oversize frames gets 20 answers, then none until it refills; every frame
// is still dropped and counted.
TEST_F(GuestStackTooBigTest, AnswersAreRateLimited) {
  for (int i = 0; i < 30; ++i) send(ipv6_of_size(1600, ipv6_wire::kLinkLocal, ipv6_wire::kServer));
  EXPECT_EQ(answers().size(), 20u);
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_sent, 20u);
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_limited, 10u);
  EXPECT_EQ(rig_.link->counters().dropped_oversize, 30u);
}

// With IPv6 flows off every IPv6 frame is dropped as not carried: an
// oversize one gets nothing either (IPv4 still does).
class GuestStackTooBigNoIpv6Test : public GuestStackTooBigTest {
 protected:
  GuestConfig config() const override { return GuestConfig{}; }
};

TEST_F(GuestStackTooBigNoIpv6Test, NoPacketTooBigWhileIpv6IsNotCarried) {
  send(ipv6_of_size(2000, ipv6_wire::kLinkLocal, ipv6_wire::kServer));
  EXPECT_TRUE(answers().empty());
  send(ipv4_of_size(2000, 0x5DB8'D822, true));
  EXPECT_EQ(answers().size(), 1u);
  EXPECT_EQ(stack_->counters().icmp_packet_too_big_sent, 1u);
}

}  // namespace
}  // namespace abox::netstack
