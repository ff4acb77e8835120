// UdpFlow, driven without root: the test is the guest (hand-written UDP over
// a StreamLink), the destination a real UDP server on loopback, the loop's
// clock the test's (flow_test_support.h). Datagrams both ways, the shared
// reply pcb keeping two guest ports apart, and every way a flow is
// forgotten (udp_idle_s, the answer's expiry, the destination becoming this
// host's address), reached by moving the clock.
//
// Each test runs twice: host datagrams by the ring (a RingWriter, a
// multishot receive) and by system calls (GuestConfig::host_io_on_ring).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/netstack/stack/flow_test_support.h"

namespace abox::netstack {
namespace {

using flow_test::FlowRig;
using flow_test::LoopbackSocket;
using flow_test::StackOptions;
using flow_test::with;
using guest_wire::Bytes;
using guest_wire::bytes_of;
using guest_wire::Seen;

class UdpFlowTest : public ::testing::TestWithParam<bool> {
 protected:
  void start(StackOptions o = {}, base::Seconds ttl = base::Seconds(3600)) {
    o.port = server_.port;
    o.udp = true;
    o.host_io_on_ring = GetParam();
    rig_.start(o, ttl);
  }
  void from_guest(std::uint16_t port, const Bytes& payload) {
    rig_.send(guest_wire::udp_datagram(port, flow_test::kLoopback, server_.port, payload));
  }
  // The next datagram the server gets (turning the stack meanwhile), and
  // where from.
  std::optional<std::pair<Bytes, sockaddr_in>> at_server() {
    std::optional<std::pair<Bytes, sockaddr_in>> got;
    rig_.turn_until(
        [&] {
          std::uint8_t buf[2048];
          sockaddr_in from{};
          socklen_t len = sizeof from;
          const ssize_t n = ::recvfrom(server_.fd.get(), buf, sizeof buf, MSG_DONTWAIT,
                                       reinterpret_cast<sockaddr*>(&from), &len);
          if (n >= 0) got.emplace(Bytes(buf, buf + n), from);
          return got.has_value();
        },
        [&](std::vector<Seen> s) { seen_.insert(seen_.end(), s.begin(), s.end()); });
    return got;
  }
  void reply(const sockaddr_in& to, const Bytes& payload) {
    ASSERT_EQ(::sendto(server_.fd.get(), payload.data(), payload.size(), 0,
                       reinterpret_cast<const sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(payload.size()));
  }
  // What the guest's `port` got from the server, once `count` came.
  std::vector<Bytes> at_guest(std::uint16_t port, std::size_t count) {
    std::vector<Bytes> out;
    auto collect = [&] {
      out.clear();
      for (const Seen& s : seen_) {
        if (s.proto == 17 && s.dst_port == port && s.src == flow_test::kLoopback &&
            s.src_port == server_.port)
          out.push_back(s.payload);
      }
      return out.size() >= count;
    };
    rig_.turn_until(collect, [&](std::vector<Seen> s) { seen_.insert(seen_.end(), s.begin(), s.end()); });
    collect();
    return out;
  }
  std::size_t flows() { return rig_.stack().udp_flows(); }

  LoopbackSocket server_ = flow_test::loopback_socket(SOCK_DGRAM);
  FlowRig rig_;
  std::vector<Seen> seen_;
};

INSTANTIATE_TEST_SUITE_P(HostIo, UdpFlowTest, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "ring" : "syscalls";
});

TEST_P(UdpFlowTest, DatagramsGoBothWaysOnOneFlow) {
  start();
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("ping"));
  auto got = at_server();
  ASSERT_TRUE(got.has_value()) << "the server got nothing";
  EXPECT_EQ(got->first, bytes_of("ping"));
  reply(got->second, bytes_of("pong"));
  const auto back = at_guest(port, 1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0], bytes_of("pong"));
  // The next datagram takes the same flow (the same host socket).
  from_guest(port, bytes_of("again"));
  auto second = at_server();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->first, bytes_of("again"));
  EXPECT_EQ(second->second.sin_port, got->second.sin_port);
  EXPECT_EQ(flows(), 1u);
  EXPECT_EQ(rig_.stack().counters().udp_admitted, 1u);
}

TEST_P(UdpFlowTest, ABurstFromTheServerArrivesWholeAndInOrder) {
  start();
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("start"));
  auto got = at_server();
  ASSERT_TRUE(got.has_value());
  for (int i = 0; i < 50; ++i) reply(got->second, bytes_of("datagram " + std::to_string(i)));
  const auto back = at_guest(port, 50);
  ASSERT_EQ(back.size(), 50u);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(back[static_cast<std::size_t>(i)], bytes_of("datagram " + std::to_string(i)));
}

// Two guest ports to one destination share the reply pcb; each gets only
// its own answers.
TEST_P(UdpFlowTest, TwoGuestPortsToOneDestinationEachGetTheirOwnAnswers) {
  start();
  const std::uint16_t a = FlowRig::fresh_port();
  const std::uint16_t b = FlowRig::fresh_port();
  from_guest(a, bytes_of("from a"));
  auto at_a = at_server();
  from_guest(b, bytes_of("from b"));
  auto at_b = at_server();
  ASSERT_TRUE(at_a.has_value() && at_b.has_value());
  ASSERT_NE(at_a->second.sin_port, at_b->second.sin_port) << "a host socket each";
  reply(at_b->second, bytes_of("to b"));
  reply(at_a->second, bytes_of("to a"));
  const auto got_a = at_guest(a, 1);
  const auto got_b = at_guest(b, 1);
  ASSERT_EQ(got_a.size(), 1u);
  ASSERT_EQ(got_b.size(), 1u);
  EXPECT_EQ(got_a[0], bytes_of("to a"));
  EXPECT_EQ(got_b[0], bytes_of("to b"));
  EXPECT_EQ(flows(), 2u);
}

