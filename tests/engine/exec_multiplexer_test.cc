// ExecMultiplexer against a fake channel and fake sinks: ids and the bound,
// each exec's output to its own sink with the credit given back only once
// the sink wrote it, stdin within each session's credit one batch at a time,
// resizes and signals, a detached client's exec killed and drained, the
// channel's end reaching every sink.
#include "engine/instance/exec_multiplexer.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <string>

namespace abox::engine {
namespace {

struct FakeChannel : ExecChannel {
  std::vector<std::string> calls;
  std::vector<guest::Exec> execs;
  std::map<std::uint32_t, std::uint64_t> credit;  // stdin credit per session
  std::map<std::uint32_t, std::string> stdin;
  bool accept = true;

  bool open_exec(const guest::Exec& e) override {
    if (!accept) return false;
    execs.push_back(e);
    calls.push_back("exec " + std::to_string(e.session));
    return true;
  }
  void send_stdin(std::uint32_t s, std::span<const std::uint8_t> b) override {
    EXPECT_LE(b.size(), credit[s]) << "stdin past the session's credit";
    EXPECT_LE(b.size(), guest::kMaxStreamBytes);
    credit[s] -= std::min<std::uint64_t>(credit[s], b.size());
    stdin[s].append(b.begin(), b.end());
    calls.push_back("stdin " + std::to_string(s) + " " + std::to_string(b.size()));
  }
  void send_stdin_eof(std::uint32_t s) override { calls.push_back("eof " + std::to_string(s)); }
  void grant_output(std::uint32_t s, std::uint32_t n) override {
    calls.push_back("grant " + std::to_string(s) + " " + std::to_string(n));
  }
  void send_signal(std::uint32_t s, int signo) override {
    calls.push_back("signal " + std::to_string(s) + " " + std::to_string(signo));
  }
  void send_resize(std::uint32_t s, std::uint16_t r, std::uint16_t c) override {
    calls.push_back("resize " + std::to_string(s) + " " + std::to_string(r) + "x" + std::to_string(c));
  }
  std::uint64_t stdin_credit(std::uint32_t s) const override {
    auto it = credit.find(s);
    return it == credit.end() ? 0 : it->second;
  }
};

struct FakeSink : ExecSink {
  std::string out, err;
  std::vector<std::function<void()>> unwritten;  // the writes the test has not finished yet
  std::optional<std::uint32_t> pid;
  std::optional<ExecEnd> end;
  int taken = 0;
  void exec_started(std::uint32_t p) override { pid = p; }
  void exec_output(bool is_stderr, std::span<const std::uint8_t> b, std::function<void()> written) override {
    (is_stderr ? err : out).append(b.begin(), b.end());
    unwritten.push_back(std::move(written));
  }
  void exec_stdin_taken() override { ++taken; }
  void exec_ended(const ExecEnd& e) override { end = e; }
  void write_all() {
    auto w = std::move(unwritten);
    unwritten.clear();
    for (auto& f : w) f();
  }
};

ExecRequest request(bool stdin_open = false) {
  ExecRequest r;
  r.argv = {"sh", "-c", "true"};
  r.stdin_open = stdin_open;
  return r;
}

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

TEST(ExecMultiplexer, IdsGrowAndTheBoundHolds) {
  FakeChannel ch;
  ExecMultiplexer mux(ch, /*max_sessions=*/2, /*output_credit=*/4096);
  FakeSink a, b, c;
  auto ida = mux.open(request(), a);
  auto idb = mux.open(request(true), b);
  ASSERT_TRUE(ida.ok());
  ASSERT_TRUE(idb.ok());
  EXPECT_EQ(*ida, 1u);
  EXPECT_EQ(*idb, 2u);
  ASSERT_EQ(ch.execs.size(), 2u);
  EXPECT_EQ(ch.execs[1].output_credit, 4096u);
  EXPECT_TRUE(ch.execs[1].stdin_open);
  EXPECT_EQ(ch.execs[1].argv, request().argv);
  auto third = mux.open(request(), c);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.error().find("at most 2 exec sessions"), std::string::npos) << third.error();
  // One ends: room again, and the next id is new (never 1 or 2 again).
  mux.on_exited(guest::Exited{1, false, 0});
  auto again = mux.open(request(), c);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 3u);
  // The channel refusing (closed, too big): an error, no id used up.
  ch.accept = false;
  FakeSink d;
  mux.on_exited(guest::Exited{2, false, 0});
  EXPECT_FALSE(mux.open(request(), d).ok());
  ch.accept = true;
  EXPECT_EQ(*mux.open(request(), d), 4u);
}

