// GuestStack's TCP admission, driven with real frames over a StreamLink
// (the test is the guest's VMM): a flow is decided once, at its SYN, and the
// decision reaches the accept; a flow whose host side fails inside the
// accept callback aborts its pcb and tells lwIP so (ERR_ABRT), so lwIP does
// not go on with the segment on a freed pcb (the ASan build caught that
// use-after-free before: the accept callback answered ERR_OK).
//
// Every accept that aborts its pcb is here: the host socket failing, the
// answer expired, the flow limit reached between SYN and accept (by a UDP
// flow), and the gateway's DNS refusing a TCP client past its 64.
//
// The destination is 127.0.0.1:9, lifted by [unsafe] for the test; the
// host side never connects anywhere: the cases that reach the accept make
// socket() fail (RLIMIT_NOFILE), find the answer expired or the flow limit
// reached.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"
#include "netstack/gateway/guest_dns.h"
#include "netstack/stack/guest_frame.h"
#include "netstack/stack/guest_stack.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/stream_stack_support.h"
#include "tests/support/big_endian.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
using abox::testing::put16;
using abox::testing::put32;
using stream_stack_test::write_all;

using guest_wire::arp_request;
using guest_wire::kGatewayMac;
using guest_wire::record;
constexpr std::uint32_t kDst = 0x7F00'0001;  // 127.0.0.1, lifted below
constexpr std::uint16_t kDstPort = 9;
constexpr std::uint32_t kGateway = 0x0A00'0202;  // GuestConfig's default

// `extra`: more of the policy (a [limits] table).
policy::Policy loopback_policy(std::string_view extra) {
  auto p = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n"
      "[[allow]]\nnames = [\"example.com\"]\nports = [9]\nprotocols = [\"tcp\", \"udp\"]\n"
      "[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n" +
          std::string(extra),
      "accept-test.toml");
  if (!p.ok()) ADD_FAILURE() << p.error().to_string();
  return std::move(p).value();
}

// The guest's frames (guest_wire.h), to this test's one destination by default.
Bytes tcp_segment(std::uint16_t port, std::uint8_t flags, std::uint32_t seq, std::uint32_t ack,
                  std::uint32_t dst = kDst, std::uint16_t dst_port = kDstPort) {
  return guest_wire::tcp_segment(port, dst, dst_port, flags, seq, ack, 65535);
}
Bytes udp_datagram(std::uint16_t port, const Bytes& payload) {
  return guest_wire::udp_datagram(port, kDst, kDstPort, payload);
}

struct TcpSeen {
  std::uint8_t flags = 0;
  std::uint32_t seq = 0;
};

class GuestStackAcceptTest : public ::testing::Test {
 protected:
  explicit GuestStackAcceptTest(std::string_view extra_policy = {})
      : policy_(loopback_policy(extra_policy)), rig_(1500, [this] { return now_; }) {}

  void SetUp() override {
    ASSERT_TRUE(rig_.link);
    GuestConfig config;
    config.gateway_mac = kGatewayMac;
    stack_ = std::make_unique<GuestStack>(rig_.loop, *rig_.link, policy_, rig_.upstreams, rig_.events,
                                          rig_.random, config);
    send(arp_request());
  }

  // Writes one frame as the VMM and turns the stack until it is handled.
  void send(const Bytes& frame) { stream_stack_test::send_frame(rig_, *stack_, frame); }
  // Every TCP segment the gateway sent the guest since the last call.
  std::vector<TcpSeen> tcp_out() {
    std::vector<TcpSeen> out;
    for (const Bytes& frame : sent_.take()) {
      if (const auto v = GuestFrame::parse(frame); v.ok() && v->is_tcp()) {
        base::ByteReader r(frame);
        (void)r.skip(14 + 20 + 4);  // lwIP sends no IP options
        out.push_back({v->transport().tcp_flags, r.u32be().value_or(0)});
      }
    }
    return out;
  }
  // SYN, and the gateway's SYN-ACK: its sequence number.
  std::optional<std::uint32_t> handshake_to_syn_ack(std::uint32_t dst = kDst,
                                                    std::uint16_t dst_port = kDstPort) {
    return handshake_to_syn_ack(port_, dst, dst_port);
  }
  std::optional<std::uint32_t> handshake_to_syn_ack(std::uint16_t port, std::uint32_t dst,
                                                    std::uint16_t dst_port) {
    send(tcp_segment(port, 0x02, 1000, 0, dst, dst_port));
    for (const TcpSeen& s : tcp_out()) {
      if (s.flags == 0x12) return s.seq;
    }
    return std::nullopt;
  }
  // Whether the gateway sent the guest a RST since the last tcp_out().
  bool reset_seen() {
    bool reset = false;
    for (const TcpSeen& s : tcp_out()) reset = reset || (s.flags & 0x04) != 0;
    return reset;
  }
  void answer(base::Seconds ttl) {
    const base::MonoTime now = rig_.loop.now();
    stack_->answer_table().record(policy::IpAddress::v4(kDst), "example.com", now + ttl, now);
  }

