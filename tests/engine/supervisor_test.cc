// The instance supervisor with a real abox-net and a fake VMM that plays the
// guest, honest or hostile (tests/engine/fake_guest.py): the outcome and its
// reason, the events, the state folder, nothing left running, and the host's
// memory flat while the guest floods the control channel. Exec sessions end
// to end on the host: a client on the instance's api.sock (as the daemon
// is), the supervisor, the multiplexer and the channel, the fake guest
// serving the execs.
#include "engine/instance/supervisor.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "engine/daemon/base64.h"
#include "engine/instance/exec_wire.h"
#include "engine/process/pipe_reader.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

// The VMM is a script: it connects to both sockets like QEMU would and speaks
// for the guest.
class FakeVmm final : public Vmm {
 public:
  explicit FakeVmm(std::string mode) : mode_(std::move(mode)) {}
  std::string_view name() const override { return "fake-vmm"; }
  base::Result<ChildSpec, std::string> command(const VmSpec& spec) const override {
    ChildSpec c;
    c.program = "/usr/bin/python3";
    c.argv = {c.program, std::string(ABOX_SOURCE_DIR) + "/tests/engine/fake_guest.py", spec.control_socket,
              spec.net_socket, mode_};
    c.env = {"PATH=/usr/bin:/bin"};
    c.fds = {{0, spec.stdin_fd}, {1, spec.console_fd}, {2, spec.stderr_fd}};
    return c;
  }

 private:
  std::string mode_;
};

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

struct RunResult {
  InstanceOutcome outcome;
  std::string stdout_text;
  std::string events;
  bool finished = false;
};

class SupervisorTest : public ::testing::Test {
 protected:
  // read_stdout=false leaves the command's stdout pipe undrained until the
  // instance is stopping: the host can write no more than the pipe takes,
  // so it grants no credit back beyond that.
  // while_running (on its own thread, once the instance runs): a client of the
  // instance's api.sock, as the daemon is; the instance is stopped after it.
  RunResult run(const std::string& mode, bool keep = true, bool read_stdout = true,
                std::function<void(const std::string& folder)> while_running = nullptr) {
    std::string policy = dir_.path() + "/policy.toml";
    std::ofstream(policy) << "version = 1\n[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = "
                             "[\"allowed.test\"]\nports = [443]\n";
    InstanceConfig c;
    c.name = "t" + std::to_string(++n_);
    c.instances_root = dir_.path() + "/instances";
    c.policy_file = policy;
    c.image_name = "fake";
    c.kernel = "/nonexistent/vmlinux";  // the fake VMM boots nothing
    c.initramfs = "/nonexistent/initramfs";
    c.argv = {"echo", "hi"};
    c.selftest_targets.denied_name = "denied.test";
    c.boot_timeout = std::chrono::seconds(30);
    c.stop_grace = std::chrono::seconds(2);
    c.keep = keep;
    c.tty = tty_;
    c.ipv6 = ipv6_;
    c.window = {24, 80};
    c.abox_net = ABOX_NET_PATH;
    c.abox = "/bin/false";
    c.qemu = "/usr/bin/python3";

    auto out = make_pipe();
    auto null = open_dev_null();
    FakeVmm vmm(mode);
    boost::asio::io_context io;
    RunResult r;
    InstanceSupervisor s(io, c, vmm, null.get(), out.write.get(), null.get(), -1,
                         [&](const InstanceOutcome& o) {
                           r.outcome = o;
                           r.finished = true;
                           io.stop();
                         });
    std::optional<PipeReader> reader;
    if (read_stdout) {
      reader.emplace(
          io, std::move(out.read),
          [&](std::span<const std::uint8_t> b) { r.stdout_text.append(b.begin(), b.end()); }, nullptr);
    }
    s.start();
    if (while_running) {
      const std::string folder = dir_.path() + "/instances/" + c.name;
      // api.sock is there from the guest's connection on; the client waits for what it needs.
      for (int i = 0; i < 600 && !r.finished && ::access((folder + "/api.sock").c_str(), F_OK) != 0; ++i)
        io.run_for(std::chrono::milliseconds(100));
      std::atomic<bool> client_done{false};
      std::thread client([&] {
        while_running(folder);
        client_done = true;
      });
      for (int i = 0; i < 600 && !client_done; ++i) io.run_for(std::chrono::milliseconds(100));
      client.join();
      s.stop(SIGTERM);
    }
    if (!read_stdout) {
      // Until the instance is on its way down (the guest was caught); then
      // stdout is drained, as everything written must be before it ends.
      for (int i = 0; i < 600 && !r.finished; ++i) {
        io.run_for(std::chrono::milliseconds(100));
        if (s.state() == InstanceState::kStopping || s.state() == InstanceState::kStopped ||
            s.state() == InstanceState::kFailed)
          break;
      }
      reader.emplace(
          io, std::move(out.read),
          [&](std::span<const std::uint8_t> b) { r.stdout_text.append(b.begin(), b.end()); }, nullptr);
    }
    io.run_for(std::chrono::seconds(60));
    folder_ = dir_.path() + "/instances/" + c.name;
    std::ifstream ev(folder_ + "/events.jsonl");
    r.events.assign(std::istreambuf_iterator<char>(ev), std::istreambuf_iterator<char>());
    std::ifstream vmm_log(folder_ + "/vmm.log");
    std::string log((std::istreambuf_iterator<char>(vmm_log)), std::istreambuf_iterator<char>());
    if (!log.empty()) std::cerr << "the fake VMM said: " << log << '\n';
    return r;
  }

