// The command on a pty (setup's tty): it is the command's terminal with the
// window setup gave, resize reaches it, typed bytes go through the line
// discipline (0x03 is SIGINT for the foreground job), stdin_eof is the EOF
// character, signal goes to the foreground process group, and `exited`
// comes only after everything the command wrote. Real children as uid 1000
// over SessionRig: run as root (skipped otherwise).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "tests/guest/session_rig.h"

namespace abox::guest {
namespace {

using namespace abox::guest::testing;

struct TtyRun {
  std::string out;
  std::optional<Exited> exited;
  std::uint64_t stdin_credit = 0;
};

// Reads until `want` shows up in the output (or exited); grants credit back
// as it goes. Throws when the session goes quiet.
void read_until(SessionRig& rig, TtyRun& run, const std::string& want) {
  while (run.out.find(want) == std::string::npos && !run.exited) {
    auto r = rig.next();
    if (!r) throw std::runtime_error("the session went quiet; output so far: " + run.out);
    switch (static_cast<GuestMessage>(r->type)) {
      case GuestMessage::kStdout: {
        std::string chunk = stream_text(*r);
        run.out += chunk;
        rig.grant(session_of(*r), static_cast<std::uint32_t>(chunk.size()));
        break;
      }
      case GuestMessage::kStderr:
        throw std::runtime_error("stderr frame with a tty: " + stream_text(*r));
      case GuestMessage::kExited:
        run.exited = decode_exited(r->payload);
        break;
      case GuestMessage::kStdinCredit:
        run.stdin_credit += decode_session_credit(r->payload)->bytes;
        break;
      default:
        throw std::runtime_error("unexpected " + std::string(guest_message_name(r->type)));
    }
  }
}

void wait_exited(SessionRig& rig, TtyRun& run) {
  while (!run.exited) read_until(rig, run, std::string(1, '\0'));  // never printed: up to exited
}

Setup tty_setup(SessionRig& rig, std::vector<std::string> argv, std::uint16_t rows, std::uint16_t cols,
                std::uint32_t credit = 1 << 20) {
  Setup s = rig.setup(std::move(argv), credit, /*stdin_open=*/true);
  s.tty = true;
  s.window = {rows, cols};
  return s;
}

void send_stdin(SessionRig& rig, const std::string& bytes) {
  rig.send_stdin(kMainSession, bytes);
}

TEST(SessionTty, TheCommandsTerminalIsAPtyWithSetupsWindow) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(tty_setup(
      rig, {"/bin/sh", "-c", "tty; stty size; stat -c '%a %u' $(tty); test -t 2 && echo err-is-tty"}, 31,
      97));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  wait_exited(rig, run);
  EXPECT_EQ(run.exited->value, 0u) << run.out;
  EXPECT_EQ(run.out.rfind("/dev/pts/", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("\r\n31 97\r\n"), std::string::npos) << "the window setup gave; output: " << run.out;
  // Owned by the command's user, as login(1) would leave it.
  EXPECT_NE(run.out.find("\r\n620 1000\r\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("err-is-tty"), std::string::npos) << run.out;
}

TEST(SessionTty, AResizeIsSeenByTheCommand) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(tty_setup(rig, {"/bin/sh", "-c", "stty size; echo ready; read line; stty size"}, 24, 80));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  read_until(rig, run, "ready");
  rig.send_resize(kMainSession, 50, 132);
  send_stdin(rig, "\r");
  wait_exited(rig, run);
  EXPECT_NE(run.out.find("24 80\r\nready"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\r\n50 132\r\n"), std::string::npos) << run.out;
}

TEST(SessionTty, CtrlCTypedInterruptsTheForegroundJob) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(tty_setup(rig, {"/bin/sh", "-c", "echo ready; exec sleep 30"}, 24, 80));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  read_until(rig, run, "ready");
  send_stdin(rig, "\x03");
  wait_exited(rig, run);  // rig.next() waits 10 s at most: sleep 30 would hold it
  EXPECT_TRUE(run.exited->signalled);
  EXPECT_EQ(run.exited->value, static_cast<std::uint32_t>(SIGINT));
}

TEST(SessionTty, StdinEofIsTheEofCharacterAfterWhatWasTyped) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(tty_setup(rig, {"/bin/sh", "-c", "echo ready; wc -l; echo wc-done"}, 24, 80));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  read_until(rig, run, "ready");
  send_stdin(rig, "one\rtwo\r");
  rig.send_stdin_eof();
  wait_exited(rig, run);
  EXPECT_EQ(run.exited->value, 0u) << run.out;
  // The pty echoes what was typed; wc saw two lines, then EOF.
  EXPECT_NE(run.out.find("one\r\ntwo\r\n2\r\nwc-done\r\n"), std::string::npos) << run.out;
}

// A child in a process group of its own, which its parent (the command)
// puts in the pty's foreground, as a job-control shell does.
constexpr const char* kForegroundChild = R"(
import os, signal, sys, time
signal.signal(signal.SIGINT, lambda *a: print("parent-got-int", flush=True))
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setpgid(0, 0)
    os.write(ready_w, b"x")
    time.sleep(30)
    os._exit(0)
os.read(ready_r, 1)  # the child has its own group and default SIGINT
os.tcsetpgrp(0, pid)
print("ready", flush=True)
_, status = os.waitpid(pid, 0)
print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "none", flush=True)
)";

TEST(SessionTty, SignalGoesToTheForegroundProcessGroup) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  // SIGINT to the command's own group would reach only the parent (which
  // would say so) and miss the child.
  rig.send_setup(tty_setup(rig, {"/usr/bin/python3", "-c", kForegroundChild}, 24, 80));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  read_until(rig, run, "ready");
  rig.send_signal(kMainSession, SIGINT);
  wait_exited(rig, run);
  EXPECT_FALSE(run.exited->signalled) << run.out;
  EXPECT_EQ(run.exited->value, 0u) << run.out;
  EXPECT_NE(run.out.find("child signal 2"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("parent-got-int"), std::string::npos) << run.out;
}

TEST(SessionTty, ExitedComesAfterAllTheOutputUnderASmallCredit) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(tty_setup(rig, {"/usr/bin/seq", "1", "30000"}, 24, 80, /*credit=*/2000));
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  TtyRun run;
  wait_exited(rig, run);
  EXPECT_EQ(run.exited->value, 0u);
  std::string want;
  for (int i = 1; i <= 30000; ++i) want += std::to_string(i) + "\r\n";
  EXPECT_EQ(run.out.size(), want.size());
  EXPECT_TRUE(run.out == want) << "the pty's output, in order and whole";
}

TEST(SessionTty, AResizeWithoutATtyIsLoggedAndIgnored) {
  REQUIRE_ROOT();
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "test -t 1 || echo no-tty"}));
  rig.send_resize(kMainSession, 10, 10);
  rig.send(HostMessage::kGo);
  rig.expect(GuestMessage::kStarted);
  auto o = collect(rig, 1 << 20, 1 << 20);
  EXPECT_EQ(o.out, "no-tty\n");
  EXPECT_NE(std::find(rig.logs.begin(), rig.logs.end(), "a resize without a tty: ignored"), rig.logs.end());
}

}  // namespace
}  // namespace abox::guest
