// EventLoop's watches (edge and level), one-shot timers, deferred work and
// deletion, and the injected clock: what the broker and abox-net build on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "base/unique_fd.h"
#include "io/event_loop.h"

namespace abox::io {
namespace {

struct SocketPair {
  base::UniqueFd a, b;
  SocketPair() {
    std::array<int, 2> fds{};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds.data()), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
  void put(char c) const { ASSERT_EQ(::write(b.get(), &c, 1), 1); }
};

struct Counter final : EventLoop::Watcher {
  void on_ready(std::uint32_t events) override {
    ++calls;
    seen |= events;
    if (on) on();
  }
  int calls = 0;
  std::uint32_t seen = 0;
  std::function<void()> on;
};

struct Alarm final : EventLoop::Timer {
  Alarm(std::vector<int>& log, int id) : log_(log), id_(id) {}
  void on_timer() override {
    log_.push_back(id_);
    if (then) then();
  }
  std::function<void()> then;

 private:
  std::vector<int>& log_;
  int id_;
};

// A test clock: starts at an arbitrary point, moves only when told.
struct ManualClock {
  base::MonoTime t = base::MonoTime{} + base::Seconds(1000);
  EventLoop::Clock fn() {
    return [this] { return t; };
  }
};

TEST(EventLoopWatch, LevelFiresEveryTurnWhileReadyAndStopsWhenDrained) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  const EventLoop::Handle h = loop.watch(p.a.get(), POLLIN, &c, EventLoop::Trigger::level);
  p.put('x');
  for (int i = 0; i < 3; ++i) loop.run_once(base::Millis(100));
  EXPECT_EQ(c.calls, 3) << "the byte was never read: ready at every turn";
  char byte = 0;
  ASSERT_EQ(::read(p.a.get(), &byte, 1), 1);
  loop.run_once(base::Millis(0));  // may still carry the last arming's completion
  const int after_drain = c.calls;
  loop.run_once(base::Millis(20));
  loop.run_once(base::Millis(20));
  EXPECT_EQ(c.calls, after_drain) << "drained: no more wake-ups";
  loop.unwatch(h);
}

TEST(EventLoopWatch, EdgeFiresOncePerArrival) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  loop.watch(p.a.get(), POLLIN, &c);
  p.put('x');
  for (int i = 0; i < 3; ++i) loop.run_once(base::Millis(50));
  EXPECT_EQ(c.calls, 1) << "nothing new arrived after the first wake-up";
  p.put('y');
  loop.run_once(base::Millis(100));
  EXPECT_EQ(c.calls, 2);
}

TEST(EventLoopWatch, ALevelWatcherMayUnwatchItselfAndAnother) {
  EventLoop loop;
  SocketPair p, q;
  Counter first, second;
  EventLoop::Handle hp = EventLoop::kNoHandle;
  EventLoop::Handle hq = EventLoop::kNoHandle;
  first.on = [&] {
    loop.unwatch(hp);
    loop.unwatch(hq);
  };
  second.on = first.on;
  hp = loop.watch(p.a.get(), POLLIN, &first, EventLoop::Trigger::level);
  hq = loop.watch(q.a.get(), POLLIN, &second, EventLoop::Trigger::level);
  p.put('x');
  q.put('y');
  for (int i = 0; i < 5; ++i) loop.run_once(base::Millis(20));
  // Whichever ran first unwatched the other: exactly one ran, once.
  EXPECT_EQ(first.calls + second.calls, 1);
}

TEST(EventLoopWatch, ModifyChangesTheEventsOfALevelWatch) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  const EventLoop::Handle h = loop.watch(p.a.get(), 0, &c, EventLoop::Trigger::level);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(c.seen & POLLOUT, 0u);
  loop.modify(h, POLLOUT);
  loop.run_once(base::Millis(100));
  EXPECT_NE(c.seen & POLLOUT, 0u);
  loop.unwatch(h);
}