  abox::testing::TempDir dir_{"supervisor"};
  std::string folder_;
  int n_ = 0;
  bool tty_ = false;   // the next run's command gets a pty
  bool ipv6_ = false;  // the next run's abox-net carries IPv6 (--ipv6 on)
};

TEST_F(SupervisorTest, AnHonestGuestRunsTheCommandInOrder) {
  auto r = run("honest");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kExited) << r.outcome.reason;
  ASSERT_TRUE(r.outcome.exit);
  EXPECT_EQ(r.outcome.exit->value, 3u);
  EXPECT_EQ(r.stdout_text, "hello from the fake guest\n");
  // Deny first: abox-net ready, then the VMM, then the self-test, then go.
  auto at = [&](std::string_view s) { return r.events.find(s); };
  EXPECT_LT(at("\"state\":\"starting_network\""), at("\"state\":\"starting_vmm\""));
  EXPECT_LT(at("\"state\":\"starting_vmm\""), at("\"kind\":\"selftest\""));
  EXPECT_LT(at("\"kind\":\"selftest\""), at("\"state\":\"running\""));
  EXPECT_LT(at("\"state\":\"running\""), at("\"kind\":\"command_started\""));
  EXPECT_NE(at("\"kind\":\"command_exited\""), std::string::npos);
  std::ifstream record(folder_ + "/instance.json");
  std::string json((std::istreambuf_iterator<char>(record)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"state\":\"stopped\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"abox-net\":{\"pid\":"), std::string::npos) << json;
}

// abox run --ipv6 on: the supervisor starts abox-net with --ipv6 on (its
// start event says so); without it, IPv6 stays off.
TEST_F(SupervisorTest, Ipv6OnIsPassedToAboxNet) {
  auto off = run("honest");
  ASSERT_EQ(off.outcome.kind, InstanceOutcome::Kind::kExited) << off.outcome.reason;
  EXPECT_NE(off.events.find("\"ipv6\":\"off\""), std::string::npos) << off.events;
  ipv6_ = true;
  auto on = run("honest");
  ASSERT_EQ(on.outcome.kind, InstanceOutcome::Kind::kExited) << on.outcome.reason;
  EXPECT_NE(on.events.find("\"ipv6\":\"on\""), std::string::npos) << on.events;
}

TEST_F(SupervisorTest, AForgedFrameIsLoggedAndIgnored) {
  auto r = run("forge");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kExited) << r.outcome.reason;
  ASSERT_TRUE(r.outcome.exit);
  EXPECT_EQ(r.outcome.exit->value, 3u);  // not the forged 0
  EXPECT_EQ(r.outcome.forged_frames, 1u);
  EXPECT_NE(r.events.find("\"kind\":\"control_forged_frame\""), std::string::npos);
}