TEST(ExecMultiplexer, OutputGoesToItsOwnSinkAndTheCreditBackOnlyOnceWritten) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a, b;
  ASSERT_TRUE(mux.open(request(), a).ok());
  ASSERT_TRUE(mux.open(request(), b).ok());
  mux.on_started(guest::Started{2, 77});
  mux.on_output(1, false, bytes("to a"));
  mux.on_output(2, true, bytes("to b"));
  mux.on_output(1, true, bytes("a err"));
  EXPECT_EQ(a.out, "to a");
  EXPECT_EQ(a.err, "a err");
  EXPECT_EQ(b.err, "to b");
  EXPECT_EQ(b.out, "");
  EXPECT_FALSE(a.pid);
  EXPECT_EQ(b.pid, 77u);
  ch.calls.clear();
  // Nothing written yet: no credit back (a slow client slows its own command only).
  EXPECT_TRUE(ch.calls.empty());
  a.write_all();
  EXPECT_EQ(ch.calls, (std::vector<std::string>{"grant 1 4", "grant 1 5"}));
  b.write_all();
  EXPECT_EQ(ch.calls.back(), "grant 2 4");
}

TEST(ExecMultiplexer, TheEndReachesTheSinkAndTheRecordGoes) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a, b;
  ASSERT_TRUE(mux.open(request(), a).ok());
  ASSERT_TRUE(mux.open(request(), b).ok());
  mux.on_exited(guest::Exited{1, true, 9});
  ASSERT_TRUE(a.end);
  ASSERT_TRUE(a.end->exit);
  EXPECT_TRUE(a.end->exit->signalled);
  EXPECT_EQ(a.end->exit->value, 9u);
  EXPECT_FALSE(mux.holds(1));
  mux.on_start_failed(guest::StartFailed{2, guest::StartFailure::kNotFound, 2, "not found: x"});
  ASSERT_TRUE(b.end);
  ASSERT_TRUE(b.end->start_failed);
  EXPECT_EQ(b.end->start_failed->reason, guest::StartFailure::kNotFound);
  EXPECT_EQ(mux.size(), 0u);
  // Late output for an exec that ended: granted back, reaching nobody.
  ch.calls.clear();
  mux.on_output(1, false, bytes("late"));
  EXPECT_EQ(ch.calls, (std::vector<std::string>{"grant 1 4"}));
  EXPECT_EQ(a.out, "");
  // The end of an exec never opened: nothing happens.
  mux.on_exited(guest::Exited{99, false, 0});
}

TEST(ExecMultiplexer, StdinGoesWithinItsSessionsCreditOneBatchAtATime) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a, b;
  ASSERT_TRUE(mux.open(request(true), a).ok());
  ASSERT_TRUE(mux.open(request(true), b).ok());
  std::vector<std::uint8_t> batch(100000, 'x');
  mux.write_stdin(1, batch);  // no credit yet: held
  EXPECT_EQ(ch.stdin[1].size(), 0u);
  EXPECT_EQ(a.taken, 0);
  ch.credit[1] = 70000;
  mux.on_stdin_credit(1);
  EXPECT_EQ(ch.stdin[1].size(), 70000u);
  EXPECT_EQ(a.taken, 0) << "the batch is not all sent";
  // Another session's credit does not move session 1's bytes.
  ch.credit[2] = 1 << 20;
  mux.on_stdin_credit(2);
  EXPECT_EQ(ch.stdin[1].size(), 70000u);
  EXPECT_EQ(ch.stdin[2].size(), 0u);
  mux.close_stdin(1);  // after what is held
  EXPECT_EQ(std::count(ch.calls.begin(), ch.calls.end(), "eof 1"), 0);
  ch.credit[1] = 30000;
  mux.on_stdin_credit(1);
  EXPECT_EQ(ch.stdin[1].size(), 100000u);
  EXPECT_EQ(a.taken, 1);
  EXPECT_EQ(ch.calls.back(), "eof 1");
  // Each frame at most kMaxStreamBytes.
  for (const auto& c : ch.calls)
    if (c.starts_with("stdin 1 ")) {
      EXPECT_LE(std::stoul(c.substr(8)), guest::kMaxStreamBytes) << c;
    }
  // With credit to spare, a batch goes at once.
  mux.write_stdin(2, std::vector<std::uint8_t>{'y'});
  EXPECT_EQ(ch.stdin[2], "y");
  EXPECT_EQ(b.taken, 1);
}

