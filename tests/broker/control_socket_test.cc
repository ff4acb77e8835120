// Tests for broker/control_socket: a request and its body reach the answer
// function whole, on the loop; the bounds (line, body, deadline, pending)
// hold; the client (engine/cli/control_request.h speaks the same protocol)
// is played here with plain sockets.

#include "broker/control_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/control_client.h"
#include "base/unique_fd.h"

namespace abox::broker {
namespace {

class ControlSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/abox-control-test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/broker.ctl";
    auto s = BrokerControlSocket::create(loop_, path_, [this](std::string_view line, std::string_view body) {
      lines_.emplace_back(line);
      bodies_.emplace_back(body);
      return "0\nanswered " + std::string(line);
    });
    ASSERT_TRUE(s.ok()) << s.error();
    socket_ = std::move(s).value();
  }
  void TearDown() override {
    socket_.reset();
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }

  base::UniqueFd connect_client() {
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  }

  // Sends bytes (and half-closes when asked), turns the loop until the
  // server closes, returns what it answered.
  std::string exchange(base::UniqueFd& fd, std::string_view bytes, bool half_close = true) {
    // A big body fills the socket buffer: write what fits, turn the loop, repeat.
    std::string_view left = bytes;
    for (int i = 0; i < 10000 && !left.empty(); ++i) {
      ssize_t n = ::send(fd.get(), left.data(), left.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) left.remove_prefix(static_cast<std::size_t>(n));
      if (n < 0 && errno != EAGAIN) break;
      loop_.run_once(base::Millis(1));
    }
    if (half_close) ::shutdown(fd.get(), SHUT_WR);
    std::string reply;
    for (int i = 0; i < 500; ++i) {
      loop_.run_once(base::Millis(10));
      char buf[4096];
      ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) reply.append(buf, static_cast<std::size_t>(n));
      if (n == 0) break;
    }
    return reply;
  }

  BrokerLoop loop_;
  std::string dir_, path_;
  std::unique_ptr<BrokerControlSocket> socket_;
  std::vector<std::string> lines_, bodies_;
};

TEST_F(ControlSocketTest, TheLineAndTheBodyArriveWhole) {
  auto fd = connect_client();
  std::string body = "[[allow]]\nname = \"example.com\"\n";
  body += std::string(200000, '#');  // larger than one read
  EXPECT_EQ(exchange(fd, "reload new.toml\n" + body), "0\nanswered reload new.toml\n");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "reload new.toml");
  EXPECT_EQ(bodies_[0], body);
  EXPECT_EQ(socket_->served(), 1u);
}

TEST_F(ControlSocketTest, ALineWithoutANewlineIsTheWholeRequest) {
  auto fd = connect_client();
  EXPECT_EQ(exchange(fd, "stats"), "0\nanswered stats\n");
  EXPECT_EQ(bodies_.at(0), "");
}

TEST_F(ControlSocketTest, AnOverlongLineIsRefusedUnanswered) {
  auto fd = connect_client();
  std::string reply = exchange(fd, std::string(2000, 'x'), false);
  EXPECT_EQ(reply.rfind("1\n", 0), 0u) << reply;
  EXPECT_TRUE(lines_.empty());
}

TEST_F(ControlSocketTest, APolicyOverTheBoundIsRefused) {
  auto fd = connect_client();
  std::string reply =
      exchange(fd, "reload big\n" + std::string(BrokerControlSocket::kMaxPolicyBytes + 10, '#'));
  EXPECT_NE(reply.find("larger than 4 MiB"), std::string::npos) << reply.substr(0, 100);
  EXPECT_TRUE(lines_.empty());
}

// What base::ask_control_socket sends (the version first) is answered, and
// the service sees the line without it.
TEST_F(ControlSocketTest, TheClientsVersionedRequestIsAnswered) {
  std::optional<std::string> reply;
  std::string error;
  std::atomic<bool> done = false;
  std::thread client([&] {
    reply = base::ask_control_socket(path_, "reload p.toml", "[[allow]]\n", error, std::chrono::seconds(5));
    done = true;
  });
  // Bounded in time, not in turns: a turn may end at once, before the
  // client's thread has even connected.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done && std::chrono::steady_clock::now() < give_up) loop_.run_once(base::Millis(10));
  client.join();
  ASSERT_TRUE(reply) << error;
  EXPECT_EQ(*reply, "0\nanswered reload p.toml\n");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(bodies_[0], "[[allow]]\n");
}

