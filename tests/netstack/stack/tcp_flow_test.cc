// TcpFlow, driven without root: the test is the guest (hand-written TCP
// over a StreamLink), the host side is a real TCP server on loopback, and
// the loop's clock is the test's (flow_test_support.h). What is checked is
// what each side sees: the bytes, their order, FIN and RST carried across,
// the windows that hold a side back, and every deadline a flow has (peek,
// connect, idle, the answer's expiry, the destination becoming this host's
// address), reached by moving the clock, never by sleeping.
//
// Each test runs twice: guest bytes to the host by a sendmsg request on the
// ring, and by the sendmsg system call (GuestConfig::host_io_on_ring).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/netstack/stack/flow_test_support.h"

namespace abox::netstack {
namespace {

using flow_test::FlowRig;
using flow_test::LoopbackSocket;
using flow_test::StackOptions;
using flow_test::verified;
using flow_test::wait_for;
using flow_test::with;
using guest_wire::Bytes;
using guest_wire::bytes_of;
using guest_wire::GuestTcp;
using guest_wire::Seen;

// A TLS record holding a ClientHello whose SNI is `name` (enough of one for
// the peek: version, random, session id, suites, compression, extensions).
Bytes client_hello(std::string_view name) {
  Bytes sni;
  guest_wire::put16(sni, static_cast<std::uint16_t>(name.size() + 3));
  sni.push_back(0);
  guest_wire::put16(sni, static_cast<std::uint16_t>(name.size()));
  sni.insert(sni.end(), name.begin(), name.end());
  Bytes ext;
  guest_wire::put16(ext, 0);  // server_name
  guest_wire::put16(ext, static_cast<std::uint16_t>(sni.size()));
  ext.insert(ext.end(), sni.begin(), sni.end());
  Bytes body = {0x03, 0x03};
  body.insert(body.end(), 32, 0xab);  // random
  body.push_back(0);                  // session id
  body.insert(body.end(), {0, 2, 0x13, 0x01, 1, 0});
  guest_wire::put16(body, static_cast<std::uint16_t>(ext.size()));
  body.insert(body.end(), ext.begin(), ext.end());
  Bytes hs = {1, 0};
  guest_wire::put16(hs, static_cast<std::uint16_t>(body.size()));
  hs.insert(hs.end(), body.begin(), body.end());
  Bytes rec = {22, 3, 1};
  guest_wire::put16(rec, static_cast<std::uint16_t>(hs.size()));
  rec.insert(rec.end(), hs.begin(), hs.end());
  return rec;
}

// Bytes i..i+n of a pattern that shows order and loss.
Bytes pattern(std::size_t from, std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((from + i) * 7 + (from + i) / 251);
  return b;
}

class TcpFlowTest : public ::testing::TestWithParam<bool> {
 protected:
  // The stack, with a rule for the server's port.
  void start(StackOptions o, base::Seconds ttl = base::Seconds(3600)) {
    o.port = server_.port;
    o.host_io_on_ring = GetParam();
    rig_.start(o, ttl);
  }
  // The guest's handshake to the server's port; true when the gateway
  // accepted it (SYN-ACK, then our ACK).
  bool handshake() {
    rig_.send(guest_.syn());
    guest_.take(rig_.seen());
    if (!guest_.syn_ack()) return false;
    rig_.send(guest_.ack());
    return true;
  }
  // Turns the stack until `done` holds; the guest takes what comes (and
  // acknowledges it when `ack`).
  bool until(const std::function<bool()>& done, bool ack = true, int max_turns = 2000) {
    return rig_.turn_until(
        done, [&](std::vector<Seen> s) { guest_.take(s, ack); }, max_turns);
  }
  // Sends the guest's segment and takes the gateway's answer.
  void send(const Bytes& frame) {
    rig_.send(frame);
    guest_.take(rig_.seen());
  }
  // The server's side of the flow (accepted within a bounded real wait).
  base::UniqueFd accept_host() {
    base::UniqueFd c;
    until([&] {
      c.reset(::accept4(server_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      return static_cast<bool>(c);
    });
    return c;
  }
  // Reads what `fd` holds into `into` until `want` bytes or EOF, turning the
  // stack meanwhile.
  bool read_host(int fd, Bytes& into, std::size_t want, bool* eof = nullptr) {
    return until([&] {
      std::uint8_t buf[65536];
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          into.insert(into.end(), buf, buf + n);
          continue;
        }
        if (n == 0 && eof != nullptr) *eof = true;
        break;
      }
      return into.size() >= want && (eof == nullptr || *eof);
    });
  }
  // How the server's side ended: 0 for EOF, the errno of a reset; -1 when
  // it did not end within the bounded turns. Bytes before the end go to
  // `before` when given.
  int host_end(int fd, Bytes* before = nullptr) {
    int end = -1;
    until([&] {
      std::uint8_t buf[4096];
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          if (before != nullptr) before->insert(before->end(), buf, buf + n);
          continue;
        }
        if (n == 0) end = 0;
        if (n < 0 && errno != EAGAIN) end = errno;
        return end != -1;
      }
    });
    return end;
  }
  void write_host(int fd, const Bytes& b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // An open flow: handshake, connect, the server's side accepted.
  // The guest sends the pattern a segment at a time while the gateway's
  // window allows, until it is shut with everything acknowledged. Returns
  // the bytes sent, or 0 when the window never shut (bounded: 4000 turns,
  // 8 MiB).
  std::size_t send_until_the_window_shuts() {
    std::size_t sent = 0;
    for (int round = 0; round < 4000; ++round) {
      while (guest_.unacked() < guest_.peer_window() && sent < (8u << 20)) {
        const std::size_t len = std::min<std::size_t>(1460, guest_.peer_window() - guest_.unacked());
        rig_.send(guest_.data(pattern(sent, len)));
        guest_.take(rig_.seen());
        sent += len;
      }
      guest_.take(rig_.seen());
      rig_.wait_turn();
      guest_.take(rig_.seen());
      if (guest_.peer_window() == 0 && guest_.unacked() == 0) return sent;
    }
    return 0;
  }
  base::UniqueFd open_flow(StackOptions o = {}) {
    start(o);
    if (!handshake()) {
      ADD_FAILURE() << "no SYN-ACK";
      return {};
    }
    base::UniqueFd host = accept_host();
    EXPECT_TRUE(host) << "the flow never connected to the server";
    EXPECT_TRUE(until([&] { return rig_.stack().flow_gauges().tcp_open == 1; })) << "the flow is not open";
    return host;
  }
  std::size_t flows() { return rig_.stack().tcp_flows(); }

  LoopbackSocket server_ = flow_test::tcp_listener();
  FlowRig rig_;
  GuestTcp guest_{FlowRig::fresh_port(), flow_test::kLoopback, server_.port};
};

INSTANTIATE_TEST_SUITE_P(HostIo, TcpFlowTest, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "ring" : "syscalls";
});