// Fills a's way to b until a is no longer writable.
void fill(const SocketPair& p) {
  std::array<char, 4096> junk{};
  for (int i = 0; i < 10'000 && ::write(p.a.get(), junk.data(), junk.size()) > 0; ++i) {
  }
}
void drain(const SocketPair& p) {
  std::array<char, 4096> sink{};
  for (int i = 0; i < 10'000 && ::read(p.b.get(), sink.data(), sink.size()) > 0; ++i) {
  }
}

TEST(EventLoopWatch, NarrowingAnArmedLevelWatchRemovesNothingAndHidesWhatIsNoLongerAsked) {
  EventLoop loop;
  SocketPair p;
  fill(p);
  Counter c;
  const EventLoop::Handle h = loop.watch(p.a.get(), POLLIN | POLLOUT, &c, EventLoop::Trigger::level);
  loop.run_once(base::Millis(0));
  ASSERT_EQ(c.calls, 0) << "neither readable nor writable";
  ASSERT_EQ(loop.polls_armed(), 1u);
  loop.modify(h, POLLIN);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(loop.polls_removed(), 0u) << "the armed poll asks for more: it stays";
  drain(p);  // writable now: the old poll fires, for readiness no longer asked for
  loop.run_once(base::Millis(100));
  loop.run_once(base::Millis(20));
  EXPECT_EQ(c.calls, 0) << "POLLOUT is no longer asked for";
  EXPECT_EQ(loop.polls_armed(), 2u) << "armed again, with POLLIN only";
  p.put('x');
  loop.run_once(base::Millis(100));
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(c.seen, std::uint32_t{POLLIN});
  loop.unwatch(h);
}

TEST(EventLoopWatch, WideningAnArmedLevelWatchReplacesItsPoll) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  const EventLoop::Handle h = loop.watch(p.a.get(), POLLIN, &c, EventLoop::Trigger::level);
  loop.run_once(base::Millis(0));
  loop.modify(h, POLLIN | POLLOUT);
  EXPECT_EQ(loop.polls_removed(), 1u);
  loop.run_once(base::Millis(100));
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(c.seen, std::uint32_t{POLLOUT});
  loop.unwatch(h);
}

TEST(EventLoopWatch, ALevelWatchChangedSeveralTimesInATurnArmsOnePoll) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  EventLoop::Handle h = EventLoop::kNoHandle;
  c.on = [&] {
    char byte = 0;
    ASSERT_EQ(::read(p.a.get(), &byte, 1), 1);
    loop.modify(h, POLLOUT);
    loop.modify(h, POLLIN | POLLOUT);
    loop.modify(h, POLLIN);
  };
  h = loop.watch(p.a.get(), POLLIN | POLLRDHUP, &c, EventLoop::Trigger::level);
  p.put('x');
  loop.run_once(base::Millis(100));
  ASSERT_EQ(c.calls, 1);
  loop.run_once(base::Millis(20));
  EXPECT_EQ(loop.polls_armed(), 2u) << "the first poll, then one with the last events asked";
  EXPECT_EQ(loop.polls_removed(), 0u);
  EXPECT_EQ(c.calls, 1) << "writable, but POLLOUT was not asked for last";
  loop.unwatch(h);
}

TEST(EventLoopWatch, AWakeUpAskedForReachesALevelWatchOfNoEvents) {
  EventLoop loop;
  SocketPair p;
  Counter c;
  const EventLoop::Handle h = loop.watch(p.a.get(), 0, &c, EventLoop::Trigger::level);
  loop.wake_next_turn(h);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(c.seen, std::uint32_t{POLLIN});
  loop.unwatch(h);
}

