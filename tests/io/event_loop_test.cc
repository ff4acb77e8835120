// EventLoop's one-shot requests (request(), cancel_all()) on pipes: the
// kernel behaviour GuestStack's ring reads rely on, checked here rather than
// assumed. Watches, timers and deferred work: event_loop_watch_test.cc.
#include "io/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/unique_fd.h"

namespace abox::io {
namespace {

struct Pipe {
  base::UniqueFd read_end;
  base::UniqueFd write_end;
  static Pipe make() {
    std::array<int, 2> fds{};
    EXPECT_EQ(::pipe2(fds.data(), O_NONBLOCK | O_CLOEXEC), 0);
    return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
  }
  void put(std::uint8_t byte) const { ASSERT_EQ(::write(write_end.get(), &byte, 1), 1); }
};

class Recorder final : public EventLoop::Completion {
 public:
  void on_complete(int res, std::uint32_t /*cqe_flags*/) override { results.push_back(res); }
  std::vector<int> results;
};

class CountingWatcher final : public EventLoop::Watcher {
 public:
  void on_ready(std::uint32_t events) override {
    if ((events & POLLIN) != 0) ++wakes;
  }
  int wakes = 0;
};

void post_read(EventLoop& loop, Recorder& r, int fd, std::array<std::uint8_t, 8>& buf) {
  io_uring_sqe* s = loop.request(&r);
  io_uring_prep_read(s, fd, buf.data(), static_cast<unsigned>(buf.size()), ~std::uint64_t{0});
}

// A read posted on an empty non-blocking pipe waits in the kernel (it does
// not complete with EAGAIN) and completes, once, when bytes come.
TEST(EventLoopRequest, AReadWaitsForDataAndCompletesOnce) {
  EventLoop loop;
  Pipe p = Pipe::make();
  Recorder r;
  std::array<std::uint8_t, 8> buf{};
  post_read(loop, r, p.read_end.get(), buf);
  loop.run_once(base::Millis(0));
  loop.run_once(base::Millis(20));
  EXPECT_TRUE(r.results.empty()) << "completed with " << r.results.front();
  p.put(0x5A);
  for (int i = 0; i < 50 && r.results.empty(); ++i) loop.run_once(base::Millis(100));
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0], 1);
  EXPECT_EQ(buf[0], 0x5A);
  p.put(0x5B);
  loop.run_once(base::Millis(20));
  EXPECT_EQ(r.results.size(), 1u) << "a one-shot request completed twice";
}

// When the data is already there, the read is done at the turn's own
// submission: one turn, no readiness wake-up first.
TEST(EventLoopRequest, DataAlreadyWaitingCompletesInTheSameTurn) {
  EventLoop loop;
  Pipe p = Pipe::make();
  p.put(7);
  Recorder r;
  std::array<std::uint8_t, 8> buf{};
  post_read(loop, r, p.read_end.get(), buf);
  loop.run_once(base::Millis(1000));
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0], 1);
  EXPECT_EQ(buf[0], 7);
}

// A closed writer ends the read with 0 (end of file), as read() would.
TEST(EventLoopRequest, ClosedWriterCompletesWithEndOfFile) {
  EventLoop loop;
  Pipe p = Pipe::make();
  Recorder r;
  std::array<std::uint8_t, 8> buf{};
  post_read(loop, r, p.read_end.get(), buf);
  loop.run_once(base::Millis(0));
  p.write_end.reset();
  for (int i = 0; i < 50 && r.results.empty(); ++i) loop.run_once(base::Millis(100));
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0], 0);
}

// cancel_all() takes back every request of one Completion, waits for them,
// and never calls it; another's completion that arrives meanwhile, and a
// watcher's wake-up, are kept for the next turn.
// Two owners of requests on one loop (`mine`, `other`, reading pipes a and
// b) and a watcher of pipe w: for the calls that act on one owner's
// requests outside a turn and must keep everyone else's for the next one.
class EventLoopOwners : public ::testing::Test {
 protected:
  EventLoopOwners() { loop.watch(w.read_end.get(), POLLIN, &watcher); }
  // Turns the loop until other's completion and the watcher's wake-up came
  // (bounded), then checks both did, other's with `value`.
  void expect_the_others_kept_for_the_next_turn(int value) {
    for (int i = 0; i < 20 && (other.results.empty() || watcher.wakes == 0); ++i)
      loop.run_once(base::Millis(50));
    ASSERT_EQ(other.results.size(), 1u);
    EXPECT_EQ(other.results[0], value);
    EXPECT_GE(watcher.wakes, 1);
  }