// ---- connect, bytes both ways -------------------------------------------

TEST_P(TcpFlowTest, BytesGoBothWaysInOrder) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  send(guest_.data(bytes_of("hello from the guest")));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 20));
  EXPECT_EQ(got, bytes_of("hello from the guest"));
  write_host(host.get(), bytes_of("and back"));
  ASSERT_TRUE(until([&] { return guest_.received().size() >= 8; }));
  EXPECT_EQ(guest_.received(), bytes_of("and back"));
  EXPECT_EQ(rig_.stack().counters().tcp_admitted, 1u);
  EXPECT_FALSE(guest_.reset_seen());
}

TEST_P(TcpFlowTest, AConnectRefusedResetsTheGuestAndIsCounted) {
  server_.fd.reset();  // nobody listens on the port now
  start({});
  ASSERT_TRUE(handshake());
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); })) << "the guest is told with a RST";
  EXPECT_EQ(rig_.stack().counters().connect_failed, 1u);
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u);
}

// ---- SNI and Host peek --------------------------------------------------

TEST_P(TcpFlowTest, AMatchingSniConnectsAndTheHelloGoesAsSent) {
  start(verified());
  ASSERT_TRUE(handshake());
  EXPECT_EQ(rig_.stack().flow_gauges().tcp_peeking, 1u);
  base::UniqueFd early(::accept4(server_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK));
  EXPECT_FALSE(early) << "no connect before the name is read";
  const Bytes hello = client_hello("example.com");
  send(guest_.data(hello));
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host);
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, hello.size()));
  EXPECT_EQ(got, hello);
  EXPECT_EQ(rig_.stack().counters().name_refused, 0u);
}

