// Echo flows through a GuestStack (echo_flow.h, guest_stack_echo.cc): the
// test is the guest (hand-written ICMP over a StreamLink), the destination
// the kernel's own echo answer on loopback, reached through a real ping
// socket. Each test runs in a network namespace of its own (made in
// SetUp, left in TearDown), where it sets net.ipv4.ping_group_range: open
// to every group, or "1 0" (nobody) to see echo refused as not permitted.
// Needs root (CLONE_NEWNET); skipped otherwise.
//
// What is checked: the reply reaches the guest with its own id, sequence and
// payload and checksums right; an echo is refused (an administratively
// prohibited error quoting it, a deny event, counted) when the destination
// was not answered, the answer expired, the rule lacks icmp, the address is
// reserved or ping sockets are not permitted; a spoofed source never gets a
// flow; flows end after icmp_idle_s and count against [limits] flows.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "base/unique_fd.h"
#include "netstack/stack/echo_message.h"
#include "tests/netstack/stack/flow_test_support.h"
#include "tests/netstack/stack/ipv6_wire.h"

namespace abox::netstack {
namespace {

using flow_test::FlowRig;
using flow_test::kLoopback;
using flow_test::StackOptions;
using guest_wire::Bytes;

// An echo request frame from `src` to `dst`, every checksum right.
Bytes echo_request(std::uint32_t dst, std::uint16_t id, std::uint16_t seq, const Bytes& payload,
                   std::uint32_t src = guest_wire::kGuest) {
  Bytes m = {8, 0, 0, 0};
  guest_wire::put16(m, id);
  guest_wire::put16(m, seq);
  m.insert(m.end(), payload.begin(), payload.end());
  const std::uint16_t c = fold_checksum(sum16(m));
  m[2] = static_cast<std::uint8_t>(c >> 8);
  m[3] = static_cast<std::uint8_t>(c);
  Bytes f = guest_wire::ethernet(guest_wire::kGatewayMac, 0x0800);
  const std::size_t ip = f.size();
  f.insert(f.end(), {0x45, 0});
  guest_wire::put16(f, static_cast<std::uint16_t>(20 + m.size()));
  guest_wire::put32(f, 0);
  f.insert(f.end(), {64, 1, 0, 0});
  guest_wire::put32(f, src);
  guest_wire::put32(f, dst);
  const std::uint16_t s = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(ip, 20)));
  f[ip + 10] = static_cast<std::uint8_t>(s >> 8);
  f[ip + 11] = static_cast<std::uint8_t>(s);
  f.insert(f.end(), m.begin(), m.end());
  return f;
}

struct IcmpSeen {
  std::uint32_t src = 0;
  std::uint8_t type = 0;
  std::uint8_t code = 0;
  std::uint16_t id = 0;
  std::uint16_t seq = 0;
  Bytes payload;  // an echo's payload; an error's quote
};

