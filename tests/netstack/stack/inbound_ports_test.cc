// InboundPorts and the inbound TcpFlow (netstack/stack/inbound_ports.h),
// driven without root: the test is the guest (hand-written TCP over a
// StreamLink, flow_test_support.h) and the host peer (a real socket on
// loopback connecting to the published port). What is checked is what each
// side sees: the gateway's SYN to the guest's port, the bytes both ways,
// FIN and RST carried across, the per-port limit, the connect deadline, and
// that the guest cannot open anything through a published connection.
#include "netstack/stack/inbound_ports.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <vector>

#include "tests/netstack/stack/flow_test_support.h"

namespace abox::netstack {
namespace {

using flow_test::FlowRig;
using flow_test::StackOptions;
using guest_wire::Bytes;
using guest_wire::bytes_of;
using guest_wire::GuestTcp;
using guest_wire::Seen;
namespace tcp = guest_wire::tcp;

constexpr std::uint32_t kGateway = 0x0A00'0202;  // GuestConfig's default, 10.0.2.2

class InboundPortsTest : public ::testing::Test {
 protected:
  ~InboundPortsTest() override {
    // The stack first (its inbound flows count themselves in the ports),
    // then the ports, while the loop is still there.
    rig_.stop();
    ports_.reset();
  }

  void start(std::uint32_t max_connections, std::string extra = {}, bool udp = false) {
    StackOptions o = flow_test::with(std::move(extra));
    o.port = 9;  // no flow of the guest's is made here
    rig_.start(o);
    guest_port_ = FlowRig::fresh_port();
    policy::PublishSpec spec;
    spec.host_port = 0;  // the kernel picks; parse_publish_spec() never gives 0
    spec.guest_port = guest_port_;
    if (udp) spec.protocol = policy::PublishSpec::Protocol::udp;
    auto listening = listen_published(std::span<const policy::PublishSpec>(&spec, 1));
    ASSERT_TRUE(listening.ok()) << listening.error();
    sockaddr_in sin{};
    socklen_t len = sizeof sin;
    ASSERT_EQ(::getsockname((*listening)[0].fd.get(), reinterpret_cast<sockaddr*>(&sin), &len), 0);
    host_port_ = ntohs(sin.sin_port);
    ports_ = std::make_unique<InboundPorts>(rig_.stack(), std::move(listening).value(), max_connections);
  }

  // A host peer's connection to the published port (connecting: the
  // kernel completes it from the backlog).
  base::UniqueFd connect_host() {
    base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(host_port_);
    sin.sin_addr.s_addr = htonl(flow_test::kLoopback);
    const int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin);
    EXPECT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
    return fd;
  }

  // Turns until the gateway's SYN to the guest's published port comes.
  std::optional<Seen> syn_to_guest() {
    std::optional<Seen> syn;
    rig_.turn_until([&] { return syn.has_value(); },
                    [&](std::vector<Seen> seen) {
                      for (Seen& s : seen)
                        if (s.proto == 6 && s.dst_port == guest_port_ && (s.flags & tcp::kSyn) != 0) syn = s;
                    });
    return syn;
  }

  // The guest answers the SYN: the connection is open on both sides.
  // With `window_scale`, the guest's SYN-ACK offers window scaling (shift
  // 7, and reads the gateway's windows with lwIP's TCP_RCV_SCALE, 7).
  GuestTcp accept_in_guest(const Seen& syn, bool window_scale = false) {
    GuestTcp g(guest_port_, kGateway, syn.src_port);
    if (window_scale) g.use_window_scale(7, 7);
    g.take({syn});
    (void)g.syn();  // the guest's initial sequence number
    rig_.send(g.segment(tcp::kSyn | tcp::kAck));
    g.take(rig_.seen());
    return g;
  }

  bool until(GuestTcp& g, const std::function<bool()>& done) {
    return rig_.turn_until(done, [&](std::vector<Seen> s) { g.take(s); });
  }

  // What the host peer's socket holds, read until `want` bytes or its end;
  // `end`: 0 for EOF, the errno of a reset, -1 while open.
  bool read_host(GuestTcp& g, int fd, Bytes& into, std::size_t want, int* end = nullptr) {
    return until(g, [&] {
      std::uint8_t buf[4096];
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          into.insert(into.end(), buf, buf + n);
          continue;
        }
        if (end != nullptr) *end = n == 0 ? 0 : errno == EAGAIN ? -1 : errno;
        break;
      }
      return into.size() >= want && (end == nullptr || *end != -1);
    });
  }

  const StackCounters& counters() { return rig_.stack().counters(); }

  FlowRig rig_;
  std::unique_ptr<InboundPorts> ports_;
  std::uint16_t guest_port_ = 0;
  std::uint16_t host_port_ = 0;
};