TEST_F(SupervisorTest, ALyingLengthEndsTheSessionAndTheHostDoesNotGrow) {
  long before = rss_kib();
  auto r = run("oversize");
  long after = rss_kib();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCouldNotStart);
  EXPECT_NE(r.outcome.reason.find("frame_length_too_large"), std::string::npos) << r.outcome.reason;
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
}

TEST_F(SupervisorTest, GarbageInsteadOfHelloEndsTheSessionAndTheHostDoesNotGrow) {
  long before = rss_kib();
  auto r = run("garbage");
  long after = rss_kib();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCouldNotStart);
  EXPECT_NE(r.outcome.reason.find("control channel"), std::string::npos) << r.outcome.reason;
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
}

TEST_F(SupervisorTest, OutputPastTheCreditIsACrash) {
  // stdout is not drained: a reader as fast as the guest would earn it
  // credit back as quickly as it sends (the test once raced on that under
  // load), so the guest's 1 MiB could be within what was granted.
  auto r = run("overflow", /*keep=*/true, /*read_stdout=*/false);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCrashed);
  EXPECT_NE(r.outcome.reason.find("bytes of credit"), std::string::npos) << r.outcome.reason;
  // No more than the pipe took reached stdout; never the 1 MiB pushed.
  EXPECT_LT(r.stdout_text.size(), 1024u * 1024);
}

TEST_F(SupervisorTest, AFailedProbeKeepsTheCommandFromStarting) {
  auto r = run("selffail");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kSelftestFailed);
  EXPECT_NE(r.outcome.reason.find("direct_address"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.events.find("\"kind\":\"command_started\""), std::string::npos);
  EXPECT_EQ(r.events.find("\"state\":\"running\""), std::string::npos);
  EXPECT_TRUE(r.stdout_text.empty());
}

TEST_F(SupervisorTest, AGuestOfProtocolTwoIsToldToRebuildAndNeverHangs) {
  auto r = run("v2");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCouldNotStart);
  EXPECT_NE(r.outcome.reason.find("box-guest speaks control protocol 2, this abox speaks 3"),
            std::string::npos)
      << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("rebuild the image (abox image build fake)"), std::string::npos)
      << r.outcome.reason;
  EXPECT_EQ(r.events.find("\"kind\":\"command_started\""), std::string::npos);
}

TEST_F(SupervisorTest, FramesForSessionsNeverOpenedAreDroppedCountedAndLogged) {
  auto r = run("unknown");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kExited) << r.outcome.reason;
  ASSERT_TRUE(r.outcome.exit);
  EXPECT_EQ(r.outcome.exit->value, 3u);
  EXPECT_EQ(r.stdout_text, "hello from the fake guest\n") << "nothing of session 7 reached stdout";
  EXPECT_EQ(r.outcome.unknown_session_frames, 3u);
  EXPECT_NE(r.events.find("\"kind\":\"control_unknown_session\""), std::string::npos) << r.events;
  EXPECT_NE(r.events.find("\"session\":4294967295"), std::string::npos) << r.events;
}