  base::MonoTime now_ = base::MonoTime{} + base::Seconds(1000);  // the loop's clock: moved by hand
  const policy::Policy policy_;
  stream_stack_test::StreamStackRig rig_;
  stream_stack_test::FramesSentBack sent_{rig_.vmm.get()};
  std::unique_ptr<GuestStack> stack_;
  // lwIP is process-global and keeps pcbs across stacks: each test its own port.
  static inline std::uint16_t next_port_ = 40000;
  std::uint16_t port_ = next_port_++;
};

TEST_F(GuestStackAcceptTest, AnUnansweredSynIsRefusedOnceCountedOnce) {
  send(tcp_segment(port_, 0x02, 1000, 0));
  const auto seen = tcp_out();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].flags & 0x04, 0x04) << "a RST";
  EXPECT_EQ(stack_->counters().tcp_refused, 1u);
  EXPECT_EQ(stack_->counters().syn_reset, 1u);
  EXPECT_EQ(stack_->counters().syn_dropped, 0u);
  EXPECT_EQ(stack_->counters().tcp_admitted, 0u);
}

// The host side fails inside the accept callback (no fd for its socket):
// the pcb is aborted, the guest gets a RST, and lwIP is told (ERR_ABRT);
// before, lwIP went on with the ACK on the freed pcb (ASan: use after free).
TEST_F(GuestStackAcceptTest, AHostSocketThatFailsInsideTheAcceptAbortsCleanly) {
  answer(base::Seconds(60));
  // A flow that starts as usual first (its host connect to 127.0.0.1:9 is
  // refused later, on the loop). It also lets the sanitizers' runtime see a
  // TcpFlow once: UBSan's type check reads /proc for an unknown type, and
  // would find no fd for that below.
  const std::uint16_t first_port = port_;
  port_ = next_port_++;
  send(tcp_segment(first_port, 0x02, 100, 0));
  std::optional<std::uint32_t> first_syn_ack;
  for (const TcpSeen& s : tcp_out()) {
    if (s.flags == 0x12) first_syn_ack = s.seq;
  }
  ASSERT_TRUE(first_syn_ack.has_value()) << "no SYN-ACK";
  send(tcp_segment(first_port, 0x10, 101, *first_syn_ack + 1));
  ASSERT_EQ(stack_->counters().tcp_admitted, 1u);

  const auto syn_ack = handshake_to_syn_ack();
  ASSERT_TRUE(syn_ack.has_value()) << "no SYN-ACK";
  EXPECT_EQ(stack_->counters().syn_reset, 0u);

  // Every fd from the lowest free one up is out of reach.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit tight = before;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  write_all(rig_.vmm.get(), record(tcp_segment(port_, 0x10, 1001, *syn_ack + 1)));
  stack_->poll_link();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
  rig_.loop.run_once(base::Millis(0));

  EXPECT_EQ(stack_->counters().tcp_admitted, 2u);
  EXPECT_LE(stack_->tcp_flows(), 1u) << "the second flow is retired";
  bool reset = false;
  for (const TcpSeen& s : tcp_out()) reset = reset || (s.flags & 0x04) != 0;
  EXPECT_TRUE(reset) << "the guest is told with a RST";
  // The stack goes on: the next flow is decided as ever.
  send(tcp_segment(port_, 0x02, 5000, 0));
  EXPECT_GE(tcp_out().size(), 1u);
  // The guest resets that handshake: lwIP's pcbs outlive the stack, and a
  // half-open one would count against the next test's limits.
  send(tcp_segment(port_, 0x04, 5001, 0));
}