TEST_F(InboundPortsTest, AHostConnectionReachesTheGuestFromTheGatewayAndCarriesBytesBothWays) {
  start(4);
  base::UniqueFd host = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value()) << "no SYN to the guest's published port";
  EXPECT_EQ(syn->src, kGateway);
  GuestTcp g = accept_in_guest(*syn);
  EXPECT_EQ(counters().inbound_accepted, 1u);
  EXPECT_EQ(ports_->live(0), 1u);
  EXPECT_EQ(rig_.stack().tcp_flows(), 1u);

  ASSERT_EQ(::send(host.get(), "hello", 5, MSG_NOSIGNAL), 5);
  ASSERT_TRUE(until(g, [&] { return g.received().size() >= 5; }));
  EXPECT_EQ(g.received(), bytes_of("hello"));
  rig_.send(g.data(bytes_of("world")));
  Bytes got;
  ASSERT_TRUE(read_host(g, host.get(), got, 5));
  EXPECT_EQ(got, bytes_of("world"));

  // Half-close each way: the host's FIN reaches the guest, the guest's the host.
  ::shutdown(host.get(), SHUT_WR);
  ASSERT_TRUE(until(g, [&] { return g.fin_seen(); }));
  rig_.send(g.fin());
  int end = -1;
  got.clear();
  ASSERT_TRUE(read_host(g, host.get(), got, 0, &end));
  EXPECT_EQ(end, 0);
  ASSERT_TRUE(until(g, [&] { return ports_->live(0) == 0; }));
  EXPECT_EQ(rig_.stack().tcp_flows(), 0u);
  EXPECT_EQ(counters().inbound_refused_guest, 0u);
}

// [limits] flow_buffer_bytes holds for a published connection as for a
// guest's own: the window the gateway announces once the guest answered
// with window scaling (every Linux guest does) is at most the limit. lwIP
// takes its whole TCP_WND (4 MiB) on reading that option and asserts that
// nobody changed the window before: a limit set before the guest's SYN-ACK
// was lost above 64 KiB and aborted abox-net below it.
TEST_F(InboundPortsTest, AScalingGuestIsOfferedNoMoreThanFlowBufferBytes) {
  constexpr std::size_t kLimit = 256 * 1024;
  start(4, "[limits]\nflow_buffer_bytes = " + std::to_string(kLimit) + "\n");
  base::UniqueFd host = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value());
  GuestTcp g = accept_in_guest(*syn, /*window_scale=*/true);
  ASSERT_TRUE(until(g, [&] { return g.peer_window() != 0; }));
  EXPECT_LE(g.peer_window(), kLimit);
  EXPECT_GT(g.peer_window(), kLimit / 2);
}

TEST_F(InboundPortsTest, AFlowBufferUnder64KibSurvivesAScalingGuest) {
  constexpr std::size_t kLimit = 16384;
  start(4, "[limits]\nflow_buffer_bytes = " + std::to_string(kLimit) + "\n");
  base::UniqueFd host = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value());
  GuestTcp g = accept_in_guest(*syn, /*window_scale=*/true);
  ASSERT_TRUE(until(g, [&] { return g.peer_window() != 0; }));
  EXPECT_LE(g.peer_window(), kLimit);
  // And it carries bytes.
  rig_.send(g.data(bytes_of("world")));
  Bytes got;
  ASSERT_TRUE(read_host(g, host.get(), got, 5));
  EXPECT_EQ(got, bytes_of("world"));
}

TEST_F(InboundPortsTest, AGuestResetEndsTheHostConnectionAndIsCounted) {
  start(4);
  base::UniqueFd host = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value());
  GuestTcp g(guest_port_, kGateway, syn->src_port);
  g.take({*syn});
  rig_.send(g.rst());  // nothing listens on the guest's port
  Bytes got;
  int end = -1;
  ASSERT_TRUE(read_host(g, host.get(), got, 0, &end));
  EXPECT_EQ(end, ECONNRESET);
  EXPECT_EQ(counters().inbound_refused_guest, 1u);
  EXPECT_EQ(ports_->live(0), 0u);
}

TEST_F(InboundPortsTest, AGuestThatNeverAnswersIsGivenUpAfterConnectMs) {
  start(4, "[timeouts]\nconnect_ms = 2000\n");
  base::UniqueFd host = connect_host();
  ASSERT_TRUE(syn_to_guest().has_value());
  rig_.advance(base::Millis(1000));
  EXPECT_EQ(ports_->live(0), 1u);
  rig_.advance(base::Millis(2000));
  GuestTcp g(guest_port_, kGateway, 0);
  Bytes got;
  int end = -1;
  ASSERT_TRUE(read_host(g, host.get(), got, 0, &end));
  EXPECT_EQ(end, ECONNRESET);
  EXPECT_EQ(counters().inbound_refused_guest, 1u);
  ASSERT_TRUE(until(g, [&] { return ports_->live(0) == 0; }));
}

