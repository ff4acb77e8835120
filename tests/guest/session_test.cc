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
#include "tests/guest/session_rig.h"

namespace abox::guest {
namespace {

using namespace abox::guest::testing;

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
      auto c = decode_session_credit(r->payload);
      credit += c->bytes;
      granted += c->bytes;
    } else if (r->type == static_cast<std::uint8_t>(GuestMessage::kStdout)) {
      out += stream_text(*r);
    } else if (r->type == static_cast<std::uint8_t>(GuestMessage::kExited)) {
      exited = decode_exited(r->payload);
    }
    while (credit > 0 && left > 0) {
      std::size_t n = std::min<std::uint64_t>({credit, left, 30000});
      rig.send_stdin(kMainSession, std::string(n, 'x'));
      credit -= n;
      left -= n;
      if (left == 0) rig.send_stdin_eof();
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
  EXPECT_EQ(stream_text(rig.expect(GuestMessage::kStdout)), "ready\n");
  rig.send_signal(kMainSession, SIGTERM);
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