TEST_P(TcpFlowTest, AHelloSplitAcrossSegmentsIsReadWhole) {
  start(verified());
  ASSERT_TRUE(handshake());
  const Bytes hello = client_hello("example.com");
  const Bytes first(hello.begin(), hello.begin() + 9);
  const Bytes rest(hello.begin() + 9, hello.end());
  send(guest_.data(first));
  EXPECT_EQ(rig_.stack().flow_gauges().tcp_peeking, 1u) << "still waiting for the rest";
  send(guest_.data(rest));
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host);
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, hello.size()));
  EXPECT_EQ(got, hello);
}

TEST_P(TcpFlowTest, AnotherSniResetsTheGuestAndNeverConnects) {
  start(verified());
  ASSERT_TRUE(handshake());
  send(guest_.data(client_hello("evil.example")));
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); }));
  EXPECT_EQ(rig_.stack().counters().name_refused, 1u);
  base::UniqueFd host(::accept4(server_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK));
  EXPECT_FALSE(host) << "the server never saw a connection";
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AMatchingHostConnectsAndARequestForAnotherHostLaterResets) {
  start(verified());
  ASSERT_TRUE(handshake());
  const Bytes first = bytes_of("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
  send(guest_.data(first));
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host);
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, first.size()));
  EXPECT_EQ(got, first);
  // The next request on the flow names another host: refused before it goes.
  send(guest_.data(bytes_of("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")));
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); }));
  EXPECT_EQ(rig_.stack().counters().name_refused, 1u);
  Bytes more;
  EXPECT_EQ(host_end(host.get(), &more), ECONNRESET);
  EXPECT_TRUE(more.empty()) << "none of the second request reached the server";
}

TEST_P(TcpFlowTest, BytesThatAreNeitherTlsNorHttpAreRefused) {
  start(verified());
  ASSERT_TRUE(handshake());
  send(guest_.data(bytes_of("SSH-2.0-OpenSSH_9.6\r\n")));
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); }));
  EXPECT_EQ(rig_.stack().counters().name_refused, 1u);
}

TEST_P(TcpFlowTest, AGuestFinBeforeAnyNameResets) {
  start(verified());
  ASSERT_TRUE(handshake());
  send(guest_.fin());
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); }));
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u);
}

// ---- half-close and resets ------------------------------------------------

TEST_P(TcpFlowTest, AGuestFinReachesTheServerWhichMayStillAnswer) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  send(guest_.data(bytes_of("request")));
  send(guest_.fin());
  Bytes got;
  bool eof = false;
  ASSERT_TRUE(read_host(host.get(), got, 7, &eof));
  EXPECT_EQ(got, bytes_of("request"));
  EXPECT_TRUE(eof) << "the guest's FIN is the server's EOF";
  EXPECT_EQ(rig_.stack().flow_gauges().tcp_closing, 1u);
  // Half-closed: the server's answer still reaches the guest, then its FIN.
  write_host(host.get(), bytes_of("response"));
  ::shutdown(host.get(), SHUT_WR);
  ASSERT_TRUE(until([&] { return guest_.fin_seen(); }));
  EXPECT_EQ(guest_.received(), bytes_of("response"));
  EXPECT_FALSE(guest_.reset_seen());
  send(guest_.ack());  // acknowledges the FIN: both sides done
  ASSERT_TRUE(until([&] { return flows() == 0; })) << "the flow ends cleanly";
  EXPECT_FALSE(guest_.reset_seen());
}

TEST_P(TcpFlowTest, AServerEofReachesTheGuestWhichMayStillSend) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  write_host(host.get(), bytes_of("banner"));
  ::shutdown(host.get(), SHUT_WR);
  ASSERT_TRUE(until([&] { return guest_.fin_seen(); })) << "the server's EOF is the guest's FIN";
  EXPECT_EQ(guest_.received(), bytes_of("banner"));
  send(guest_.data(bytes_of("late words")));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 10));
  EXPECT_EQ(got, bytes_of("late words"));
  send(guest_.fin());
  bool eof = false;
  Bytes rest;
  ASSERT_TRUE(read_host(host.get(), rest, 0, &eof));
  EXPECT_TRUE(eof);
  ASSERT_TRUE(until([&] { return flows() == 0; }));
  EXPECT_FALSE(guest_.reset_seen());
}