TEST_P(UdpFlowTest, AnIdleFlowIsForgottenAfterUdpIdleAndTrafficEitherWayPutsThatOff) {
  start(with("[timeouts]\nudp_idle_s = 10\n"));
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("one"));
  auto got = at_server();
  ASSERT_TRUE(got.has_value());
  rig_.advance(base::Seconds(9));
  EXPECT_EQ(flows(), 1u) << "not before udp_idle_s";
  reply(got->second, bytes_of("answer"));  // host traffic at 9 s
  ASSERT_EQ(at_guest(port, 1).size(), 1u);
  rig_.advance(base::Seconds(9));  // 18 s: 9 s idle
  EXPECT_EQ(flows(), 1u) << "the server's datagram put the idle deadline off";
  rig_.advance(base::Seconds(1));  // 10 s idle
  EXPECT_EQ(flows(), 0u);
  // The guest's next datagram is a new flow, admitted again.
  from_guest(port, bytes_of("two"));
  ASSERT_TRUE(at_server().has_value());
  EXPECT_EQ(rig_.stack().counters().udp_admitted, 2u);
}

TEST_P(UdpFlowTest, AFlowIsForgottenWhenItsAnswerExpiresPastGrace) {
  start(with("grace = 5\n"), base::Seconds(10));
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("one"));
  ASSERT_TRUE(at_server().has_value());
  rig_.advance(base::Seconds(14));
  EXPECT_EQ(flows(), 1u) << "alive within TTL + grace";
  rig_.advance(base::Seconds(1));
  EXPECT_EQ(flows(), 0u);
}

TEST_P(UdpFlowTest, AFlowIsForgottenWhenItsDestinationBecomesAnAddressOfThisHost) {
  start();
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("one"));
  ASSERT_TRUE(at_server().has_value());
  ASSERT_TRUE(rig_.stack().host_addresses().add(policy::IpAddress::v4(flow_test::kLoopback)));
  rig_.advance(base::Seconds(1));
  EXPECT_EQ(flows(), 0u);
}

// ---- live policy reload (GuestStack::apply_policy()) ----------------------

TEST_P(UdpFlowTest, AReloadThatKeepsUdpForTheNameLeavesTheFlow) {
  start();
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("one"));
  auto first = at_server();
  ASSERT_TRUE(first.has_value());
  StackOptions o;
  o.port = server_.port;
  o.udp = true;
  EXPECT_EQ(rig_.reload(FlowRig::policy_text(o)).udp_revoked, 0u);
  from_guest(port, bytes_of("two"));
  auto second = at_server();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->second.sin_port, first->second.sin_port) << "the same host socket";
  EXPECT_EQ(flows(), 1u);
}

TEST_P(UdpFlowTest, AReloadThatDropsUdpForTheNameCutsTheFlowAtOnce) {
  start();
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("one"));
  ASSERT_TRUE(at_server().has_value());
  StackOptions tcp_only;
  tcp_only.port = server_.port;
  const auto applied = rig_.reload(FlowRig::policy_text(tcp_only));
  EXPECT_EQ(applied.udp_revoked, 1u);
  EXPECT_EQ(flows(), 0u) << "cut in the reload's turn, no clock moved";
  EXPECT_EQ(rig_.stack().counters().flows_revoked, 1u);
  // And a new datagram is refused: the rule no longer allows UDP.
  from_guest(port, bytes_of("two"));
  EXPECT_EQ(flows(), 0u);
  EXPECT_GE(rig_.stack().counters().udp_refused, 1u);
}

TEST_P(UdpFlowTest, AuditModeLetsUdpTheRuleDoesNotAllowThrough) {
  StackOptions tcp_only;
  tcp_only.port = server_.port;
  tcp_only.extra = "[mode]\naudit = true\n";
  tcp_only.host_io_on_ring = GetParam();
  rig_.start(tcp_only);
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("audited"));
  auto got = at_server();
  ASSERT_TRUE(got.has_value()) << "audit mode lets what port_not_allowed would refuse through";
  EXPECT_EQ(got->first, bytes_of("audited"));
  EXPECT_EQ(flows(), 1u);
  EXPECT_EQ(rig_.stack().counters().audit_would_deny, 1u);
  EXPECT_EQ(rig_.stack().counters().udp_refused, 0u);
}

TEST_P(UdpFlowTest, CrossingMaxBytesOutCutsTheFlowAndRefusesTheNextDatagram) {
  StackOptions o;
  o.rule_extra = "max_bytes_out = 10\n";
  start(o);
  const std::uint16_t port = FlowRig::fresh_port();
  from_guest(port, bytes_of("123456"));
  ASSERT_TRUE(at_server().has_value()) << "within the budget";
  from_guest(port, bytes_of("789012"));
  ASSERT_TRUE(at_server().has_value()) << "the datagram that crosses it still goes";
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u) << "cut at the end of the turn";
  EXPECT_EQ(rig_.stack().counters().budget_crossed, 1u);
  EXPECT_EQ(rig_.stack().counters().budget_cut, 1u);
  from_guest(port, bytes_of("x"));
  EXPECT_EQ(flows(), 0u);
  EXPECT_EQ(rig_.stack().counters().budget_refused, 1u);
}

}  // namespace
}  // namespace abox::netstack