TEST(ExecMultiplexer, StdinOfAnExecWithoutItIsNotSentAndNotWaitedFor) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a;
  ASSERT_TRUE(mux.open(request(false), a).ok());
  ch.credit[1] = 1000;
  mux.write_stdin(1, std::vector<std::uint8_t>{'z'});
  mux.close_stdin(1);
  EXPECT_EQ(ch.stdin[1], "");
  EXPECT_EQ(a.taken, 1);
  EXPECT_EQ(std::count(ch.calls.begin(), ch.calls.end(), "eof 1"), 0);
}

TEST(ExecMultiplexer, ResizeAndSignalGoToTheirSession) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a;
  ASSERT_TRUE(mux.open(request(), a).ok());
  mux.resize(1, 40, 120);
  mux.signal(1, SIGINT);
  mux.resize(5, 1, 1);  // not open: nothing
  mux.signal(5, SIGINT);
  EXPECT_EQ(ch.calls, (std::vector<std::string>{"exec 1", "resize 1 40x120", "signal 1 2"}));
}

TEST(ExecMultiplexer, ADetachedExecIsKilledDrainedAndForgotten) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a, b;
  ASSERT_TRUE(mux.open(request(true), a).ok());
  ASSERT_TRUE(mux.open(request(), b).ok());
  mux.write_stdin(1, std::vector<std::uint8_t>(10, 'q'));  // held: no credit
  mux.detach(1);
  EXPECT_EQ(ch.calls.back(), "signal 1 9");
  ch.calls.clear();
  mux.on_output(1, false, bytes("unread"));
  EXPECT_EQ(ch.calls, (std::vector<std::string>{"grant 1 6"})) << "granted at once: nobody reads it";
  EXPECT_EQ(a.out, "");
  ch.credit[1] = 100;
  mux.on_stdin_credit(1);
  EXPECT_EQ(ch.stdin[1], "") << "its held stdin was dropped";
  mux.on_exited(guest::Exited{1, true, 9});
  EXPECT_FALSE(a.end) << "no sink call after detach";
  EXPECT_FALSE(mux.holds(1));
  // The other exec is untouched.
  mux.on_output(2, false, bytes("b"));
  EXPECT_EQ(b.out, "b");
  mux.detach(1);  // twice, or after the end: nothing
}

TEST(ExecMultiplexer, TheChannelsEndEndsEveryExecWithTheReason) {
  FakeChannel ch;
  ExecMultiplexer mux(ch);
  FakeSink a, b;
  ASSERT_TRUE(mux.open(request(), a).ok());
  ASSERT_TRUE(mux.open(request(), b).ok());
  mux.close_all("the instance stopped before the command ended");
  ASSERT_TRUE(a.end);
  ASSERT_TRUE(b.end);
  EXPECT_EQ(a.end->error, "the instance stopped before the command ended");
  EXPECT_FALSE(a.end->exit);
  EXPECT_EQ(mux.size(), 0u);
}

TEST(ExecMultiplexer, AWriteFinishingAfterTheMultiplexerWentIsHarmless) {
  FakeChannel ch;
  FakeSink a;
  {
    ExecMultiplexer mux(ch);
    ASSERT_TRUE(mux.open(request(), a).ok());
    mux.on_output(1, false, bytes("x"));
  }
  ch.calls.clear();
  a.write_all();  // the multiplexer is gone: no grant, no crash
  EXPECT_TRUE(ch.calls.empty());
}

}  // namespace
}  // namespace abox::engine