TEST_P(TcpFlowTest, AGuestResetResetsTheServersSide) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  send(guest_.rst());
  EXPECT_EQ(host_end(host.get()), ECONNRESET) << "carried across as a reset, not a FIN";
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AServerResetResetsTheGuest) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  linger lg{1, 0};
  ::setsockopt(host.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  host.reset();
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); }));
  EXPECT_FALSE(guest_.fin_seen()) << "a reset, not a FIN";
  rig_.turns(2);
  EXPECT_EQ(flows(), 0u);
}

// ---- backpressure ---------------------------------------------------------

// A server that does not read: the guest's window closes (nothing past what
// the host socket took and flow_buffer_bytes is accepted), and opens again
// as the server reads; every byte arrives, in order.
TEST_P(TcpFlowTest, AServerThatDoesNotReadClosesTheGuestsWindow) {
  server_ = flow_test::tcp_listener(16, /*rcvbuf=*/4096);
  guest_ = GuestTcp(FlowRig::fresh_port(), flow_test::kLoopback, server_.port);
  base::UniqueFd host = open_flow(with("[limits]\nflow_buffer_bytes = 16384\n"));
  ASSERT_TRUE(host);
  std::size_t sent = send_until_the_window_shuts();
  ASSERT_GT(sent, 0u) << "the window never closed";
  EXPECT_LT(sent, 8u << 20);
  EXPECT_FALSE(guest_.reset_seen());
  // The server reads: the window opens, and the guest sends 64 KiB more.
  const std::size_t total = sent + 65536;
  Bytes got;
  for (int round = 0; round < 4000 && got.size() < total; ++round) {
    std::uint8_t buf[65536];
    const ssize_t n = ::recv(host.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) got.insert(got.end(), buf, buf + n);
    while (sent < total && guest_.unacked() < guest_.peer_window()) {
      const std::size_t len =
          std::min<std::size_t>({1460, total - sent, std::size_t{guest_.peer_window()} - guest_.unacked()});
      rig_.send(guest_.data(pattern(sent, len)));
      sent += len;
    }
    // Shut window: probe it, as a guest's persist timer does (the gateway
    // also announces the reopened window by itself: the next test).
    if (guest_.peer_window() == 0) rig_.send(guest_.probe());
    rig_.wait_turn();
    guest_.take(rig_.seen());
    if (n <= 0) wait_for(host.get(), POLLIN, 1);
  }
  ASSERT_EQ(got.size(), total) << "sent " << sent << ", window " << guest_.peer_window() << ", unacked "
                               << guest_.unacked() << ", reset " << guest_.reset_seen();
  EXPECT_TRUE(got == pattern(0, total)) << "bytes lost or out of order";
}

// The same with window scaling (every Linux guest offers it): the window
// the gateway announces is what flow_buffer_bytes lets it take, so every
// byte the guest sends inside it is taken, none trimmed and left for the
// guest to retransmit. lwIP records the right edge of its SYN-ACK's window
// as if its whole TCP_WND (4 MiB) had been offered; the flow's smaller limit
// must move that edge back too, or lwIP keeps announcing up to 4 MiB while
// taking only flow_buffer_bytes (uploads then stalled on retransmission
// timeouts whenever the server fell behind).
TEST_P(TcpFlowTest, AScaledWindowNeverOffersMoreThanTheFlowBuffer) {
  server_ = flow_test::tcp_listener(16, /*rcvbuf=*/4096);
  guest_ = GuestTcp(FlowRig::fresh_port(), flow_test::kLoopback, server_.port);
  guest_.use_window_scale(7, 7);  // lwIP's TCP_RCV_SCALE
  constexpr std::size_t kLimit = 256 * 1024;
  base::UniqueFd host = open_flow(with("[limits]\nflow_buffer_bytes = " + std::to_string(kLimit) + "\n"));
  ASSERT_TRUE(host);
  // Full segments in pairs throughout: lwIP acknowledges every second one
  // at once (a lone one waits for its delayed-ACK timer). The first pair's
  // ACK carries the window: at most the limit (the server has taken nothing
  // yet beyond what its socket holds).
  constexpr std::size_t kSegment = 1460;
  std::size_t sent = 0;
  const auto send_pairs = [&](std::size_t pairs) {
    for (std::size_t i = 0; i < 2 * pairs; ++i) {
      rig_.send(guest_.data(pattern(sent, kSegment)));
      sent += kSegment;
    }
  };
  send_pairs(1);
  ASSERT_TRUE(until([&] { return guest_.unacked() == 0; })) << "the first segments were never acknowledged";
  EXPECT_GT(guest_.peer_window(), 0u);
  EXPECT_LE(guest_.peer_window(), kLimit) << "more window announced than flow_buffer_bytes";
  // What it announced is taken whole, the server still not reading.
  const std::uint32_t window = guest_.peer_window();
  send_pairs(window / (2 * kSegment));
  ASSERT_TRUE(until([&] { return guest_.unacked() == 0; }))
      << "bytes sent inside the announced window were not taken (window " << window << ", unacked "
      << guest_.unacked() << ")";
  Bytes got;
  for (int round = 0; round < 4000 && got.size() < sent; ++round) {
    std::uint8_t buf[65536];
    const ssize_t n = ::recv(host.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) got.insert(got.end(), buf, buf + n);
    rig_.wait_turn();
    guest_.take(rig_.seen());
    if (n <= 0) wait_for(host.get(), POLLIN, 1);
  }
  ASSERT_EQ(got.size(), sent);
  EXPECT_TRUE(got == pattern(0, sent)) << "bytes lost or out of order";
}

