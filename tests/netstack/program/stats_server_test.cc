// StatsServer and the stats JSON: one JSON object per connection, the same
// object stats.h builds (read back by stats_reader.h), socket mode 0600, a
// stale socket replaced, anything else at the path left alone, a live
// server never taken over. MemoryProbe reads real numbers.
#include "netstack/program/stats_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/byte_reader.h"
#include "base/control_client.h"
#include "base/event_log.h"
#include "base/random.h"
#include "netstack/program/dns_host_server.h"
#include "netstack/program/memory_trimmer.h"
#include "netstack/program/stats.h"
#include "netstack/program/stats_reader.h"
#include "policy/policy_file.h"
#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

class StatsServerTest : public ::testing::Test {
 protected:
  // Connects and sends `request` (a whole line, or a piece of one; nothing
  // when empty).
  static base::UniqueFd connect_to(const std::string& path, std::string_view request = "stats\n") {
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return {};
    if (!request.empty() && ::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
                                static_cast<ssize_t>(request.size()))
      return {};
    return fd;
  }
  // Turns the loop a few times; true when fd has nothing to read yet and is
  // still open.
  static bool nothing_yet(io::EventLoop& loop, int fd) {
    for (int turn = 0; turn < 5; ++turn) loop.run_once(base::Millis(10));
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // Turns the loop until the server has answered (bounded), then reads to EOF.
  static std::optional<std::string> read_reply(io::EventLoop& loop, int fd) {
    std::string out;
    char buf[4096];
    for (int turn = 0; turn < 50; ++turn) {
      loop.run_once(base::Millis(20));
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0) return out;
        if (n < 0) break;
        out.append(buf, static_cast<std::size_t>(n));
      }
    }
    return std::nullopt;
  }

  abox::testing::TempDir dir_{"abox-stats-test"};
  std::string path_ = dir_.file("stats.sock");
};

TEST_F(StatsServerTest, EachConnectionGetsOneObjectAndIsClosed) {
  io::EventLoop loop;
  int calls = 0;
  auto server =
      StatsServer::create(loop, path_, [&] { return "{\"calls\":" + std::to_string(++calls) + "}"; });
  ASSERT_TRUE(server.ok()) << server.error();
  for (int i = 1; i <= 3; ++i) {
    auto c = connect_to(path_);
    ASSERT_TRUE(c);
    auto reply = read_reply(loop, c.get());
    ASSERT_TRUE(reply) << "no reply and no EOF";
    EXPECT_EQ(*reply, "{\"calls\":" + std::to_string(i) + "}\n");
  }
  EXPECT_EQ((*server)->counters().served, 3u);
  EXPECT_EQ((*server)->counters().replies_cut, 0u);
}

TEST_F(StatsServerTest, ManyWaitingClientsAreAllServed) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"x\":1}"); });
  ASSERT_TRUE(server.ok());
  constexpr int kClients = StatsServer::kAcceptsPerTurn + 4;  // more than one turn's worth (backlog is 16)
  std::vector<base::UniqueFd> clients;
  for (int i = 0; i < 16; ++i) clients.push_back(connect_to(path_));
  for (auto& c : clients) ASSERT_TRUE(c);
  for (auto& c : clients) {
    auto reply = read_reply(loop, c.get());
    ASSERT_TRUE(reply);
    EXPECT_EQ(*reply, "{\"x\":1}\n");
  }
  for (int i = 16; i < kClients; ++i) {
    auto c = connect_to(path_);
    ASSERT_TRUE(c);
    auto reply = read_reply(loop, c.get());
    ASSERT_TRUE(reply);
  }
  EXPECT_EQ((*server)->counters().served, static_cast<std::uint64_t>(kClients));
}

// The request line decides the reply; the client sends it after connecting,
// in as many pieces as it likes.
TEST_F(StatsServerTest, NothingIsSentUntilTheRequestLineIsComplete) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"x\":1}"); });
  ASSERT_TRUE(server.ok());
  auto c = connect_to(path_, "");
  ASSERT_TRUE(c);
  EXPECT_TRUE(nothing_yet(loop, c.get()));
  ASSERT_EQ(::send(c.get(), "sta", 3, 0), 3);
  EXPECT_TRUE(nothing_yet(loop, c.get()));
  ASSERT_EQ(::send(c.get(), "ts\r\n", 4, 0), 4);
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("{\"x\":1}\n"));
}