bool write_file(const char* path, const std::string& text) {
  base::UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

class EchoFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace";
    home_.reset(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(home_);
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
    in_namespace_ = true;
    // Loopback up: the destination the kernel answers.
    base::UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ASSERT_EQ(::ioctl(s.get(), SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    ASSERT_EQ(::ioctl(s.get(), SIOCSIFFLAGS, &ifr), 0);
    permit_ping(true);
  }
  void TearDown() override {
    rig_.reset();
    if (in_namespace_) {
      ASSERT_EQ(::setns(home_.get(), CLONE_NEWNET), 0) << std::strerror(errno);
    }
  }
  static void permit_ping(bool yes) {
    ASSERT_TRUE(write_file("/proc/sys/net/ipv4/ping_group_range", yes ? "0 2147483647" : "1 0"));
  }

  void start(StackOptions o = {}, base::Seconds ttl = base::Seconds(3600)) {
    o.port = 9;  // TCP/UDP are not used here
    rig_.emplace();
    rig_->start(o, ttl);
  }

  // ICMP messages the gateway sent the guest, turning until `count` came
  // (bounded) or nothing more came.
  std::vector<IcmpSeen> icmp_at_guest(std::size_t count, int turns = 200) {
    for (int i = 0; i < turns && seen_.size() < count; ++i) {
      rig_->wait_turn();
      for (const Bytes& f : rig_->frames()) {
        auto v = GuestFrame::parse(f);
        if (!v.ok() || !v->is_ipv4() || v->ipv4().protocol != 1) continue;
        EXPECT_EQ(fold_checksum(sum16(v->ipv4().payload)), 0) << "ICMP checksum";
        base::ByteReader r(v->ipv4().payload);
        IcmpSeen s;
        s.src = ntohl(v->ipv4().source_net);
        s.type = r.u8().value_or(0xFF);
        s.code = r.u8().value_or(0xFF);
        (void)r.skip(2);
        s.id = r.u16be().value_or(0);
        s.seq = r.u16be().value_or(0);
        const auto rest = r.rest();
        s.payload.assign(rest.begin(), rest.end());
        seen_.push_back(s);
      }
    }
    return seen_;
  }
  bool event_has(std::string_view a, std::string_view b) const {
    for (const auto& l : rig_->event_lines())
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
    return false;
  }
  // The refusal every refused echo gets: one prohibited error from the gateway.
  void expect_refused() {
    auto got = icmp_at_guest(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].type, 3);
    EXPECT_EQ(got[0].code, 13);
    EXPECT_EQ(got[0].src, 0x0A00'0202u);
    EXPECT_EQ(rig_->stack().echo_flows(), 0u);
  }

  base::UniqueFd home_;
  bool in_namespace_ = false;
  std::optional<FlowRig> rig_;
  std::vector<IcmpSeen> seen_;
};

StackOptions icmp_rule() {
  StackOptions o;
  o.icmp = true;
  return o;
}

TEST_F(EchoFlowTest, AnAdmittedEchoGetsTheDestinationsRepliesWithTheGuestsIdAndSequence) {
  start(icmp_rule());
  const Bytes payload = guest_wire::bytes_of("abox ping payload 0123456789");
  rig_->send(echo_request(kLoopback, 0xBEEF, 1, payload));
  rig_->send(echo_request(kLoopback, 0xBEEF, 2, payload));
  auto got = icmp_at_guest(2);
  ASSERT_EQ(got.size(), 2u);
  for (std::uint16_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].type, 0);
    EXPECT_EQ(got[i].src, kLoopback);
    EXPECT_EQ(got[i].id, 0xBEEF);
    EXPECT_EQ(got[i].seq, i + 1);
    EXPECT_EQ(got[i].payload, payload);
  }
  EXPECT_EQ(rig_->stack().echo_flows(), 1u);  // one flow for both sequences
  const auto& c = rig_->stack().counters();
  EXPECT_EQ(c.echo_admitted, 1u);
  EXPECT_EQ(c.echo_requests, 2u);
  EXPECT_EQ(c.echo_replies, 2u);
  EXPECT_TRUE(event_has("\"admit\"", "\"proto\":\"icmp\""));
  // Another id is another flow (another ping process).
  rig_->send(echo_request(kLoopback, 0x0001, 1, payload));
  EXPECT_EQ(icmp_at_guest(3).back().id, 0x0001);
  EXPECT_EQ(rig_->stack().echo_flows(), 2u);
}

TEST_F(EchoFlowTest, FlowsEndAfterIcmpIdleAndCountAgainstTheFlowLimit) {
  StackOptions o = icmp_rule();
  o.extra = "[timeouts]\nicmp_idle_s = 5\n[limits]\nflows = 1\nhalf_open = 1\n";
  start(o);
  rig_->send(echo_request(kLoopback, 1, 1, {}));
  ASSERT_EQ(icmp_at_guest(1).size(), 1u);
  EXPECT_EQ(rig_->stack().echo_flows(), 1u);
  // The limit: a second flow is refused.
  rig_->send(echo_request(kLoopback, 2, 1, {}));
  EXPECT_EQ(rig_->stack().echo_flows(), 1u);
  EXPECT_EQ(rig_->stack().counters().limit_flows, 1u);
  rig_->advance(base::Millis(6000));
  EXPECT_EQ(rig_->stack().echo_flows(), 0u);
  EXPECT_TRUE(event_has("\"close\"", "\"proto\":\"icmp\""));
}