// Once the window was shut, the gateway says so itself when there is room
// again for a segment: the guest does not have to wait for its zero-window
// probe (Linux backs those off up to two minutes). lwIP alone announces a
// reopened window only after its right edge moved by
// TCP_WND_UPDATE_THRESHOLD (256 KiB with our TCP_MSS).
TEST_P(TcpFlowTest, AReopenedWindowIsAnnouncedWithoutAProbe) {
  server_ = flow_test::tcp_listener(16, /*rcvbuf=*/4096);
  guest_ = GuestTcp(FlowRig::fresh_port(), flow_test::kLoopback, server_.port);
  base::UniqueFd host = open_flow(with("[limits]\nflow_buffer_bytes = 16384\n"));
  ASSERT_TRUE(host);
  const std::size_t sent = send_until_the_window_shuts();
  ASSERT_GT(sent, 0u) << "the window never closed";
  // The server reads everything; the guest sends nothing, not even a probe.
  Bytes got;
  for (int round = 0; round < 4000 && (got.size() < sent || guest_.peer_window() < 1460); ++round) {
    std::uint8_t buf[65536];
    const ssize_t n = ::recv(host.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) got.insert(got.end(), buf, buf + n);
    rig_.wait_turn();
    guest_.take(rig_.seen());
    if (n <= 0 && got.size() == sent) break;
    if (n <= 0 && got.size() < sent) wait_for(host.get(), POLLIN, 1);
  }
  // A few more turns for anything still on its way.
  for (int round = 0; round < 20 && guest_.peer_window() < 1460; ++round) {
    rig_.wait_turn();
    guest_.take(rig_.seen());
  }
  EXPECT_EQ(got.size(), sent);
  EXPECT_GE(guest_.peer_window(), 1460u) << "the reopened window was never announced";
  EXPECT_FALSE(guest_.reset_seen());
}