TEST(EventLoopTimer, TimersRunInDeadlineOrderAndCancelledOnesDoNot) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  std::vector<int> order;
  Alarm late(order, 2), cancelled(order, 99), early(order, 1), moved(order, 3);
  const base::MonoTime now = loop.now();
  loop.schedule(late, now + base::Millis(20));
  loop.schedule(cancelled, now + base::Millis(5));
  loop.schedule(early, now + base::Millis(1));
  loop.schedule(moved, now + base::Millis(2));
  loop.schedule(moved, now + base::Millis(30));  // moved later
  loop.cancel(cancelled);
  EXPECT_FALSE(cancelled.scheduled());
  clock.t = now + base::Millis(10);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(order, (std::vector<int>{1}));
  EXPECT_TRUE(late.scheduled());
  EXPECT_FALSE(early.scheduled());
  clock.t = now + base::Millis(100);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(EventLoopTimer, ATimerDestroyedWhileScheduledIsForgotten) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  std::vector<int> order;
  {
    Alarm gone(order, 1);
    loop.schedule(gone, loop.now() + base::Millis(1));
  }
  clock.t += base::Seconds(1);
  loop.run_once(base::Millis(0));
  EXPECT_TRUE(order.empty());
}

TEST(EventLoopTimer, ManyTimersKeepTheirOrder) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  std::vector<int> order;
  std::vector<std::unique_ptr<Alarm>> alarms;
  // Due times 0, 7, 14, ... mod 100: scheduled out of order.
  for (int i = 0; i < 100; ++i) {
    alarms.push_back(std::make_unique<Alarm>(order, (i * 7) % 100));
    loop.schedule(*alarms.back(), loop.now() + base::Millis((i * 7) % 100));
  }
  for (int i = 0; i < 100; i += 10) loop.cancel(*alarms[static_cast<std::size_t>(i)]);
  clock.t += base::Seconds(1);
  loop.run_once(base::Millis(0));
  ASSERT_EQ(order.size(), 90u);
  for (std::size_t i = 1; i < order.size(); ++i) EXPECT_LT(order[i - 1], order[i]);
}

// Deferred work and deletions run after the turn's callbacks and timers,
// and before its turn hooks.
TEST(EventLoopDeferred, RunsAfterCallbacksAndTimersAndBeforeTurnHooks) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  std::vector<int> order;
  struct Noisy final : EventLoop::Deletable {
    explicit Noisy(std::vector<int>& l) : log(l) {}
    ~Noisy() override { log.push_back(4); }
    std::vector<int>& log;
  };
  Alarm alarm(order, 1);
  alarm.then = [&] {
    loop.defer([&] { order.push_back(3); });
    loop.delete_later(std::make_unique<Noisy>(order));
    order.push_back(2);
  };
  auto hook = loop.add_turn_hook([&] { order.push_back(5); });
  loop.schedule(alarm, loop.now());
  loop.run_once(base::Millis(0));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(EventLoopDeferred, AnObjectDeletedFromItsOwnCallbackLivesUntilItReturns) {
  EventLoop loop;
  SocketPair p;
  struct SelfDeleting final : EventLoop::Watcher, EventLoop::Deletable {
    SelfDeleting(EventLoop& l, std::unique_ptr<SelfDeleting>& o, bool& d) : loop(l), owner(o), destroyed(d) {}
    ~SelfDeleting() override { destroyed = true; }
    void on_ready(std::uint32_t) override {
      loop.unwatch(handle);
      loop.delete_later(std::move(owner));
      still_alive = !destroyed;  // this object must still be here
    }
    EventLoop& loop;
    std::unique_ptr<SelfDeleting>& owner;
    bool& destroyed;
    EventLoop::Handle handle = EventLoop::kNoHandle;
    bool still_alive = false;
  };
  bool destroyed = false;
  std::unique_ptr<SelfDeleting> owner;
  owner = std::make_unique<SelfDeleting>(loop, owner, destroyed);
  SelfDeleting* raw = owner.get();
  raw->handle = loop.watch(p.a.get(), POLLIN, raw, EventLoop::Trigger::level);
  p.put('x');
  for (int i = 0; i < 10 && !destroyed; ++i) loop.run_once(base::Millis(50));
  EXPECT_TRUE(destroyed);
  EXPECT_EQ(owner, nullptr);
}

