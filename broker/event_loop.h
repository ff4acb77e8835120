// BrokerLoop: the broker's view of the data plane's one event loop
// (io::EventLoop, io/event_loop.h), which it owns. Single threaded.
//
// The broker's objects are written against fds and functions: a handler per
// fd (level-triggered, as the connection state machine expects: an fd still
// ready after its handler runs calls it again the next turn) and one-shot
// timers by id. This class maps those onto the loop's Watcher and Timer
// objects; the waiting, the clock, the timer heap and the deferred work and
// deferred deletion are the loop's own.
//
// A turn (the loop's): wait for readiness or the earliest timer, read the
// clock once (now()), run every ready handler, then every due timer, then
// the deferred work. A handler unwatched during the turn is not called
// afterwards, and its function lives until the turn ends (it may unwatch
// itself), so fds may be closed and reused freely.
//
// The ring is created disabled: the sandbox restricts it (enable_ring(),
// broker/sandbox.h) before the first turn; without a sandbox the first
// turn enables it unrestricted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "base/clock.h"
#include "io/event_loop.h"

namespace abox::broker {

class BrokerLoop {
 public:
  // events: POLLIN / POLLOUT / POLLERR / POLLHUP bits that fired.
  using Handler = std::function<void(std::uint32_t events)>;
  using TimerId = std::uint64_t;

  // Throws std::runtime_error when io_uring cannot be set up (startup).
  // clock: empty reads the monotonic clock (tests inject theirs).
  explicit BrokerLoop(io::EventLoop::Clock clock = {});
  ~BrokerLoop();
  BrokerLoop(const BrokerLoop&) = delete;
  BrokerLoop& operator=(const BrokerLoop&) = delete;

  // Watches fd for `events` (POLLIN and/or POLLOUT; 0 = errors and hang-ups
  // only). An fd the kernel cannot poll reports POLLERR at the next turn.
  // False when fd is already watched (the caller drops the fd).
  [[nodiscard]] bool watch(int fd, std::uint32_t events, Handler h);
  void modify(int fd, std::uint32_t events);
  // Stops watching; safe from inside that fd's own handler.
  void unwatch(int fd);
  // Hands fd's watch (and its poll in the kernel) to a new handler, with its
  // events unchanged: how an upstream connection moves between a guest
  // connection and the pool without a poll removed and armed again each way.
  // Safe from inside fd's own handler. False when fd is not watched.
  [[nodiscard]] bool hand_over(int fd, Handler h);

  // Calls fn once in the first turn at or after `at`. Ids are never reused;
  // 0 is never an id.
  TimerId schedule(base::MonoTime at, std::function<void()> fn);
  void cancel(TimerId id);

  // Runs fn after the current turn's callbacks and timers.
  void defer(std::function<void()> fn) { loop_.defer(std::move(fn)); }
  // Destroys object after the current turn's callbacks and timers.
  void delete_later(std::unique_ptr<io::EventLoop::Deletable> object) {
    loop_.delete_later(std::move(object));
  }

  void run() { loop_.run(); }
  void run_once(base::Millis max_wait) { loop_.run_once(max_wait); }
  void stop() { loop_.stop(); }
  bool stopping() const { return loop_.stopping(); }
  base::MonoTime now() const { return loop_.now(); }

  // The loop itself: for the sandbox (enable_ring) and for objects written
  // against io::EventLoop directly.
  io::EventLoop& io() { return loop_; }

 private:
  struct FdWatch;
  struct FnTimer;
  // Declared first: destroyed last, after every registration in it.
  io::EventLoop loop_;
  std::unordered_map<int, std::unique_ptr<FdWatch>> watches_;
  std::unordered_map<TimerId, std::unique_ptr<FnTimer>> timers_;
  TimerId next_timer_ = 1;
};

}  // namespace abox::broker
