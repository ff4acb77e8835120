// A whole box-guest session without a VM: Session runs in a forked child on
// one end of a socketpair (its control port), the test is the host on the
// other, speaking through guest/protocol/. The order of a session, output
// and stdin under credit, forged and out-of-place frames, a stream that
// cannot be followed, the channel closing, a signal, a command that leaves a
// background job. Commands change uid: run as root (skipped otherwise).
#include "guest/box_guest/session.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/random.h"
#include "guest/box_guest/console.h"

namespace abox::guest {
namespace {

struct Received {
  std::uint8_t type = 0;
  std::vector<std::uint8_t> payload;
};

class SessionRig {
 public:
  explicit SessionRig(SessionConfig config = {}) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair");
    int result[2];
    if (::pipe2(result, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    config.network.summary = "test network";
    child_ = ::fork();
    if (child_ == 0) {
      ::close(sv[0]);
      ::close(result[0]);
      sigset_t handled;
      sigemptyset(&handled);
      for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, sig);
      ::sigprocmask(SIG_BLOCK, &handled, nullptr);
      ::signal(SIGPIPE, SIG_IGN);
      base::UniqueFd signals(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
      ::fcntl(sv[1], F_SETFL, O_NONBLOCK);
      base::SeededRandom random(3);
      Session session(base::UniqueFd(sv[1]), std::move(signals), std::move(config), random);
      std::string why = session.run();
      [[maybe_unused]] auto n = ::write(result[1], why.data(), why.size());
      ::_exit(0);
    }
    ::close(sv[1]);
    ::close(result[1]);
    host_.reset(sv[0]);
    result_.reset(result[0]);
  }
  ~SessionRig() {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }

  void send(HostMessage type, const std::vector<std::uint8_t>& payload = {}) {
    std::vector<std::uint8_t> wire;
    writer_.append(wire, static_cast<std::uint8_t>(type), payload);
    write_all(wire);
  }
  // A frame with a wrong MAC at the current sequence number (which it does not use up).
  void send_forged(HostMessage type) {
    FrameWriter forger(Direction::kHostToGuest);
    ChannelKey wrong{};
    wrong.fill(0x66);
    forger.set_key(wrong);
    std::vector<std::uint8_t> wire;
    for (std::uint64_t i = 0; i <= writer_.next_seq(); ++i) {
      wire.clear();
      forger.append(wire, static_cast<std::uint8_t>(type), {});
    }
    write_all(wire);
  }
  void write_all(const std::vector<std::uint8_t>& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(host_.get(), bytes.data() + done, bytes.size() - done);
      if (n <= 0) throw std::runtime_error(std::string("write: ") + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
  }

  Setup setup(std::vector<std::string> argv, std::uint32_t credit = 1 << 20, bool stdin_open = false) {
    Setup s;
    s.key.fill(0x42);
    s.argv = std::move(argv);
    s.env = {{"PATH", "/usr/bin:/bin"}};
    s.workdir = "/";
    s.uid = 1000;
    s.gid = 1000;
    s.output_credit = credit;
    s.stdin_open = stdin_open;
    return s;
  }
  void send_setup(const Setup& s) {
    std::vector<std::uint8_t> p;
    encode(s, p);
    send(HostMessage::kSetup, p);
    writer_.set_key(s.key);
    reader_.set_key(s.key);
  }

  // The next frame (log frames are kept in logs, not returned); nullopt after 10 s.
  std::optional<Received> next(int timeout_ms = 10000) {
    const auto end = monotonic_ms() + timeout_ms;
    for (;;) {
      auto f = reader_.next();
      if (!f.ok()) throw std::runtime_error(std::string(frame_error_name(f.error())));
      if (*f) {
        Received r{(*f)->type, std::vector<std::uint8_t>((*f)->payload.begin(), (*f)->payload.end())};
        if (r.type == static_cast<std::uint8_t>(GuestMessage::kLog)) {
          logs.push_back(decode_log(r.payload)->text);
          continue;
        }
        return r;
      }
      const auto left = end - monotonic_ms();
      if (left <= 0) return std::nullopt;
      pollfd p{host_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      auto space = reader_.space();
      ssize_t n = ::read(host_.get(), space.data(), space.size());
      if (n <= 0) return std::nullopt;
      reader_.commit(static_cast<std::size_t>(n));
    }
  }
  Received expect(GuestMessage type) {
    auto r = next();
    if (!r)
      throw std::runtime_error("no frame, expected " +
                               std::string(guest_message_name(static_cast<std::uint8_t>(type))));
    if (r->type != static_cast<std::uint8_t>(type))
      throw std::runtime_error("got " + std::string(guest_message_name(r->type)) + ", expected " +
                               std::string(guest_message_name(static_cast<std::uint8_t>(type))));
    return *r;
  }

  // Why the session ended (what run() returned), once the child is gone; "" after 10 s.
  std::string ended() {
    std::string why;
    pollfd p{result_.get(), POLLIN, 0};
    for (auto end = monotonic_ms() + 10000; monotonic_ms() < end;) {
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = ::read(result_.get(), buf, sizeof buf);
      if (n <= 0) break;
      why.append(buf, static_cast<std::size_t>(n));
    }
    ::waitpid(child_, nullptr, 0);
    child_ = -1;
    return why;
  }

  void close_host() { host_.reset(); }

  std::vector<std::string> logs;

 private:
  pid_t child_ = -1;
  base::UniqueFd host_, result_;
  FrameWriter writer_{Direction::kHostToGuest};
  FrameReader reader_{Direction::kGuestToHost};
};

std::string text(const std::vector<std::uint8_t>& b) {
  return std::string(b.begin(), b.end());
}

#define REQUIRE_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "the command runs as uid 1000: needs root"

// Collects output until exited, granting `grant` bytes of credit back after
// each chunk; checks the guest never sends past its credit.
struct Outcome {
  std::string out, err;
  std::optional<Exited> exited;
  std::uint64_t most_outstanding = 0;
};
Outcome collect(SessionRig& rig, std::uint64_t credit, std::uint32_t grant) {
  Outcome o;
  std::uint64_t outstanding = 0;  // received, not yet granted back
  while (!o.exited) {
    auto r = rig.next();
    if (!r) throw std::runtime_error("the session went quiet");
    switch (static_cast<GuestMessage>(r->type)) {
      case GuestMessage::kStdout:
      case GuestMessage::kStderr:
        (r->type == static_cast<std::uint8_t>(GuestMessage::kStdout) ? o.out : o.err) += text(r->payload);
        outstanding += r->payload.size();
        EXPECT_LE(outstanding, credit) << "the guest sent past its credit";
        o.most_outstanding = std::max(o.most_outstanding, outstanding);
        while (outstanding >= grant) {
          std::vector<std::uint8_t> p;
          encode(Credit{grant}, p);
          rig.send(HostMessage::kOutputCredit, p);
          outstanding -= grant;
        }
        break;
      case GuestMessage::kExited:
        o.exited = decode_exited(r->payload);
        break;
      case GuestMessage::kStdinCredit:
        break;
      default:
        throw std::runtime_error("unexpected " + std::string(guest_message_name(r->type)));
    }
  }
  return o;
}

TEST(Session, HelloSetupGoStartedOutputExitedPoweroff) {
  REQUIRE_ROOT();
  SessionRig rig;
  auto hello = decode_hello(rig.expect(GuestMessage::kHello).payload);
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->version, kProtocolVersion);
  EXPECT_EQ(hello->agent, "box-guest/1");
  EXPECT_FALSE(hello->network_up);
  EXPECT_EQ(hello->network, "test network");
  rig.send_setup(rig.setup({"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}));
  rig.send(HostMessage::kGo);
  auto started = decode_started(rig.expect(GuestMessage::kStarted).payload);
  ASSERT_TRUE(started);
  EXPECT_GT(started->pid, 0u);
  auto o = collect(rig, 1 << 20, 1 << 20);
  EXPECT_EQ(o.out, "out\n");
  EXPECT_EQ(o.err, "err\n");
  ASSERT_TRUE(o.exited);
  EXPECT_FALSE(o.exited->signalled);
  EXPECT_EQ(o.exited->value, 7u);
  rig.send(HostMessage::kPoweroff);
  EXPECT_EQ(rig.ended(), "the host asked to power off");
}

TEST(Session, OutputNeverPassesTheCredit) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "head -c 200000 /dev/zero; head -c 50000 /dev/zero >&2"}, 1000));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  auto o = collect(rig, 1000, 700);
  EXPECT_EQ(o.out.size(), 200000u);
  EXPECT_EQ(o.err.size(), 50000u);
  EXPECT_LE(o.most_outstanding, 1000u);
  EXPECT_EQ(o.exited->value, 0u);
}

TEST(Session, StdinUnderCreditThenEof) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "wc -c"}, 1 << 20, /*stdin_open=*/true));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  std::uint64_t credit = 0, granted = 0;
  std::size_t left = 200000;
  std::string out;
  std::optional<Exited> exited;
  while (!exited) {
    auto r = rig.next();
    ASSERT_TRUE(r);
    if (r->type == static_cast<std::uint8_t>(GuestMessage::kStdinCredit)) {
      auto c = decode_credit(r->payload);
      credit += c->bytes;
      granted += c->bytes;
    } else if (r->type == static_cast<std::uint8_t>(GuestMessage::kStdout)) {
      out += text(r->payload);
    } else if (r->type == static_cast<std::uint8_t>(GuestMessage::kExited)) {
      exited = decode_exited(r->payload);
    }
    while (credit > 0 && left > 0) {
      std::size_t n = std::min<std::uint64_t>({credit, left, 30000});
      rig.send(HostMessage::kStdin, std::vector<std::uint8_t>(n, 'x'));
      credit -= n;
      left -= n;
      if (left == 0) rig.send(HostMessage::kStdinEof);
    }
  }
  EXPECT_EQ(out, "200000\n");
  EXPECT_GE(granted, 200000u);
  EXPECT_EQ(exited->value, 0u);
}