TEST_F(StatsServerTest, AClientThatOnlyHalfClosesGetsTheCounters) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"x\":1}"); });
  ASSERT_TRUE(server.ok());
  auto c = connect_to(path_, "");
  ASSERT_TRUE(c);
  ASSERT_EQ(::shutdown(c.get(), SHUT_WR), 0);
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("{\"x\":1}\n"));
}

TEST_F(StatsServerTest, ExplainGoesToItsHandlerAndEverythingElseIsAnError) {
  io::EventLoop loop;
  std::string asked;
  auto server = StatsServer::create(
      loop, path_, [] { return std::string("{}"); },
      [&](std::string_view args) {
        asked = std::string(args);
        return std::string("0\nfine");
      });
  ASSERT_TRUE(server.ok());
  auto c = connect_to(path_, "explain --json 192.0.2.1:443\n");
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("0\nfine\n"));
  EXPECT_EQ(asked, "--json 192.0.2.1:443");
  auto bad = connect_to(path_, "reboot\n");
  auto reply = read_reply(loop, bad.get());
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->starts_with("{\"error\":\"unknown request")) << *reply;
  auto big = connect_to(path_, std::string(StatsServer::kMaxRequest + 10, 'x'));
  reply = read_reply(loop, big.get());
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->starts_with("{\"error\":\"the request is longer")) << *reply;
  EXPECT_EQ((*server)->counters().bad_requests, 2u);
}

// The protocol's version (base/control_protocol.h): the one spoken here is
// read past, with or without a newline after the line; another is refused.
TEST_F(StatsServerTest, TheVersionIsCheckedAndReadPast) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"x\":1}"); });
  ASSERT_TRUE(server.ok());
  for (std::string_view asked : {"ABOX-CTL/1 stats\n", "ABOX-CTL/1 stats"}) {
    auto c = connect_to(path_, asked);
    ::shutdown(c.get(), SHUT_WR);
    EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("{\"x\":1}\n")) << asked;
  }
  for (std::string_view other : {"ABOX-CTL/2 stats\n", "ABOX-CTL/2 reload x\n", "ABOX-CTL/x stats"}) {
    auto c = connect_to(path_, other);
    ::shutdown(c.get(), SHUT_WR);
    auto reply = read_reply(loop, c.get());
    ASSERT_TRUE(reply) << other;
    EXPECT_TRUE(reply->starts_with("3\n")) << other << ": " << *reply;
  }
  EXPECT_EQ((*server)->counters().bad_requests, 3u);
}

