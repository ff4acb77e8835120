// BrokerLoop: the broker's one event loop (epoll, level-triggered), single
// threaded. broker/ may not include netstack/, so it has its own small loop.
//
// What it owns: the epoll fd, a table of fd -> handler, one-shot timers
// (ordered by deadline), and deferred work that runs after the current turn's
// callbacks (so an object may ask for its own deletion from inside its own
// callback: Envoy's deferredDelete, lwIP's err callbacks).
//
// A turn: wait for readiness or the earliest timer, read the clock once
// (now()), run every ready handler, then every due timer, then the deferred
// work. A handler removed during the turn is not called afterwards (the
// fd's generation is checked), so fds may be closed and reused freely.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/unique_fd.h"

namespace abox::broker {

class BrokerLoop {
 public:
  // events: EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP bits that fired.
  using Handler = std::function<void(std::uint32_t events)>;
  using TimerId = std::uint64_t;

  // Throws std::runtime_error when epoll cannot be created (startup).
  BrokerLoop();
  BrokerLoop(const BrokerLoop&) = delete;
  BrokerLoop& operator=(const BrokerLoop&) = delete;

  // Watches fd for `events` (EPOLLIN and/or EPOLLOUT; 0 = errors only).
  // Returns false when epoll refuses (the caller drops the fd).
  [[nodiscard]] bool watch(int fd, std::uint32_t events, Handler h);
  void modify(int fd, std::uint32_t events);
  // Stops watching; safe from inside that fd's own handler.
  void unwatch(int fd);

  // Calls fn once at or after `at`. Ids are never reused.
  TimerId schedule(base::MonoTime at, std::function<void()> fn);
  void cancel(TimerId id);

  // Runs fn after the current turn's callbacks.
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

  void run();
  void run_once(base::Millis max_wait);
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_; }
  base::MonoTime now() const { return now_; }

 private:
  struct Watch {
    Handler handler;
    std::uint32_t events = 0;
    std::uint64_t generation = 0;
  };

  base::UniqueFd epoll_;
  std::unordered_map<int, Watch> watches_;
  std::multimap<base::MonoTime, TimerId> timers_;
  std::unordered_map<TimerId,
                     std::pair<std::multimap<base::MonoTime, TimerId>::iterator, std::function<void()>>>
      timer_fns_;
  std::vector<std::function<void()>> deferred_;
  std::uint64_t next_generation_ = 1;
  TimerId next_timer_ = 1;
  base::MonoTime now_ = base::MonoClock::now();
  bool stopping_ = false;
};

}  // namespace abox::broker