// The decision made at the SYN carries to the accept; an answer that
// expired during the handshake refuses the flow there, counted and logged.
TEST_F(GuestStackAcceptTest, AnAnswerThatExpiresDuringTheHandshakeRefusesAtTheAccept) {
  answer(base::Seconds(10));
  const auto syn_ack = handshake_to_syn_ack();
  ASSERT_TRUE(syn_ack.has_value()) << "no SYN-ACK";
  now_ += base::Seconds(10);  // the guest's ACK comes as the answer expires
  rig_.loop.run_once(base::Millis(0));
  send(tcp_segment(port_, 0x10, 1001, *syn_ack + 1));
  EXPECT_EQ(stack_->counters().tcp_admitted, 0u);
  EXPECT_EQ(stack_->counters().tcp_refused, 1u);
  EXPECT_EQ(stack_->tcp_flows(), 0u);
}

// The flow limit is exact at the accept: a UDP flow that took the last
// place while the handshake was in progress refuses the TCP flow there
// (its pcb aborted, lwIP told ERR_ABRT), counted as a limit.
class GuestStackFlowLimitTest : public GuestStackAcceptTest {
 protected:
  GuestStackFlowLimitTest() : GuestStackAcceptTest("[limits]\nflows = 1\nhalf_open = 1\n") {}
};

TEST_F(GuestStackFlowLimitTest, AFlowLimitReachedBetweenSynAndAcceptAbortsCleanly) {
  ASSERT_EQ(stack_->flow_gauges().tcp_half_open, 0u) << "a handshake left by an earlier test";
  answer(base::Seconds(60));
  const auto syn_ack = handshake_to_syn_ack();
  ASSERT_TRUE(syn_ack.has_value()) << "no SYN-ACK";
  send(udp_datagram(next_port_++, {1, 2, 3}));
  ASSERT_EQ(stack_->udp_flows(), 1u) << "the UDP flow takes the last place";
  send(tcp_segment(port_, 0x10, 1001, *syn_ack + 1));
  EXPECT_EQ(stack_->counters().tcp_admitted, 0u);
  EXPECT_EQ(stack_->counters().limit_flows, 1u);
  EXPECT_EQ(stack_->tcp_flows(), 0u);
  EXPECT_TRUE(reset_seen()) << "the guest is told with a RST";
  // The stack goes on: the next SYN meets the limit at once.
  send(tcp_segment(next_port_++, 0x02, 5000, 0));
  EXPECT_TRUE(reset_seen());
  EXPECT_EQ(stack_->counters().limit_flows, 2u);
}

// The gateway's DNS serves at most kMaxTcpClients TCP clients; the next is
// aborted in its accept callback, which must answer lwIP ERR_ABRT (it
// answered ERR_OK before, and lwIP went on with the freed pcb).
TEST_F(GuestStackAcceptTest, ATcpDnsClientPastTheBoundIsAbortedCleanly) {
  const std::size_t bound = GuestDns::kMaxTcpClients;
  for (std::size_t i = 0; i < bound; ++i) {
    const std::uint16_t port = next_port_++;
    const auto syn_ack = handshake_to_syn_ack(port, kGateway, 53);
    ASSERT_TRUE(syn_ack.has_value()) << "no SYN-ACK for client " << i;
    send(tcp_segment(port, 0x10, 1001, *syn_ack + 1, kGateway, 53));
  }
  ASSERT_EQ(stack_->dns().counters().tcp_accepted, bound);
  ASSERT_FALSE(reset_seen());
  const std::uint16_t port = next_port_++;
  const auto syn_ack = handshake_to_syn_ack(port, kGateway, 53);
  ASSERT_TRUE(syn_ack.has_value()) << "no SYN-ACK";
  send(tcp_segment(port, 0x10, 1001, *syn_ack + 1, kGateway, 53));
  EXPECT_EQ(stack_->dns().counters().tcp_accepted, bound);
  EXPECT_EQ(stack_->dns().counters().tcp_refused, 1u);
  EXPECT_TRUE(reset_seen()) << "the client past the bound is told with a RST";
}

}  // namespace
}  // namespace abox::netstack