// A blocking client of api.sock: one request, its lines.
class ApiSockClient {
 public:
  explicit ApiSockClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    timeval tv{20, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~ApiSockClient() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void send(const std::string& line) { (void)::send(fd_, line.data(), line.size(), MSG_NOSIGNAL); }
  // The next line as a JSON object (an empty one at the end or after 20 s).
  boost::json::object next() {
    for (;;) {
      auto nl = in_.find('\n');
      if (nl != std::string::npos) {
        std::string line = in_.substr(0, nl);
        in_.erase(0, nl + 1);
        std::error_code ec;
        auto v = boost::json::parse(line, ec);
        return !ec && v.is_object() ? v.get_object() : boost::json::object{{"unparsed", line}};
      }
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return {};
      in_.append(buf, static_cast<std::size_t>(n));
    }
  }
  // Lines until the one with "done" (or the end): what came on stdout and stderr, and that line.
  boost::json::object until_done(std::string& out, std::string& err) {
    for (int i = 0; i < 10000; ++i) {
      auto o = next();
      if (o.empty() || o.contains("done")) return o;
      for (auto [key, into] : {std::pair{"stdout", &out}, std::pair{"stderr", &err}}) {
        if (auto* d = o.if_contains(key)) {
          auto b = base64_decode(std::string_view(d->as_string()));
          if (b) into->append(b->begin(), b->end());
        }
      }
    }
    return {};
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string in_;
};

std::string exec_line(const std::string& json) {
  return std::string(kExecVerb) + json + "\n";
}

TEST_F(SupervisorTest, ExecsThroughApiSockEachWithItsOutputInputAndEnd) {
  std::string out1, err1, out2, err2, out3, err3;
  boost::json::object accepted, started, done1, done2, done3, refused, bad;
  auto r = run("exec", true, true, [&](const std::string& folder) {
    const std::string sock = folder + "/api.sock";
    // The main command says "main ready" once it runs: execs are refused before.
    for (int i = 0; i < 200; ++i) {
      std::ifstream ev(folder + "/events.jsonl");
      std::string text((std::istreambuf_iterator<char>(ev)), std::istreambuf_iterator<char>());
      if (text.find("command_started") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    {
      ApiSockClient c(sock);
      ASSERT_TRUE(c.connected());
      c.send(exec_line(R"({"argv":["ls","-l"],"env":["A=1"],"workdir":"/tmp"})"));
      accepted = c.next();
      started = c.next();
      done1 = c.until_done(out1, err1);
    }
    {
      // Two at once: the echo waits for its stdin while another runs and ends.
      ApiSockClient echo(sock), other(sock);
      echo.send(exec_line(R"({"argv":["echo-stdin"],"stdin":true})"));
      EXPECT_EQ(echo.next()["ok"], true);
      other.send(exec_line(R"({"argv":["true"]})"));
      EXPECT_EQ(other.next()["ok"], true);
      done3 = other.until_done(out3, err3);
      echo.send(std::string("{\"stdin\":\"") + base64_encode(std::vector<std::uint8_t>{'a', 'b', 'c', '\n'}) +
                "\"}\n");
      // More than the guest's stdin window, in lines of 64 KiB, as the daemon sends them.
      for (int i = 0; i < 5; ++i)
        echo.send(std::string("{\"stdin\":\"") + base64_encode(std::vector<std::uint8_t>(65536, 'x')) +
                  "\"}\n");
      echo.send("{\"eof\":true}\n");
      done2 = echo.until_done(out2, err2);
    }
    {
      ApiSockClient c(sock);
      c.send(exec_line(R"({"argv":["refuse"]})"));
      EXPECT_EQ(c.next()["ok"], true);
      std::string o, e;
      refused = c.until_done(o, e);
    }
    {
      ApiSockClient c(sock);
      c.send(exec_line(R"({"argv":[],"bogus":1})"));
      bad = c.next();
    }
    {
      // A client that goes away: its exec is killed in the guest.
      ApiSockClient c(sock);
      c.send(exec_line(R"({"argv":["echo-stdin"],"stdin":true})"));
      EXPECT_EQ(c.next()["ok"], true);
      EXPECT_TRUE(c.next().contains("started"));
      c.close();
      for (int i = 0; i < 200; ++i) {
        std::ifstream ev(folder + "/events.jsonl");
        std::string text((std::istreambuf_iterator<char>(ev)), std::istreambuf_iterator<char>());
        if (text.find("\"signalled\":true,\"value\":9") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kInterrupted) << r.outcome.reason;
  EXPECT_EQ(accepted["ok"], true);
  EXPECT_EQ(accepted["session"], 1);
  EXPECT_EQ(started["started"].as_object()["pid"], 1001);
  EXPECT_EQ(out1, "exec ls -l\n");
  EXPECT_EQ(err1, "err\n");
  EXPECT_EQ(done1["exit"].as_object()["value"], 5);
  EXPECT_EQ(done1["exit"].as_object()["signalled"], false);
  EXPECT_EQ(out2, "abc\n" + std::string(5 * 65536, 'x'));
  EXPECT_EQ(done2["exit"].as_object()["value"], 0);
  EXPECT_EQ(out3, "exec true\n");
  EXPECT_EQ(refused["start_failed"].as_object()["reason"], "refused");
  EXPECT_EQ(refused["start_failed"].as_object()["detail"],
            "box-guest runs at most 16 exec sessions at once, and 16 run");
  EXPECT_EQ(bad["ok"], false);
  EXPECT_NE(std::string(bad["error"].as_string()).find("unknown field"), std::string::npos) << bad;
  EXPECT_EQ(r.stdout_text, "main ready\n") << "no exec's output is the main command's";
  EXPECT_NE(r.events.find("\"kind\":\"exec\""), std::string::npos);
  EXPECT_NE(r.events.find("\"kind\":\"exec_exited\""), std::string::npos);
  EXPECT_NE(r.events.find("\"signalled\":true,\"value\":9"), std::string::npos)
      << "the exec of the client that left was killed";
}

TEST_F(SupervisorTest, AnExecAtGoBeforeTheCommandSaidItStartedIsTaken) {
  // `abox run -d` returns at go; an exec right after it may come before
  // box-guest said the command started (it was once refused then).
  std::string out, err;
  boost::json::object first, done;
  auto r = run("exec-early", true, true, [&](const std::string& folder) {
    for (int i = 0; i < 200; ++i) {
      std::ifstream ev(folder + "/events.jsonl");
      std::string text((std::istreambuf_iterator<char>(ev)), std::istreambuf_iterator<char>());
      if (text.find("\"state\":\"running\"") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ApiSockClient c(folder + "/api.sock");
    c.send(exec_line(R"({"argv":["early"]})"));
    first = c.next();
    done = c.until_done(out, err);
  });
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(first["ok"], true) << first;
  EXPECT_EQ(out, "exec early\n");
  EXPECT_EQ(done["exit"].as_object()["value"], 5);
}

TEST_F(SupervisorTest, AnExecIsRefusedUntilTheCommandRuns) {
  boost::json::object refusal;
  auto r = run("silent", true, true, [&](const std::string& folder) {
    // "silent": hello, then nothing: the instance never reaches its command.
    for (int i = 0; i < 100 && ::access((folder + "/api.sock").c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ApiSockClient c(folder + "/api.sock");
    c.send(exec_line(R"({"argv":["ls"]})"));
    refusal = c.next();
  });
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(refusal["ok"], false);
  EXPECT_NE(std::string(refusal["error"].as_string()).find("not running its command"), std::string::npos)
      << refusal;
}

TEST_F(SupervisorTest, AResizeBeforeTheCommandStartedReachesTheGuest) {
  // abox attach sends the terminal's size at once, maybe before the command
  // has started (it once got "not running", and the window stayed 24x80).
  tty_ = true;
  std::string answer;
  auto r = run("silent", true, true, [&](const std::string& folder) {
    ApiSockClient c(folder + "/api.sock");
    c.send(std::string(kResizeVerb) + "33 111\n");
    char buf[256];
    ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    if (n > 0) answer.assign(buf, static_cast<std::size_t>(n));
    for (int i = 0; i < 100; ++i) {  // until the fake guest says it got it
      std::ifstream console(folder + "/console.log");
      std::string text((std::istreambuf_iterator<char>(console)), std::istreambuf_iterator<char>());
      if (text.find("resize 0 33x111") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(answer, "OK\n");
  std::ifstream console(folder_ + "/console.log");
  std::string text((std::istreambuf_iterator<char>(console)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("resize 0 33x111"), std::string::npos) << text;
}

TEST_F(SupervisorTest, AResizeOfACommandWithoutATerminalIsRefused) {
  std::string answer;
  auto r = run("silent", true, true, [&](const std::string& folder) {
    ApiSockClient c(folder + "/api.sock");
    c.send(std::string(kResizeVerb) + "33 111\n");
    char buf[256];
    ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    if (n > 0) answer.assign(buf, static_cast<std::size_t>(n));
  });
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(answer, "ERR the command has no terminal (started without -t)\n");
}

TEST_F(SupervisorTest, AStateFolderIsRemovedUnlessKept) {
  auto r = run("honest", /*keep=*/false);
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.outcome.kept);
  EXPECT_NE(::access(folder_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace abox::engine