TEST(Session, ForgedFramesAreDroppedAndLoggedAndTheSixteenthEndsTheSession) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "echo ran"}));
  rig.send_forged(HostMessage::kPoweroff);  // would end the session, were it believed
  rig.send(HostMessage::kGo);               // the same sequence number: valid
  rig.expect(GuestMessage::kStarted);
  auto o = collect(rig, 1 << 20, 1 << 20);
  EXPECT_EQ(o.out, "ran\n");
  ASSERT_FALSE(rig.logs.empty());
  EXPECT_EQ(rig.logs[0], "dropped a frame from the host: frame_bad_mac (1 of 16)");
  for (int i = 0; i < 15; ++i) rig.send_forged(HostMessage::kSignal);
  EXPECT_EQ(rig.ended(), "16 bad frames from the host");
}

TEST(Session, BeforeSetupOnlySetupIsAccepted) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send(HostMessage::kGo);                              // unkeyed, before setup: dropped
  rig.send_setup(rig.setup({"/bin/sh", "-c", "exit 3"}));  // sequence 1: the go used up 0
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  auto o = collect(rig, 1 << 20, 1 << 20);
  EXPECT_EQ(o.exited->value, 3u);
}

TEST(Session, GoDuringTheSelftestIsIgnoredAndTheReportComesFirst) {
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  auto s = rig.setup({"/bin/true"});
  s.env.push_back({"KEY", "abox-nonce-" + std::string(64, 'e')});
  s.probes = {{ProbeKind::kNonceInEnv, "KEY"}, {ProbeKind::kDeniedName, "a.test"}};
  rig.send_setup(s);
  auto report = decode_selftest_report(rig.expect(GuestMessage::kSelftestReport).payload);
  ASSERT_TRUE(report);
  ASSERT_EQ(report->results.size(), 2u);
  EXPECT_EQ(report->results[0].outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(report->results[1].outcome, ProbeOutcome::kSkipped) << "no network in the test";
  rig.send(HostMessage::kPoweroff);
  EXPECT_EQ(rig.ended(), "the host asked to power off");
}

TEST(Session, StartFailedForAMissingCommand) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/nonexistent/agent"}));
  rig.send(HostMessage::kGo);
  auto f = decode_start_failed(rig.expect(GuestMessage::kStartFailed).payload);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, StartFailure::kNotFound);
  EXPECT_EQ(f->error, ENOENT);
  EXPECT_EQ(f->detail, "not found: /nonexistent/agent (No such file or directory)");
  rig.send(HostMessage::kPoweroff);
  EXPECT_EQ(rig.ended(), "the host asked to power off");
}

