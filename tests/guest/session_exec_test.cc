// Exec sessions beside the main command (protocol 3) over SessionRig: each
// session's output, stdin, window and end apart; several at once; the bound
// of 16 with the 17th refused and the others unaffected; execs before go and
// after the main command ended refused; host frames for a session that is
// not open logged and dropped; a setup of another version refused. Commands
// change uid: run as root (skipped otherwise).
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <string>

#include "tests/guest/session_rig.h"

namespace abox::guest {
namespace {

using namespace abox::guest::testing;

struct SessionView {
  std::string out, err;
  std::optional<Started> started;
  std::optional<StartFailed> start_failed;
  std::optional<Exited> exited;
  std::uint64_t stdin_credit = 0;
  std::uint64_t outstanding = 0;  // output received, not yet granted back
  std::uint64_t credit = 0;       // what this session was given
  bool ended() const { return exited.has_value() || start_failed.has_value(); }
};

// Reads the guest's frames into per-session views, granting each session's
// output back as it comes (and checking no session passes its own credit),
// until `done` says so. Throws when the session goes quiet.
class Sessions {
 public:
  explicit Sessions(SessionRig& rig) : rig_(rig) {}
  SessionView& operator[](std::uint32_t id) { return views_[id]; }

  template <class Done>
  void until(Done done) {
    while (!done()) {
      auto r = rig_.next();
      if (!r) throw std::runtime_error("the session went quiet");
      switch (static_cast<GuestMessage>(r->type)) {
        case GuestMessage::kStarted: {
          auto m = decode_started(r->payload);
          views_[m->session].started = m;
          break;
        }
        case GuestMessage::kStartFailed: {
          auto m = decode_start_failed(r->payload);
          views_[m->session].start_failed = m;
          break;
        }
        case GuestMessage::kExited: {
          auto m = decode_exited(r->payload);
          views_[m->session].exited = m;
          break;
        }
        case GuestMessage::kStdout:
        case GuestMessage::kStderr: {
          const std::uint32_t id = session_of(*r);
          SessionView& v = views_[id];
          const std::string chunk = stream_text(*r);
          (r->type == static_cast<std::uint8_t>(GuestMessage::kStdout) ? v.out : v.err) += chunk;
          v.outstanding += chunk.size();
          EXPECT_LE(v.outstanding, v.credit) << "session " << id << " sent past its credit";
          if (!hold_credit_.count(id)) {
            rig_.grant(id, static_cast<std::uint32_t>(v.outstanding));
            v.outstanding = 0;
          }
          break;
        }
        case GuestMessage::kStdinCredit: {
          auto m = decode_session_credit(r->payload);
          views_[m->session].stdin_credit += m->bytes;
          break;
        }
        default:
          throw std::runtime_error("unexpected " + std::string(guest_message_name(r->type)));
      }
    }
  }
  // Output of this session is not granted back (it runs out of credit).
  void hold_credit(std::uint32_t id) { hold_credit_[id] = true; }

 private:
  SessionRig& rig_;
  std::map<std::uint32_t, SessionView> views_;
  std::map<std::uint32_t, bool> hold_credit_;
};

Exec exec_of(std::uint32_t id, std::vector<std::string> argv, std::uint32_t credit = 1 << 20) {
  Exec e;
  e.session = id;
  e.argv = std::move(argv);
  e.workdir = "/";
  e.output_credit = credit;
  return e;
}

// hello, setup, go: the main command runs `main_script`.
void start_main(SessionRig& rig, Sessions& s, const std::string& main_script, bool stdin_open = false) {
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", main_script}, 1 << 20, stdin_open));
  s[kMainSession].credit = 1 << 20;
  rig.send(HostMessage::kGo);
  s.until([&] { return s[kMainSession].started.has_value(); });
}

void open_exec(SessionRig& rig, Sessions& s, const Exec& e) {
  s[e.session].credit = e.output_credit;
  rig.send_message(HostMessage::kExec, e);
}

TEST(SessionExec, AnExecsOutputAndExitAreItsOwn) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "echo main-out; echo main-err >&2; read x; echo main-after", /*stdin_open=*/true);
  open_exec(rig, s, exec_of(1, {"/bin/sh", "-c", "echo exec-out; echo exec-err >&2; exit 7"}));
  s.until([&] { return s[1].ended() && s[kMainSession].out.size() > 0 && s[kMainSession].err.size() > 0; });
  ASSERT_TRUE(s[1].started);
  EXPECT_EQ(s[1].started->session, 1u);
  EXPECT_GT(s[1].started->pid, 0u);
  ASSERT_TRUE(s[1].exited);
  EXPECT_FALSE(s[1].exited->signalled);
  EXPECT_EQ(s[1].exited->value, 7u);
  EXPECT_EQ(s[1].out, "exec-out\n");
  EXPECT_EQ(s[1].err, "exec-err\n");
  EXPECT_EQ(s[kMainSession].out, "main-out\n");
  EXPECT_EQ(s[kMainSession].err, "main-err\n");
  EXPECT_FALSE(s[kMainSession].exited) << "the main command runs on";
  // The main command goes on after the exec ended.
  s.until([&] { return s[kMainSession].stdin_credit > 0; });
  rig.send_stdin(kMainSession, "go\n");
  s.until([&] { return s[kMainSession].exited.has_value(); });
  EXPECT_EQ(s[kMainSession].out, "main-out\nmain-after\n");
  EXPECT_EQ(s[kMainSession].exited->value, 0u);
  rig.send(HostMessage::kPoweroff);
  EXPECT_EQ(rig.ended(), "the host asked to power off");
}