// A guest that does not read (acknowledges nothing): lwIP's send buffer
// fills to flow_buffer_bytes, the flow stops reading the server, and the
// server's socket fills (its send answers EAGAIN); once the guest reads,
// every byte arrives, in order.
TEST_P(TcpFlowTest, AGuestThatDoesNotReadStopsTheFlowReadingTheServer) {
  server_ = flow_test::tcp_listener(16, 0, /*sndbuf=*/16384);
  guest_ = GuestTcp(FlowRig::fresh_port(), flow_test::kLoopback, server_.port);
  base::UniqueFd host = open_flow(with("[limits]\nflow_buffer_bytes = 16384\n"));
  ASSERT_TRUE(host);
  std::size_t written = 0;
  bool full = false;
  for (int round = 0; round < 4000 && !full; ++round) {
    const Bytes chunk = pattern(written, 16384);
    const ssize_t n = ::send(host.get(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) written += static_cast<std::size_t>(n);
    if (n < 0) {
      ASSERT_EQ(errno, EAGAIN) << std::strerror(errno);
      // Full now; full still after the stack had its turns: the flow
      // has stopped reading.
      for (int i = 0; i < 8; ++i) {
        rig_.wait_turn();
        guest_.take(rig_.seen(), /*advance_ack=*/false);
      }
      full = !wait_for(host.get(), POLLOUT, 0);
      continue;
    }
    rig_.wait_turn();
    guest_.take(rig_.seen(), /*advance_ack=*/false);
    ASSERT_LT(written, 64u << 20) << "the flow never stopped reading the server";
  }
  ASSERT_TRUE(full);
  EXPECT_LE(guest_.received().size(), 65535u) << "no more than the guest's window reached it";
  EXPECT_FALSE(guest_.reset_seen());
  // The guest reads (and acknowledges) everything; the server writes the rest.
  guest_.ack_all();
  const std::size_t total = written + 65536;
  for (int round = 0; round < 8000 && guest_.received().size() < total; ++round) {
    if (written < total) {
      const Bytes chunk = pattern(written, std::min<std::size_t>(16384, total - written));
      const ssize_t n = ::send(host.get(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) written += static_cast<std::size_t>(n);
    }
    rig_.send(guest_.ack());
    guest_.take(rig_.seen());
    rig_.wait_turn();
    guest_.take(rig_.seen());
  }
  ASSERT_EQ(guest_.received().size(), total);
  EXPECT_TRUE(guest_.received() == pattern(0, total)) << "bytes lost or out of order";
}

// ---- deadlines ------------------------------------------------------------

TEST_P(TcpFlowTest, NoNameWithinPeekMsResetsTheGuest) {
  start(verified("[timeouts]\npeek_ms = 3000\n"));
  ASSERT_TRUE(handshake());
  rig_.advance(base::Millis(2000));
  EXPECT_EQ(rig_.stack().flow_gauges().tcp_peeking, 1u) << "not before peek_ms";
  EXPECT_FALSE(guest_.reset_seen());
  rig_.advance(base::Millis(1000));
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(rig_.stack().counters().name_refused, 1u);
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AConnectNotAnsweredWithinConnectMsResetsTheGuest) {
  // A listener whose backlog is full drops the next SYN: the flow's connect
  // stays in progress.
  server_ = flow_test::tcp_listener(0);
  guest_ = GuestTcp(FlowRig::fresh_port(), flow_test::kLoopback, server_.port);
  base::UniqueFd filler(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(flow_test::kLoopback);
  a.sin_port = htons(server_.port);
  ASSERT_EQ(::connect(filler.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  start(with("[timeouts]\nconnect_ms = 4000\n"));
  ASSERT_TRUE(handshake());
  rig_.advance(base::Millis(3000));
  ASSERT_EQ(rig_.stack().flow_gauges().tcp_connecting, 1u) << "the connect should still be in progress";
  EXPECT_FALSE(guest_.reset_seen());
  rig_.advance(base::Millis(1000));
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(rig_.stack().counters().connect_failed, 1u);
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AnIdleFlowIsClosedAfterTcpIdleAndActivityPutsThatOff) {
  base::UniqueFd host = open_flow(with("[timeouts]\ntcp_idle_s = 30\n"));
  ASSERT_TRUE(host);
  rig_.advance(base::Seconds(20));
  send(guest_.data(bytes_of("x")));  // activity at 20 s
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 1));
  rig_.advance(base::Seconds(20));  // 40 s: 20 s idle
  EXPECT_EQ(flows(), 1u) << "activity put the idle deadline off";
  EXPECT_FALSE(guest_.reset_seen());
  rig_.advance(base::Seconds(10));  // 30 s idle
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AFlowEndsWhenItsAnswerExpiresPastGrace) {
  start(with("grace = 5\n"), base::Seconds(10));
  ASSERT_TRUE(handshake());
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host);
  rig_.advance(base::Seconds(14));
  EXPECT_EQ(flows(), 1u) << "alive within TTL + grace";
  rig_.advance(base::Seconds(1));
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
  EXPECT_EQ(host_end(host.get()), ECONNRESET);
}

TEST_P(TcpFlowTest, AFlowEndsWhenItsDestinationBecomesAnAddressOfThisHost) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  ASSERT_TRUE(rig_.stack().host_addresses().add(policy::IpAddress::v4(flow_test::kLoopback)));
  rig_.advance(base::Seconds(1));
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
}

// ---- live policy reload (GuestStack::apply_policy()) ----------------------

TEST_P(TcpFlowTest, AReloadThatStillAllowsTheFlowLeavesItUntouched) {
  StackOptions o;
  o.port = server_.port;
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  const auto applied =
      rig_.reload(FlowRig::policy_text(o) + "[[allow]]\nnames = [\"other.example\"]\nports = [443]\n");
  EXPECT_EQ(applied.tcp_revoked, 0u);
  EXPECT_EQ(applied.answers_forgotten, 0u);
  send(guest_.data(pattern(0, 1000)));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 1000));
  EXPECT_EQ(got, pattern(0, 1000));
  write_host(host.get(), bytes_of("still here"));
  ASSERT_TRUE(until([&] { return guest_.received().size() >= 10; }));
  EXPECT_EQ(guest_.received(), bytes_of("still here"));
  EXPECT_FALSE(guest_.reset_seen());
  EXPECT_EQ(flows(), 1u);
  EXPECT_EQ(rig_.stack().counters().policy_reloads, 1u);
  EXPECT_EQ(rig_.stack().counters().flows_revoked, 0u);
}