TEST(Session, SignalReachesTheProcessGroup) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "echo ready; sleep 30; echo not reached"}));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  EXPECT_EQ(text(rig.expect(GuestMessage::kStdout).payload), "ready\n");
  std::vector<std::uint8_t> p;
  encode(Signal{SIGTERM}, p);
  rig.send(HostMessage::kSignal, p);
  auto o = collect(rig, 1 << 20, 1 << 20);
  ASSERT_TRUE(o.exited);
  EXPECT_TRUE(o.exited->signalled);
  EXPECT_EQ(o.exited->value, static_cast<std::uint32_t>(SIGTERM));
  EXPECT_EQ(o.out, "");
}

TEST(Session, ABackgroundJobDoesNotHoldExitedBack) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "sleep 60 & echo done"}));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  auto o = collect(rig, 1 << 20, 1 << 20);  // rig.next() waits 10 s at most: sleep 60 would hold it
  EXPECT_EQ(o.out, "done\n");
  EXPECT_EQ(o.exited->value, 0u);
}

TEST(Session, LogLinesStopAtTheOutputHighWaterWhenTheHostDoesNotRead) {
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/true"}));
  // Each earns a log line ("a go with a payload: ignored"); the host reads nothing meanwhile.
  constexpr int kFrames = 20000;
  for (int i = 0; i < kFrames; ++i) rig.send(HostMessage::kGo, {1});
  // Now read all the session still has for us (it keeps running: nothing ended it).
  while (rig.next(1000)) {
  }
  EXPECT_GT(rig.logs.size(), 0u);
  EXPECT_LT(rig.logs.size(), static_cast<std::size_t>(kFrames))
      << "every line was queued: the queue is unbounded";
  rig.send(HostMessage::kPoweroff);
  EXPECT_EQ(rig.ended(), "the host asked to power off");
}

TEST(Session, AFrameTooLongForTheStreamEndsIt) {
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.write_all({0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(rig.ended(), "the host's stream cannot be followed: frame_length_too_large");
}

TEST(Session, TheHostClosingTheChannelEndsIt) {
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.close_host();
  EXPECT_EQ(rig.ended(), "the host closed the control channel");
}

}  // namespace
}  // namespace abox::guest