TEST_F(EchoFlowTest, ARuleWithoutIcmpRefusesWithAProhibitedError) {
  start();  // tcp only
  rig_->send(echo_request(kLoopback, 1, 1, {1, 2, 3}));
  expect_refused();
  EXPECT_EQ(rig_->stack().counters().echo_refused, 1u);
  EXPECT_TRUE(event_has("\"deny\"", "icmp (echo) not allowed"));
  EXPECT_TRUE(event_has("\"deny\"", "\"dst\":\"127.0.0.1\""));
}

TEST_F(EchoFlowTest, AnAddressNotAnsweredIsRefused) {
  start(icmp_rule());
  rig_->send(echo_request(0x7F00'0002, 1, 1, {}));  // 127.0.0.2: lifted, never answered
  expect_refused();
  EXPECT_TRUE(event_has("\"deny\"", "not answered by the DNS gate"));
}

TEST_F(EchoFlowTest, AnExpiredAnswerIsRefusedAndEndsItsFlow) {
  start(icmp_rule(), base::Seconds(10));
  rig_->send(echo_request(kLoopback, 1, 1, {}));
  ASSERT_EQ(icmp_at_guest(1).size(), 1u);
  // TTL (10 s) + grace (60 s) later the flow ends and a new echo is refused.
  rig_->advance(base::Millis(71'000));
  EXPECT_EQ(rig_->stack().echo_flows(), 0u);
  EXPECT_TRUE(event_has("\"flow\"", "expired (TTL + grace)"));
  seen_.clear();
  rig_->send(echo_request(kLoopback, 1, 2, {}));
  expect_refused();
}

TEST_F(EchoFlowTest, AReservedAddressIsRefusedEvenWhenAnswered) {
  StackOptions o = icmp_rule();
  start(o);
  // The same policy without its [unsafe] lift: 127.0.0.1 is loopback again.
  o.port = 9;
  const std::string text = FlowRig::policy_text(o, false);
  ASSERT_EQ(text.find("allow_reserved"), std::string::npos);
  ASSERT_EQ(rig_->reload(text).tcp_revoked, 0u);
  rig_->answer(base::Seconds(3600));
  rig_->send(echo_request(kLoopback, 1, 1, {}));
  expect_refused();
  EXPECT_TRUE(event_has("\"deny\"", "reserved range"));
}

TEST_F(EchoFlowTest, ASpoofedSourceNeverReachesAPingSocket) {
  start(icmp_rule());
  rig_->send(echo_request(kLoopback, 1, 1, {}, 0x0A00'0210));  // 10.0.2.16
  EXPECT_TRUE(icmp_at_guest(1, 50).empty());
  EXPECT_EQ(rig_->stack().counters().frames_dropped_spoofed, 1u);
  EXPECT_EQ(rig_->stack().counters().echo_admitted, 0u);
}

TEST_F(EchoFlowTest, PingSocketsNotPermittedRefuseWithOneEventSayingHowToEnableThem) {
  permit_ping(false);
  start(icmp_rule());
  rig_->send(echo_request(kLoopback, 1, 1, {}));
  expect_refused();
  rig_->send(echo_request(kLoopback, 1, 2, {}));
  EXPECT_EQ(rig_->stack().counters().echo_not_permitted, 2u);
  std::size_t lines = 0;
  for (const auto& l : rig_->event_lines())
    if (l.find("ping_group_range") != std::string::npos) ++lines;
  EXPECT_EQ(lines, 1u);  // once
  EXPECT_TRUE(event_has("ping_group_range", "sysctl -w"));
}

TEST_F(EchoFlowTest, AuditModeRelaysWhatThePolicyWouldRefuse) {
  StackOptions o;  // tcp only
  o.extra = "[mode]\naudit = true\n";
  start(o);
  rig_->send(echo_request(kLoopback, 1, 1, {4}));
  auto got = icmp_at_guest(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, 0);
  EXPECT_TRUE(event_has("\"would_deny\"", "\"proto\":\"icmp\""));
}

TEST_F(EchoFlowTest, AReloadWithoutIcmpCutsTheFlow) {
  start(icmp_rule());
  rig_->send(echo_request(kLoopback, 1, 1, {}));
  ASSERT_EQ(icmp_at_guest(1).size(), 1u);
  StackOptions without;
  without.port = 9;
  const auto applied = rig_->reload(FlowRig::policy_text(without));
  EXPECT_EQ(applied.echo_revoked, 1u);
  EXPECT_EQ(rig_->stack().echo_flows(), 0u);
}

// IPv6 (GuestConfig::ipv6_flows): an echo request from the guest's
// link-local address to ::1 (answered for example.com, lifted by [unsafe])
// goes out on an ICMPv6 ping socket; the kernel's reply comes back as an
// echo reply from ::1 with the guest's id, sequence and payload and its
// ICMPv6 checksum right over the pseudo-header.
TEST_F(EchoFlowTest, AnIpv6EchoIsRelayedThroughAnIcmpv6PingSocket) {
  stream_stack_test::StreamStackRig rig(1500);
  ASSERT_TRUE(rig.link);
  auto parsed = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.com\"]\nprotocols = [\"icmp\"]\n"
      "[unsafe]\nallow_reserved = [\"::1/128\"]\n",
      "echo6.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  const policy::Policy pol = std::move(parsed).value();
  GuestConfig config;
  config.instance = "echo6";
  config.ipv6_neighbour_discovery = true;
  config.ipv6_flows = true;
  GuestStack stack(rig.loop, *rig.link, pol, rig.upstreams, rig.events, rig.random, config);
  const ipv6_wire::Address loopback6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const policy::IpAddress dst = policy::IpAddress::v6(loopback6);
  stack.answer_table().record(dst, "example.com", rig.loop.now() + base::Seconds(60), rig.loop.now());

  const Bytes payload = guest_wire::bytes_of("over ipv6");
  Bytes m = {128, 0, 0, 0, 0x12, 0x34, 0, 9};
  m.insert(m.end(), payload.begin(), payload.end());
  std::uint32_t sum = sum16(ipv6_wire::kLinkLocal);
  sum = sum16(loopback6, sum);
  sum += static_cast<std::uint32_t>(m.size()) + 58;
  const std::uint16_t c = fold_checksum(sum16(m, sum));
  m[2] = static_cast<std::uint8_t>(c >> 8);
  m[3] = static_cast<std::uint8_t>(c);
  stream_stack_test::write_all(
      rig.vmm.get(), guest_wire::record(ipv6_wire::ipv6_frame(58, m, ipv6_wire::kLinkLocal, loopback6)));

  std::optional<Ipv6Fields> reply;
  std::vector<Bytes> kept;
  Bytes in;
  for (int i = 0; i < 500 && !reply; ++i) {
    stack.poll_link();
    rig.loop.run_once(base::Millis(1));
    for (Bytes& f : guest_wire::read_frames(rig.vmm.get(), in)) {
      kept.push_back(std::move(f));
      auto v = GuestFrame::parse(kept.back());
      if (v.ok() && v->is_ipv6() && v->ipv6().upper_protocol == 58 && v->ipv6().icmp_type == 129)
        reply = v->ipv6();
    }
  }
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->source, loopback6);
  EXPECT_EQ(reply->destination, ipv6_wire::kLinkLocal);
  auto back = parse_echo_reply(reply->upper_layer, true, 0x1234);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->sequence, 9);
  EXPECT_EQ(Bytes(back->payload.begin(), back->payload.end()), payload);
  std::uint32_t check = sum16(loopback6);
  check = sum16(ipv6_wire::kLinkLocal, check);
  check += static_cast<std::uint32_t>(reply->upper_layer.size()) + 58;
  EXPECT_EQ(fold_checksum(sum16(reply->upper_layer, check)), 0);
  EXPECT_EQ(stack.counters().echo_admitted, 1u);
  EXPECT_EQ(stack.echo_flows(), 1u);
}

}  // namespace
}  // namespace abox::netstack