// An owner about to go (a stack whose retired flows refer to it) has them
// destroyed at once, including one that a destructor retires in turn;
// nothing is left for the next turn to destroy a second time.
TEST(EventLoopDeferred, DeleteRetiredNowDestroysWhatWaitsAndWhatThatRetires) {
  EventLoop loop;
  std::vector<int> order;
  struct Chained final : EventLoop::Deletable {
    Chained(EventLoop& l, std::vector<int>& o, int i, std::unique_ptr<Chained> n)
        : loop(l), log(o), id(i), next(std::move(n)) {}
    ~Chained() override {
      log.push_back(id);
      if (next) loop.delete_later(std::move(next));
    }
    EventLoop& loop;
    std::vector<int>& log;
    int id;
    std::unique_ptr<Chained> next;
  };
  loop.delete_later(
      std::make_unique<Chained>(loop, order, 1, std::make_unique<Chained>(loop, order, 2, nullptr)));
  EXPECT_TRUE(order.empty()) << "outside a turn, delete_later() only queues";
  loop.delete_retired_now();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  loop.run_once(base::Millis(0));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(EventLoopClock, NowIsTheInjectedClockReadOncePerTurn) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  EXPECT_EQ(loop.now(), clock.t);
  clock.t += base::Seconds(5);
  EXPECT_NE(loop.now(), clock.t) << "read at the turn, not on every call";
  loop.run_once(base::Millis(0));
  EXPECT_EQ(loop.now(), clock.t);
}

}  // namespace
}  // namespace abox::io

namespace abox::io {
namespace {

// A timer source or turn hook goes with its Registration: an owner destroyed
// before the loop (a second stack on one loop, in a test) leaves nothing
// that the next turn would call.
TEST(EventLoopRegistration, EndsWhenTheRegistrationGoes) {
  ManualClock clock;
  EventLoop loop(256, clock.fn());
  int hooks = 0;
  int asked = 0;
  int fired = 0;
  {
    auto hook = loop.add_turn_hook([&] { ++hooks; });
    auto source = loop.add_timer_source({[&]() -> std::optional<base::MonoTime> {
                                           ++asked;
                                           return loop.now();
                                         },
                                         [&](base::MonoTime) { ++fired; }});
    loop.run_once(base::Millis(0));
    EXPECT_EQ(hooks, 1);
    EXPECT_EQ(fired, 1);
  }
  const int asked_before = asked;
  loop.run_once(base::Millis(0));
  loop.run_once(base::Millis(0));
  EXPECT_EQ(hooks, 1);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(asked, asked_before);
}

TEST(EventLoopRegistration, ARegistrationMovedKeepsItsCallbackAndResetEndsIt) {
  EventLoop loop;
  int hooks = 0;
  EventLoop::Registration kept;
  {
    auto hook = loop.add_turn_hook([&] { ++hooks; });
    kept = std::move(hook);
  }
  loop.run_once(base::Millis(0));
  EXPECT_EQ(hooks, 1);
  kept.reset();
  loop.run_once(base::Millis(0));
  EXPECT_EQ(hooks, 1);
}

// Removing a hook from inside a hook (its owner going in the same turn):
// the removed one is not called, the others are, and the next turn too.
TEST(EventLoopRegistration, OneRemovedFromInsideACallbackIsSkippedAndTheRestRun) {
  EventLoop loop;
  std::vector<int> order;
  EventLoop::Registration second;
  auto first = loop.add_turn_hook([&] {
    order.push_back(1);
    second.reset();
  });
  second = loop.add_turn_hook([&] { order.push_back(2); });
  auto third = loop.add_turn_hook([&] { order.push_back(3); });
  loop.run_once(base::Millis(0));
  loop.run_once(base::Millis(0));
  EXPECT_EQ(order, (std::vector<int>{1, 3, 1, 3}));
}

}  // namespace
}  // namespace abox::io