// An fd sent with a reload (what `abox policy apply` does with the policy of
// record it installs) reaches the handler: the very file, open for reading.
// Sent by the one client every command uses (base/control_client.h).
TEST_F(StatsServerTest, AReloadHandsOnTheFdSentWithIt) {
  io::EventLoop loop;
  struct stat got {};
  bool had_fd = false;
  auto server = StatsServer::create(
      loop, path_, [] { return std::string("{}"); }, {},
      [&](std::string_view, std::string_view, base::UniqueFd file) {
        had_fd = static_cast<bool>(file);
        if (file) ::fstat(file.get(), &got);
        return std::string("0\napplied");
      });
  ASSERT_TRUE(server.ok());
  const std::string policy_path = dir_.file("policy.toml");
  { std::ofstream(policy_path) << "[[allow]]\nnames = [\"example.com\"]\nports = [443]\n"; }
  base::UniqueFd file(::open(policy_path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file);
  struct stat want {};
  ASSERT_EQ(::fstat(file.get(), &want), 0);
  for (const bool send_fd : {true, false}) {
    std::optional<std::string> reply;
    std::string error;
    std::atomic<bool> done = false;
    std::thread client([&] {
      reply = base::ask_control_socket(path_, "reload " + policy_path, "text", error, std::chrono::seconds(5),
                                       send_fd ? file.get() : -1);
      done = true;
    });
    // Bounded in time, not in turns: a turn may end at once, before the
    // client's thread has even connected.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done && std::chrono::steady_clock::now() < give_up) loop.run_once(base::Millis(10));
    client.join();
    ASSERT_TRUE(reply) << error;
    EXPECT_EQ(*reply, "0\napplied\n");
    EXPECT_EQ(had_fd, send_fd);
    if (send_fd) {
      EXPECT_TRUE(got.st_ino == want.st_ino && got.st_dev == want.st_dev) << "another file came";
    }
  }
}

// "reload SOURCE": the text after the line, to the client's half-close,
// goes whole to the handler (here larger than one read and than
// kMaxRequest); nothing is answered before the end of the text.
TEST_F(StatsServerTest, AReloadTakesTheTextToTheEndOfTheStream) {
  io::EventLoop loop;
  std::string source;
  std::string text;
  auto server = StatsServer::create(
      loop, path_, [] { return std::string("{}"); }, {},
      [&](std::string_view s, std::string_view t, base::UniqueFd file) {
        source = std::string(s);
        text = std::string(t);
        EXPECT_FALSE(file) << "no fd was sent";
        return std::string("0\napplied");
      });
  ASSERT_TRUE(server.ok());
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "# line " + std::to_string(i) + "\n";
  ASSERT_GT(body.size(), 16384u);
  auto c = connect_to(path_, "reload /etc/abox/p.toml\n" + body.substr(0, 100));
  ASSERT_TRUE(c);
  EXPECT_TRUE(nothing_yet(loop, c.get())) << "answered before the text ended";
  const std::string rest = body.substr(100);
  ASSERT_EQ(::send(c.get(), rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  ::shutdown(c.get(), SHUT_WR);
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("0\napplied\n"));
  EXPECT_EQ(source, "/etc/abox/p.toml");
  EXPECT_EQ(text, body);
  // Without a handler (abox-net dns): not a reload, exit status 3.
  auto none = StatsServer::create(loop, dir_.file("dns.sock"), [] { return std::string("{}"); });
  ASSERT_TRUE(none.ok());
  auto d = connect_to(dir_.file("dns.sock"), "reload x\n[[allow]]\n");
  ::shutdown(d.get(), SHUT_WR);
  auto reply = read_reply(loop, d.get());
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->starts_with("3\n")) << *reply;
}

TEST_F(StatsServerTest, WithoutAnExplainHandlerExplainIsAnError) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{}"); });
  ASSERT_TRUE(server.ok());
  auto c = connect_to(path_, "explain 192.0.2.1\n");
  auto reply = read_reply(loop, c.get());
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->starts_with("{\"error\":\"this abox-net admits no flows")) << *reply;
}

// Silent clients hold at most kMaxWaiting connections; one more is closed
// at once, and the others still get their answer when they ask.
TEST_F(StatsServerTest, SilentClientsAreBounded) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"x\":1}"); });
  ASSERT_TRUE(server.ok());
  std::vector<base::UniqueFd> silent;
  for (std::size_t i = 0; i < StatsServer::kMaxWaiting; ++i) {
    silent.push_back(connect_to(path_, ""));
    ASSERT_TRUE(silent.back());
    loop.run_once(base::Millis(10));
  }
  for (int turn = 0; turn < 5; ++turn) loop.run_once(base::Millis(10));
  auto extra = connect_to(path_, "");
  ASSERT_TRUE(extra);
  EXPECT_EQ(read_reply(loop, extra.get()), std::optional<std::string>(""));  // closed unanswered
  EXPECT_EQ((*server)->counters().refused_busy, 1u);
  ASSERT_EQ(::send(silent[0].get(), "stats\n", 6, 0), 6);
  EXPECT_EQ(read_reply(loop, silent[0].get()), std::optional<std::string>("{\"x\":1}\n"));
}