TEST_P(TcpFlowTest, AReloadThatRevokesTheNameCutsTheFlowAtOnceAndForgetsItsAnswers) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  const auto applied = rig_.reload(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"other.example\"]\nports = [443]\n"
      "[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n");
  EXPECT_EQ(applied.tcp_revoked, 1u);
  EXPECT_EQ(applied.answers_forgotten, 1u);
  // Cut within the reload's own turn: no clock moved, no sweep ran.
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen()) << "the guest is told with a RST";
  EXPECT_EQ(flows(), 0u);
  EXPECT_EQ(host_end(host.get()), ECONNRESET) << "the host socket closed with SO_LINGER 0";
  EXPECT_EQ(rig_.stack().counters().flows_revoked, 1u);
  EXPECT_TRUE(rig_.stack()
                  .table()
                  .names_for(policy::IpAddress::v4(flow_test::kLoopback), rig_.stack().loop().now())
                  .empty());
  // A new flow to the address is refused: nothing vouches for it now.
  GuestTcp again{FlowRig::fresh_port(), flow_test::kLoopback, server_.port};
  rig_.send(again.syn());
  again.take(rig_.seen());
  EXPECT_TRUE(again.reset_seen());
  EXPECT_FALSE(again.syn_ack());
}

TEST_P(TcpFlowTest, AReloadThatDropsThePortCutsTheFlowAndKeepsTheAnswer) {
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  StackOptions moved;
  moved.port = static_cast<std::uint16_t>(server_.port + 1);
  const auto applied = rig_.reload(FlowRig::policy_text(moved));
  EXPECT_EQ(applied.tcp_revoked, 1u);
  EXPECT_EQ(applied.answers_forgotten, 0u) << "the name is still allowed";
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AReloadThatWithdrawsTheUnsafeLiftCutsTheFlow) {
  StackOptions o;
  o.port = server_.port;
  base::UniqueFd host = open_flow();
  ASSERT_TRUE(host);
  const auto applied = rig_.reload(FlowRig::policy_text(o, /*lift=*/false));
  EXPECT_EQ(applied.tcp_revoked, 1u);
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
}

TEST_P(TcpFlowTest, AHandshakeInProgressAtAReloadIsJudgedByTheNewPolicy) {
  start({});
  rig_.send(guest_.syn());
  guest_.take(rig_.seen());
  ASSERT_TRUE(guest_.syn_ack());
  rig_.reload(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"other.example\"]\nports = [443]\n"
      "[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n");
  rig_.send(guest_.ack());
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen());
  EXPECT_EQ(flows(), 0u);
  EXPECT_EQ(rig_.stack().counters().flows_revoked, 1u);
}

// ---- audit mode ([mode] audit) -------------------------------------------

TEST_P(TcpFlowTest, AuditModeLetsAPortTheRuleDoesNotAllowThroughAndCountsIt) {
  StackOptions elsewhere;
  elsewhere.port = static_cast<std::uint16_t>(server_.port + 1);  // the rule allows another port
  elsewhere.extra = "[mode]\naudit = true\n";
  elsewhere.host_io_on_ring = GetParam();
  rig_.start(elsewhere);
  ASSERT_TRUE(handshake()) << "audit mode accepts what port_not_allowed would refuse";
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host);
  send(guest_.data(bytes_of("audited")));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 7));
  EXPECT_EQ(got, bytes_of("audited"));
  EXPECT_EQ(rig_.stack().counters().audit_would_deny, 1u);
  EXPECT_EQ(rig_.stack().counters().tcp_refused, 0u);
}