TEST(SessionExec, TwoExecsRunAtOnce) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  const std::string dir = "/tmp/abox-exec-test-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0777);
  ::chmod(dir.c_str(), 0777);
  start_main(rig, s, "sleep 30");
  // Each waits for the other's file: only two execs running at the same time both end.
  auto waiter = [&](const std::string& mine, const std::string& theirs) {
    return "touch " + dir + "/" + mine + "; i=0; while [ ! -e " + dir + "/" + theirs +
           " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; test -e " + dir + "/" + theirs +
           " && echo " + mine + "-saw-" + theirs;
  };
  open_exec(rig, s, exec_of(1, {"/bin/sh", "-c", waiter("a", "b")}));
  open_exec(rig, s, exec_of(2, {"/bin/sh", "-c", waiter("b", "a")}));
  s.until([&] { return s[1].ended() && s[2].ended(); });
  EXPECT_EQ(s[1].out, "a-saw-b\n");
  EXPECT_EQ(s[2].out, "b-saw-a\n");
  EXPECT_EQ(s[1].exited->value, 0u);
  EXPECT_EQ(s[2].exited->value, 0u);
  ::unlink((dir + "/a").c_str());
  ::unlink((dir + "/b").c_str());
  ::rmdir(dir.c_str());
}

TEST(SessionExec, AnExecsStdinIsItsOwnUnderItsOwnCredit) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "sleep 30");
  auto e = exec_of(3, {"/bin/sh", "-c", "wc -c"});
  e.stdin_open = true;
  open_exec(rig, s, e);
  std::size_t left = 200000;
  std::uint64_t used = 0;
  while (!s[3].ended()) {
    s.until([&] { return (left > 0 && s[3].stdin_credit > used) || s[3].ended(); });
    while (s[3].stdin_credit > used && left > 0) {
      std::size_t n = std::min<std::uint64_t>({s[3].stdin_credit - used, left, 30000});
      rig.send_stdin(3, std::string(n, 'x'));
      used += n;
      left -= n;
      if (left == 0) rig.send_stdin_eof(3);
    }
  }
  EXPECT_EQ(s[3].out, "200000\n");
  EXPECT_EQ(s[3].exited->value, 0u);
  EXPECT_EQ(s[kMainSession].stdin_credit, 0u) << "the main command's stdin is closed: no credit for it";
}

TEST(SessionExec, AnExecOnAPtyHasItsWindowAndItsResize) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "sleep 30");
  auto e = exec_of(4, {"/bin/sh", "-c", "stty size; echo ready; read line; stty size"});
  e.stdin_open = true;
  e.tty = true;
  e.window = {33, 101};
  open_exec(rig, s, e);
  s.until([&] { return s[4].out.find("ready") != std::string::npos; });
  rig.send_resize(4, 44, 120);
  rig.send_stdin(4, "\r");
  s.until([&] { return s[4].ended(); });
  EXPECT_NE(s[4].out.find("33 101\r\nready"), std::string::npos) << s[4].out;
  EXPECT_NE(s[4].out.find("44 120"), std::string::npos) << s[4].out;
  EXPECT_EQ(s[4].err, "") << "a pty has one output stream";
}