// Nasty requests, each on its own connection: never reaching the service,
// each answered with a status and why.
TEST_F(ControlSocketTest, NastyRequestsAreRefusedWithAReason) {
  struct Case {
    std::string bytes;
    std::string reply_starts;
  };
  const Case cases[] = {
      {"ABOX-CTL/2 reload x\n[[allow]]\n", "3\nprotocol ABOX-CTL/2 is not spoken here"},
      {"ABOX-CTL/01 stats\n", "3\na malformed protocol version"},
      {"ABOX-CTL/1stats\n", "3\na malformed protocol version"},
      {"ABOX-CTL/1 stats\nABOX-CTL/1 stats\n", "3\none request per connection: 17 bytes came after 'stats'"},
      {"ABOX-CTL/1 rel", "3\nunknown request"},  // truncated
      {"", "3\nunknown request"},
      {"reload \n", "3\nunknown request"},
      {std::string("stats\0\n", 7), "3\nthe request line holds a control byte"},
      {"stats\x1b[2J\n", "3\nthe request line holds a control byte"},
      {"\xff\xfe garbage\n", "3\nunknown request"},
  };
  for (const Case& c : cases) {
    auto fd = connect_client();
    const std::string reply = exchange(fd, c.bytes);
    EXPECT_EQ(reply.rfind(c.reply_starts, 0), 0u)
        << "for " << testing::PrintToString(c.bytes) << ": " << reply;
  }
  EXPECT_TRUE(lines_.empty());
}

TEST(ControlRequestParse, TheBoundsAreExact) {
  const std::string at_bound = "reload " + std::string(BrokerControlSocket::kMaxRequestLine - 7, 'x');
  const std::string at_bound_line = at_bound + "\n";  // the views point into it
  auto ok = BrokerControlSocket::parse_control_request(at_bound_line);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->line, at_bound);
  auto over = BrokerControlSocket::parse_control_request(at_bound + "x\n");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().status, 1);
  const std::string body(BrokerControlSocket::kMaxPolicyBytes, '#');
  EXPECT_TRUE(BrokerControlSocket::parse_control_request("reload p\n" + body).ok());
  auto big = BrokerControlSocket::parse_control_request("reload p\n" + body + "#");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().status, 1);
  auto crlf = BrokerControlSocket::parse_control_request("ABOX-CTL/1 stats\r\n");
  ASSERT_TRUE(crlf.ok());
  EXPECT_EQ(crlf->line, "stats");
}

TEST_F(ControlSocketTest, AClientThatNeverFinishesIsClosedAtItsDeadline) {
  base::MonoTime t = base::MonoClock::now();
  BrokerLoop loop([&t] { return t; });
  auto s = BrokerControlSocket::create(
      loop, dir_ + "/slow.ctl", [](std::string_view, std::string_view) { return std::string("0\nnever"); });
  ASSERT_TRUE(s.ok()) << s.error();
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = dir_ + "/slow.ctl";
  std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::send(fd.get(), "reload x\n", 9, MSG_NOSIGNAL), 9);
  for (int i = 0; i < 5; ++i) loop.run_once(base::Millis(5));
  char c;
  EXPECT_LT(::recv(fd.get(), &c, 1, MSG_DONTWAIT), 0) << "still open before the deadline";
  t += BrokerControlSocket::kRequestDeadline;
  for (int i = 0; i < 5; ++i) loop.run_once(base::Millis(5));
  EXPECT_EQ(::recv(fd.get(), &c, 1, MSG_DONTWAIT), 0) << "closed, unanswered, at the deadline";
  s.value().reset();
  ::unlink(p.c_str());
}

TEST_F(ControlSocketTest, PastThePendingBoundANewConnectionIsClosed) {
  std::vector<base::UniqueFd> idle;
  for (std::size_t i = 0; i < BrokerControlSocket::kMaxPending; ++i) idle.push_back(connect_client());
  for (int i = 0; i < 5; ++i) loop_.run_once(base::Millis(5));
  auto extra = connect_client();
  for (int i = 0; i < 5; ++i) loop_.run_once(base::Millis(5));
  char c;
  EXPECT_EQ(::recv(extra.get(), &c, 1, MSG_DONTWAIT), 0) << "closed at once";
  // The ones waiting still get answered.
  EXPECT_EQ(exchange(idle[0], "stats"), "0\nanswered stats\n");
}

}  // namespace
}  // namespace abox::broker