TEST_P(TcpFlowTest, AuditModeNeverLiftsAReservedRange) {
  StackOptions o;
  o.port = server_.port;
  o.extra = "[mode]\naudit = true\n";
  o.host_io_on_ring = GetParam();
  rig_.start(o);
  // The same stack, its policy now without the [unsafe] lift of 127.0.0.0/8.
  rig_.reload(FlowRig::policy_text(o, /*lift=*/false));
  rig_.send(guest_.syn());
  guest_.take(rig_.seen());
  EXPECT_TRUE(guest_.reset_seen()) << "a reserved destination is refused in audit mode too";
  EXPECT_FALSE(guest_.syn_ack());
  EXPECT_EQ(rig_.stack().counters().audit_would_deny, 0u);
  EXPECT_EQ(rig_.stack().counters().tcp_refused, 1u);
}

TEST_P(TcpFlowTest, AuditModeLetsAnotherSniThroughAndAReloadCutsNothing) {
  StackOptions o = verified("[mode]\naudit = true\n");
  start(o);
  ASSERT_TRUE(handshake());
  send(guest_.data(client_hello("evil.example")));
  base::UniqueFd host = accept_host();
  ASSERT_TRUE(host) << "audit mode connects despite the SNI";
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, client_hello("evil.example").size()));
  EXPECT_EQ(rig_.stack().counters().name_refused, 0u);
  EXPECT_EQ(rig_.stack().counters().audit_would_deny, 1u);
  // A reload that would revoke the flow, still in audit mode: kept, said.
  const auto applied = rig_.reload(
      "[mode]\naudit = true\n[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"other.example\"]\n"
      "ports = [443]\n[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n");
  EXPECT_EQ(applied.tcp_revoked, 0u);
  EXPECT_EQ(applied.answers_forgotten, 0u);
  EXPECT_EQ(flows(), 1u);
  EXPECT_EQ(rig_.stack().counters().audit_would_deny, 2u);
  EXPECT_FALSE(guest_.reset_seen());
}

// ---- egress budgets ([[allow]] max_bytes_out, max_flows) ------------------

TEST_P(TcpFlowTest, CrossingMaxBytesOutCutsTheFlowAndRefusesNewOnes) {
  StackOptions o;
  o.rule_extra = "max_bytes_out = 4000\nper = \"1h\"\n";
  base::UniqueFd host = open_flow(o);
  ASSERT_TRUE(host);
  send(guest_.data(pattern(0, 1000)));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 1000));
  EXPECT_FALSE(guest_.reset_seen()) << "within the budget";
  for (std::size_t at = 1000; at < 4000; at += 1000) send(guest_.data(pattern(at, 1000)));
  ASSERT_TRUE(until([&] { return guest_.reset_seen(); })) << "cut once 4000 bytes went";
  EXPECT_EQ(flows(), 0u);
  EXPECT_EQ(rig_.stack().counters().budget_crossed, 1u);
  EXPECT_EQ(rig_.stack().counters().budget_cut, 1u);
  // A new flow to the rule's names: refused for the rest of the window.
  GuestTcp again{FlowRig::fresh_port(), flow_test::kLoopback, server_.port};
  rig_.send(again.syn());
  again.take(rig_.seen());
  EXPECT_TRUE(again.reset_seen());
  EXPECT_EQ(rig_.stack().counters().budget_refused, 1u);
  // The next window admits again.
  rig_.advance(base::Seconds(3600));
  rig_.answer(base::Seconds(3600));  // the guest asks again: the old answer expired with the window
  GuestTcp later{FlowRig::fresh_port(), flow_test::kLoopback, server_.port};
  rig_.send(later.syn());
  later.take(rig_.seen());
  EXPECT_TRUE(later.syn_ack());
}

TEST_P(TcpFlowTest, MaxFlowsRefusesTheFlowPastItAndLeavesTheLiveOne) {
  StackOptions o;
  o.rule_extra = "max_flows = 1\n";
  base::UniqueFd host = open_flow(o);
  ASSERT_TRUE(host);
  GuestTcp second{FlowRig::fresh_port(), flow_test::kLoopback, server_.port};
  rig_.send(second.syn());
  second.take(rig_.seen());
  EXPECT_TRUE(second.reset_seen());
  EXPECT_EQ(rig_.stack().counters().budget_refused, 1u);
  EXPECT_EQ(rig_.stack().counters().budget_crossed, 1u);
  send(guest_.data(bytes_of("still open")));
  Bytes got;
  ASSERT_TRUE(read_host(host.get(), got, 10));
  EXPECT_FALSE(guest_.reset_seen());
}

}  // namespace
}  // namespace abox::netstack