TEST(SessionExec, TheSeventeenthIsRefusedAndTheSixteenGoOn) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "sleep 60");
  for (std::uint32_t id = 1; id <= 16; ++id) {
    auto e = exec_of(id, {"/bin/sh", "-c", "echo up; read x; echo \"fin $x\""});
    e.stdin_open = true;
    open_exec(rig, s, e);
  }
  s.until([&] {
    for (std::uint32_t id = 1; id <= 16; ++id)
      if (s[id].out != "up\n" || s[id].stdin_credit == 0) return false;
    return true;
  });
  open_exec(rig, s, exec_of(17, {"/bin/echo", "never"}));
  s.until([&] { return s[17].ended(); });
  ASSERT_TRUE(s[17].start_failed);
  EXPECT_EQ(s[17].start_failed->reason, StartFailure::kRefused);
  EXPECT_EQ(s[17].start_failed->detail, "box-guest runs at most 16 exec sessions at once, and 16 run");
  EXPECT_FALSE(s[17].started);
  for (std::uint32_t id = 1; id <= 16; ++id) rig.send_stdin(id, std::to_string(id) + "\n");
  s.until([&] {
    for (std::uint32_t id = 1; id <= 16; ++id)
      if (!s[id].ended()) return false;
    return true;
  });
  for (std::uint32_t id = 1; id <= 16; ++id) {
    EXPECT_EQ(s[id].out, "up\nfin " + std::to_string(id) + "\n") << id;
    EXPECT_EQ(s[id].exited->value, 0u) << id;
  }
  // With room again, an exec opens.
  open_exec(rig, s, exec_of(18, {"/bin/echo", "room"}));
  s.until([&] { return s[18].ended(); });
  EXPECT_EQ(s[18].out, "room\n");
}

TEST(SessionExec, AnExecBeforeGoOrAfterTheMainCommandEndedIsRefused) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  rig.expect(GuestMessage::kHello);
  rig.send_setup(rig.setup({"/bin/sh", "-c", "echo main"}));
  open_exec(rig, s, exec_of(1, {"/bin/echo", "early"}));
  s.until([&] { return s[1].ended(); });
  ASSERT_TRUE(s[1].start_failed);
  EXPECT_EQ(s[1].start_failed->reason, StartFailure::kRefused);
  EXPECT_EQ(s[1].start_failed->detail, "exec before the main command started (waiting for go)");
  s[kMainSession].credit = 1 << 20;
  rig.send(HostMessage::kGo);
  s.until([&] { return s[kMainSession].exited.has_value(); });
  open_exec(rig, s, exec_of(2, {"/bin/echo", "late"}));
  s.until([&] { return s[2].ended(); });
  ASSERT_TRUE(s[2].start_failed);
  EXPECT_EQ(s[2].start_failed->detail, "the main command has ended: the instance is stopping");
}

TEST(SessionExec, FramesForASessionThatIsNotOpenAreLoggedAndDropped) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  // The main command reads twice: its end would end the exec too.
  start_main(rig, s, "read x; echo \"main got $x\"; read z", /*stdin_open=*/true);
  auto e = exec_of(1, {"/bin/sh", "-c", "read y; echo \"exec got $y\""});
  e.stdin_open = true;
  open_exec(rig, s, e);
  s.until([&] { return s[1].stdin_credit > 0 && s[kMainSession].stdin_credit > 0; });
  // Every per-session message, for ids no session has.
  rig.send_stdin(9, "stray\n");
  rig.send_stdin_eof(9);
  rig.grant(9, 100);
  rig.send_signal(9, SIGKILL);
  rig.send_resize(9, 1, 1);
  // An exec for an id in use: ignored, the session runs on.
  open_exec(rig, s, exec_of(1, {"/bin/echo", "again"}));
  rig.send_stdin(1, "one\n");
  rig.send_stdin(kMainSession, "zero\n");
  s.until([&] { return s[1].ended() && s[kMainSession].out == "main got zero\n"; });
  rig.send_stdin_eof(kMainSession);
  s.until([&] { return s[kMainSession].ended(); });
  EXPECT_EQ(s[1].out, "exec got one\n");
  EXPECT_EQ(s[kMainSession].out, "main got zero\n");
  EXPECT_FALSE(s[9].started);
  int dropped = 0;
  for (const auto& l : rig.logs)
    dropped += l.find("for session 9, which is not open: dropped") != std::string::npos;
  EXPECT_EQ(dropped, 5);
  // Once session 1 ended, a frame for it (a credit racing its end) is dropped without a log line.
  rig.grant(1, 100);
  rig.send_stdin_eof(kMainSession);  // a second one: logged, and proves the grant was taken first
  auto logged = [&] {
    return std::find(rig.logs.begin(), rig.logs.end(), "the command: a second stdin_eof: ignored") !=
           rig.logs.end();
  };
  for (int i = 0; i < 50 && !logged(); ++i) rig.next(200);  // log frames are taken, nothing else comes
  ASSERT_TRUE(logged());
  for (const auto& l : rig.logs)
    EXPECT_EQ(l.find("for session 1, which is not open"), std::string::npos) << l;
  EXPECT_NE(std::find(rig.logs.begin(), rig.logs.end(), "an exec for session 1, which is open: ignored"),
            rig.logs.end());
}