  EventLoop loop;
  Pipe a = Pipe::make();
  Pipe b = Pipe::make();
  Pipe w = Pipe::make();
  Recorder mine;
  Recorder other;
  CountingWatcher watcher;
};

TEST_F(EventLoopOwners, CancelAllTakesBackOnlyTheOwnersRequests) {
  std::array<std::uint8_t, 8> buf1{};
  std::array<std::uint8_t, 8> buf2{};
  std::array<std::uint8_t, 8> buf3{};
  post_read(loop, mine, a.read_end.get(), buf1);
  post_read(loop, mine, a.read_end.get(), buf2);
  post_read(loop, other, b.read_end.get(), buf3);
  loop.run_once(base::Millis(0));
  b.put(1);  // other's read completes: in the ring, not yet dispatched
  w.put(2);  // and the watcher's fd becomes readable
  std::size_t in_flight = 2;
  loop.cancel_all(&mine, in_flight);
  EXPECT_EQ(in_flight, 0u);
  EXPECT_TRUE(mine.results.empty());
  a.put(3);  // nobody reads pipe a any more
  expect_the_others_kept_for_the_next_turn(1);
  EXPECT_TRUE(mine.results.empty());
  std::uint8_t left = 0;
  EXPECT_EQ(::read(a.read_end.get(), &left, 1), 1) << "a cancelled read still took the byte";
  EXPECT_EQ(left, 3);
}

// complete_ready() takes one owner's finished requests outside a turn: one
// that finished after it was submitted (posted by the kernel only when asked
// for events) and one queued, not yet submitted, whose data is there; a read
// with nothing to read stays in the kernel. Another's completion and a
// watcher's wake-up are kept for the next turn.
TEST_F(EventLoopOwners, CompleteReadyDispatchesOnlyTheOwnersFinishedRequests) {
  Pipe c = Pipe::make();
  std::array<std::uint8_t, 8> buf1{};
  std::array<std::uint8_t, 8> buf2{};
  std::array<std::uint8_t, 8> buf3{};
  std::array<std::uint8_t, 8> buf4{};
  post_read(loop, mine, a.read_end.get(), buf1);
  post_read(loop, other, b.read_end.get(), buf3);
  loop.run_once(base::Millis(0));  // both wait in the kernel
  a.put(1);
  b.put(2);
  w.put(3);
  c.put(4);
  post_read(loop, mine, c.read_end.get(), buf2);  // data already there
  post_read(loop, mine, -1, buf4);                // no such fd: fails at once
  EXPECT_EQ(loop.complete_ready(&mine), 3u);
  ASSERT_EQ(mine.results.size(), 3u);
  std::vector<int> got = mine.results;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{-EBADF, 1, 1}));
  EXPECT_EQ(buf1[0], 1);
  EXPECT_EQ(buf2[0], 4);
  EXPECT_TRUE(other.results.empty());
  EXPECT_EQ(watcher.wakes, 0);
  EXPECT_EQ(loop.complete_ready(&mine), 0u) << "nothing more of mine has finished";
  expect_the_others_kept_for_the_next_turn(1);
  EXPECT_EQ(mine.results.size(), 3u);
}

TEST(EventLoopRequest, CancelAllWithNothingInFlightIsANoOp) {
  EventLoop loop;
  Recorder r;
  std::size_t in_flight = 0;
  loop.cancel_all(&r, in_flight);
  EXPECT_EQ(in_flight, 0u);
  loop.run_once(base::Millis(0));
  EXPECT_TRUE(r.results.empty());
}

}  // namespace
}  // namespace abox::io