TEST_F(InboundPortsTest, PastThePortsLimitAConnectionIsAcceptedAndClosedAtOnce) {
  start(1);
  base::UniqueFd first = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value());
  GuestTcp g = accept_in_guest(*syn);
  base::UniqueFd second = connect_host();
  Bytes got;
  int end = -1;
  ASSERT_TRUE(read_host(g, second.get(), got, 0, &end));
  EXPECT_EQ(end, 0);
  EXPECT_EQ(counters().inbound_refused_limit, 1u);
  EXPECT_EQ(counters().inbound_accepted, 1u);
  EXPECT_EQ(ports_->live(0), 1u);
  // The first is untouched.
  ASSERT_EQ(::send(first.get(), "x", 1, MSG_NOSIGNAL), 1);
  ASSERT_TRUE(until(g, [&] { return g.received() == bytes_of("x"); }));
}

TEST_F(InboundPortsTest, TheGuestCannotOpenAnythingThroughAPublishedConnection) {
  start(4);
  base::UniqueFd host = connect_host();
  const auto syn = syn_to_guest();
  ASSERT_TRUE(syn.has_value());
  GuestTcp g = accept_in_guest(*syn);
  // A new connection from another guest port to the gateway's end of the
  // published one: refused (RST), and no flow made.
  GuestTcp sneak(FlowRig::fresh_port(), kGateway, syn->src_port);
  rig_.send(sneak.syn());
  sneak.take(rig_.seen());
  EXPECT_FALSE(sneak.syn_ack());
  EXPECT_TRUE(sneak.reset_seen());
  EXPECT_EQ(rig_.stack().tcp_flows(), 1u);
  EXPECT_EQ(counters().tcp_admitted, 0u);
  // The published connection still carries the guest's bytes to its host peer.
  rig_.send(g.data(bytes_of("still here")));
  Bytes got;
  ASSERT_TRUE(read_host(g, host.get(), got, 10));
  EXPECT_EQ(got, bytes_of("still here"));
}

TEST_F(InboundPortsTest, UdpPeersGetTheGuestsRepliesAndNothingElse) {
  start(4, "[timeouts]\nudp_idle_s = 10\n", /*udp=*/true);
  base::UniqueFd peer(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(host_port_);
  to.sin_addr.s_addr = htonl(flow_test::kLoopback);
  ASSERT_EQ(::sendto(peer.get(), "ping", 4, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 4);
  std::optional<Seen> datagram;
  rig_.turn_until([&] { return datagram.has_value(); },
                  [&](std::vector<Seen> seen) {
                    for (Seen& s : seen)
                      if (s.proto == 17 && s.dst_port == guest_port_) datagram = s;
                  });
  ASSERT_TRUE(datagram.has_value()) << "no datagram to the guest's published port";
  EXPECT_EQ(datagram->src, kGateway);
  EXPECT_EQ(datagram->payload, bytes_of("ping"));
  EXPECT_EQ(counters().inbound_accepted, 1u);
  EXPECT_EQ(ports_->live(0), 1u);

  // The guest's reply goes back to that peer; a datagram to the session's
  // gateway port from another guest port goes nowhere.
  rig_.send(guest_wire::udp_datagram(FlowRig::fresh_port(), kGateway, datagram->src_port, bytes_of("sneak")));
  rig_.send(guest_wire::udp_datagram(guest_port_, kGateway, datagram->src_port, bytes_of("pong")));
  std::vector<Bytes> got;
  GuestTcp none(guest_port_, kGateway, 0);
  until(none, [&] {
    std::uint8_t buf[64];
    for (ssize_t n; (n = ::recv(peer.get(), buf, sizeof buf, MSG_DONTWAIT)) > 0;)
      got.emplace_back(buf, buf + n);
    return !got.empty();
  });
  rig_.turns(8);
  std::uint8_t buf[64];
  for (ssize_t n; (n = ::recv(peer.get(), buf, sizeof buf, MSG_DONTWAIT)) > 0;)
    got.emplace_back(buf, buf + n);
  EXPECT_EQ(got, std::vector<Bytes>{bytes_of("pong")});

  // Idle for udp_idle_s: the session ends.
  rig_.advance(base::Millis(5000));
  EXPECT_EQ(ports_->live(0), 1u);
  rig_.advance(base::Millis(6000));
  EXPECT_EQ(ports_->live(0), 0u);
}

}  // namespace
}  // namespace abox::netstack