TEST_F(StatsServerTest, TheSocketIsMode0600) {
  io::EventLoop loop;
  const mode_t old = ::umask(0);  // a permissive umask must not leak through
  auto server = StatsServer::create(loop, path_, [] { return std::string("{}"); });
  ::umask(old);
  ASSERT_TRUE(server.ok());
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(StatsServerTest, AStaleSocketIsReplaced) {
  {
    // A socket file nobody listens on (a process that died).
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  }
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{\"fresh\":1}"); });
  ASSERT_TRUE(server.ok()) << server.error();
  auto c = connect_to(path_);
  ASSERT_TRUE(c);
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("{\"fresh\":1}\n"));
}

TEST_F(StatsServerTest, ALiveServerIsNotTakenOver) {
  io::EventLoop loop;
  auto first = StatsServer::create(loop, path_, [] { return std::string("{\"first\":1}"); });
  ASSERT_TRUE(first.ok());
  auto second = StatsServer::create(loop, path_, [] { return std::string("{\"second\":1}"); });
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("already listening on " + path_), std::string::npos) << second.error();
  // The check did not connect: the first server has served nobody.
  for (int turn = 0; turn < 3; ++turn) loop.run_once(base::Millis(10));
  EXPECT_EQ((*first)->counters().served, 0u);
  auto c = connect_to(path_);
  ASSERT_TRUE(c);
  EXPECT_EQ(read_reply(loop, c.get()), std::optional<std::string>("{\"first\":1}\n"));
}

TEST_F(StatsServerTest, AnotherKindOfFileIsLeftAlone) {
  {
    std::ofstream f(path_);
    f << "precious";
  }
  io::EventLoop loop;
  auto server = StatsServer::create(loop, path_, [] { return std::string("{}"); });
  ASSERT_FALSE(server.ok());
  std::ifstream in(path_);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "precious");
}

TEST_F(StatsServerTest, APathTooLongIsRefused) {
  io::EventLoop loop;
  auto server = StatsServer::create(loop, "/tmp/" + std::string(200, 'x'), [] { return std::string("{}"); });
  EXPECT_FALSE(server.ok());
}

TEST(MemoryProbe, ReadsResidentSetAndHeap) {
  MemoryProbe probe;
  const MemoryUsage before = probe.read();
  EXPECT_GT(before.rss_bytes, 1u << 20) << "a process this size has more than 1 MiB resident";
  // 64 MiB, touched: heap in use and RSS both grow.
  constexpr std::size_t kBig = 64u << 20;
  auto* big = static_cast<char*>(std::malloc(kBig));
  ASSERT_NE(big, nullptr);
  std::memset(big, 1, kBig);
  const MemoryUsage during = probe.read();
  EXPECT_GE(during.heap_in_use_bytes, before.heap_in_use_bytes + kBig);
  EXPECT_GE(during.rss_bytes, before.rss_bytes + kBig / 2);
  std::free(big);
}

// The dns mode's JSON, from a real DnsHostServer, read back by the reader
// `abox-net stats` uses.
TEST(StatsJson, DnsCountersReadBackByTheStatsReader) {
  auto p = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.test\"]\nports = [443]\n", "test");
  ASSERT_TRUE(p.ok());
  io::EventLoop loop;
  base::EventLog events = base::EventLog::discard();
  base::SystemRandom random;
  auto listen = policy::Endpoint::parse("127.0.0.1", 0);
  ASSERT_TRUE(listen);
  DnsHostServer server(loop, *p, p->dns().upstreams, *listen, events, random);
  MemoryProbe memory;
  MemoryTrimmer trimmer(loop, memory);
  const std::string json = dns_stats_json(server, memory, &trimmer);
  auto fields = parse_stats_json(base::as_bytes(json));
  ASSERT_TRUE(fields.ok()) << fields.error() << "\n" << json;
  ASSERT_FALSE(fields->empty());
  EXPECT_EQ(fields->front().name, "queries") << "SIGUSR1 readers key on the first field";
  bool rss = false;
  bool trims = false;
  for (const auto& f : *fields) {
    if (f.name == "memory_rss_bytes") rss = f.value > 0;
    if (f.name == "memory_trims") trims = f.value == trimmer.counters().trims;
  }
  EXPECT_TRUE(rss) << json;
  EXPECT_TRUE(trims) << json;
}

}  // namespace
}  // namespace abox::netstack