TEST(SessionExec, AnExecGetsTheMainEnvironmentWithItsOwnOnTopAndItsWorkdirAndUser) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  rig.expect(GuestMessage::kHello);
  auto setup = rig.setup({"/bin/sh", "-c", "sleep 30"});
  setup.env.push_back({"FROM_MAIN", "main"});
  setup.env.push_back({"REPLACED", "old"});
  rig.send_setup(setup);
  s[kMainSession].credit = 1 << 20;
  rig.send(HostMessage::kGo);
  s.until([&] { return s[kMainSession].started.has_value(); });
  auto e = exec_of(1, {"/bin/sh", "-c", "echo $FROM_MAIN $REPLACED $OWN; pwd; id -u; id -g"});
  e.env = {{"REPLACED", "new"}, {"OWN", "own"}};
  e.workdir = "/tmp";
  e.uid = 1234;
  e.gid = 2345;
  open_exec(rig, s, e);
  s.until([&] { return s[1].ended(); });
  EXPECT_EQ(s[1].out, "main new own\n/tmp\n1234\n2345\n");
}

TEST(SessionExec, AnExecEndsWithItsCommandWhatItLeftBehindIsKilled) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "sleep 30");
  open_exec(rig, s, exec_of(1, {"/bin/sh", "-c", "sleep 60 & echo left-a-job"}));
  s.until([&] { return s[1].ended(); });  // rig.next() waits 10 s at most: sleep 60 would hold it
  EXPECT_EQ(s[1].out, "left-a-job\n");
  EXPECT_EQ(s[1].exited->value, 0u);
}

TEST(SessionExec, ASignalAndTheCreditAreAnExecsOwn) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "echo main-ready; sleep 30");
  // Session 1 floods and gets no credit back; session 2 still runs to its end.
  s.hold_credit(1);
  open_exec(rig, s, exec_of(1, {"/bin/sh", "-c", "yes flood"}, 4096));
  open_exec(rig, s, exec_of(2, {"/bin/sh", "-c", "echo ready; sleep 30"}));
  s.until([&] { return s[1].out.size() == 4096 && s[2].out == "ready\n"; });
  rig.send_signal(2, SIGTERM);
  s.until([&] { return s[2].ended(); });
  EXPECT_TRUE(s[2].exited->signalled);
  EXPECT_EQ(s[2].exited->value, static_cast<std::uint32_t>(SIGTERM));
  EXPECT_EQ(s[1].out.size(), 4096u) << "session 1 stopped at its credit";
  EXPECT_FALSE(s[1].ended());
  EXPECT_FALSE(s[kMainSession].ended());
  rig.send_signal(1, SIGKILL);
  rig.grant(1, 1 << 20);
  s[1].credit += 1 << 20;
  s.until([&] { return s[1].ended(); });
  EXPECT_TRUE(s[1].exited->signalled);
}

TEST(SessionExec, TheMainCommandsEndEndsTheExecsToo) {
  REQUIRE_ROOT();
  SessionRig rig;
  Sessions s(rig);
  start_main(rig, s, "read x", /*stdin_open=*/true);
  open_exec(rig, s, exec_of(1, {"/bin/sh", "-c", "echo up; sleep 60"}));
  s.until([&] { return s[1].out == "up\n" && s[kMainSession].stdin_credit > 0; });
  rig.send_stdin_eof(kMainSession);
  s.until([&] { return s[kMainSession].ended() && s[1].ended(); });
  EXPECT_EQ(s[kMainSession].exited->value, 1u);  // read at EOF
  EXPECT_TRUE(s[1].exited->signalled);
  EXPECT_EQ(s[1].exited->value, static_cast<std::uint32_t>(SIGKILL));
}

TEST(SessionExec, ASetupOfAnotherVersionEndsTheSessionAndSaysWhy) {
  SessionRig rig;
  rig.expect(GuestMessage::kHello);
  auto setup = rig.setup({"/bin/true"});
  setup.version = 2;
  std::vector<std::uint8_t> p;
  encode(setup, p);
  rig.send(HostMessage::kSetup, p);
  EXPECT_EQ(
      rig.ended(),
      "the host speaks control protocol 2, box-guest speaks 3: use an abox and an image of the same version");
}

}  // namespace
}  // namespace abox::guest
