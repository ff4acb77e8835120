#include "broker/event_loop.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "base/unique_fd.h"

namespace abox::broker {
namespace {

struct SocketPair {
  base::UniqueFd a, b;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

TEST(BrokerLoop, TimersRunInDeadlineOrderAndCancelledOnesDoNot) {
  BrokerLoop loop;
  std::vector<int> order;
  auto now = loop.now();
  loop.schedule(now + base::Millis(20), [&] { order.push_back(2); });
  auto cancelled = loop.schedule(now + base::Millis(5), [&] { order.push_back(99); });
  loop.schedule(now + base::Millis(1), [&] { order.push_back(1); });
  loop.cancel(cancelled);
  for (int i = 0; i < 100 && order.size() < 2; ++i) loop.run_once(base::Millis(50));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

// The broker's timers run on the loop's injected clock: a test moves time
// and turns the loop without waiting for it.
TEST(BrokerLoop, TimersFollowTheInjectedClock) {
  base::MonoTime t = base::MonoClock::now();
  BrokerLoop loop([&t] { return t; });
  int fired = 0;
  loop.schedule(t + base::Seconds(600), [&] { ++fired; });
  loop.run_once(base::Millis(0));
  EXPECT_EQ(fired, 0);
  t += base::Seconds(599);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(fired, 0);
  t += base::Seconds(1);
  loop.run_once(base::Millis(0));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(loop.now(), t);
}

// A second watch of an fd already watched is refused (the caller drops the
// fd), as epoll refused it; once unwatched, the fd may be watched again.
TEST(BrokerLoop, AnFdIsWatchedOnceAtATime) {
  BrokerLoop loop;
  SocketPair p;
  int calls = 0;
  ASSERT_TRUE(loop.watch(p.a.get(), POLLIN, [&](std::uint32_t) { ++calls; }));
  EXPECT_FALSE(loop.watch(p.a.get(), POLLIN, [&](std::uint32_t) { calls += 100; }));
  loop.unwatch(p.a.get());
  EXPECT_TRUE(loop.watch(p.a.get(), POLLIN, [&](std::uint32_t) { ++calls; }));
  ASSERT_EQ(::write(p.b.get(), "x", 1), 1);
  for (int i = 0; i < 10 && calls == 0; ++i) loop.run_once(base::Millis(10));
  EXPECT_EQ(calls, 1) << "level-triggered: once per turn while readable";
}

TEST(BrokerLoop, AHandlerMayUnwatchItselfAndAnother) {
  BrokerLoop loop;
  SocketPair p, q;
  int first = 0, second = 0;
  ASSERT_TRUE(loop.watch(p.a.get(), POLLIN, [&](std::uint32_t) {
    ++first;
    loop.unwatch(p.a.get());
    loop.unwatch(q.a.get());
  }));
  ASSERT_TRUE(loop.watch(q.a.get(), POLLIN, [&](std::uint32_t) {
    ++second;
    loop.unwatch(q.a.get());
    loop.unwatch(p.a.get());
  }));
  ASSERT_EQ(::write(p.b.get(), "x", 1), 1);
  ASSERT_EQ(::write(q.b.get(), "y", 1), 1);
  for (int i = 0; i < 5; ++i) loop.run_once(base::Millis(10));
  // Whichever ran first unwatched the other: exactly one handler ran, once.
  EXPECT_EQ(first + second, 1);
}

TEST(BrokerLoop, DeferredWorkRunsAfterTheTurn) {
  BrokerLoop loop;
  std::vector<int> order;
  loop.schedule(loop.now(), [&] {
    loop.defer([&] { order.push_back(2); });
    order.push_back(1);
  });
  loop.run_once(base::Millis(10));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(BrokerLoop, ModifyChangesTheEventsWatched) {
  BrokerLoop loop;
  SocketPair p;
  std::uint32_t seen = 0;
  ASSERT_TRUE(loop.watch(p.a.get(), 0, [&](std::uint32_t e) { seen |= e; }));
  loop.run_once(base::Millis(0));
  EXPECT_EQ(seen & POLLOUT, 0u);
  loop.modify(p.a.get(), POLLOUT);
  loop.run_once(base::Millis(10));
  EXPECT_NE(seen & POLLOUT, 0u);
}

}  // namespace
}  // namespace abox::broker
