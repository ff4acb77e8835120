// EventLoop: the one io_uring of an abox-net process.
//
// Everything abox-net does happens on this loop's thread: it watches fds for
// readiness with multishot poll requests, wakes for the earliest deadline a
// timer source reports, and runs deferred work between turns. No other
// thread, no locks.
//
// Readiness is edge-like (a multishot poll posts on wake-ups), so a watcher
// must drain its fd until EAGAIN, or ask for another turn with
// wake_next_turn() when it stops early to stay fair to other fds.
//
// Registrations are slots with generations: a completion that arrives for a
// slot already unwatched (or reused) is recognized and ignored, so a watcher
// may unwatch itself, or be destroyed right after unwatch(), from inside its
// own callback.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/clock.h"

namespace abox::netstack {

class EventLoop {
 public:
  class Watcher {
   public:
    virtual ~Watcher() = default;
    // events: POLLIN / POLLOUT / POLLERR / POLLHUP bits that fired.
    virtual void on_ready(std::uint32_t events) = 0;
  };
  using Handle = std::uint32_t;
  static constexpr Handle kNoHandle = 0xFFFF'FFFFu;

  // Throws std::runtime_error when io_uring cannot be set up (a startup
  // failure, said clearly: seccomp or an old kernel).
  explicit EventLoop(unsigned entries = 256);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts watching fd for `events` (POLLIN, POLLOUT, or both). The watcher
  // must stay alive until unwatch().
  Handle watch(int fd, std::uint32_t events, Watcher* w);
  // Changes the events of a watch (e.g. add POLLOUT while output is queued).
  void modify(Handle h, std::uint32_t events);
  void unwatch(Handle h);

  // Calls w->on_ready(POLLIN) on the next turn without waiting for the fd.
  void wake_next_turn(Handle h);

  // Deadline sources: asked each turn for their next deadline; the loop
  // wakes by the earliest, and in a turn where one is due it calls every
  // source's fire(now) (each checks its own deadlines).
  struct TimerSource {
    std::function<std::optional<base::MonoTime>()> next;
    std::function<void(base::MonoTime)> fire;
  };
  void add_timer_source(TimerSource t) { timers_.push_back(std::move(t)); }
  // Runs at the end of every turn, after all callbacks (e.g. to flush a
  // batch of datagrams queued while handling the turn's events).
  void add_turn_hook(std::function<void()> hook) { turn_hooks_.push_back(std::move(hook)); }

  // Runs until stop() is called (from a callback) or a signal watcher stops it.
  void run();
  // One turn: waits for at most `max_wait` (or the earliest deadline).
  void run_once(base::Millis max_wait);
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_; }

  base::MonoTime now() const { return now_; }

  // The ring is created disabled (IORING_SETUP_R_DISABLED) so that the
  // sandbox can limit the operations it accepts before anything runs on it
  // (sandbox.h): enable_ring() registers `restrictions` (none: unrestricted)
  // and enables it. run_once() enables it unrestricted if nobody did.
  // Returns 0, or -errno (-EBADFD: already enabled).
  int enable_ring(std::span<const io_uring_restriction> restrictions);

 private:
  struct Reg {
    Watcher* watcher = nullptr;
    int fd = -1;
    std::uint32_t events = 0;
    std::uint32_t gen = 0;
    bool active = false;
    bool armed = false;  // a multishot poll is outstanding
  };
  io_uring_sqe* sqe();
  void arm(Handle h);
  static std::uint64_t tag(Handle h, std::uint32_t gen) { return (std::uint64_t{gen} << 32) | h; }

  io_uring ring_{};
  std::vector<Reg> regs_;
  std::vector<Handle> free_;
  std::vector<Handle> wake_;
  std::vector<Handle> waking_;
  std::vector<TimerSource> timers_;
  std::vector<std::function<void()>> turn_hooks_;
  base::MonoTime now_{};
  bool stopping_ = false;
  bool ring_enabled_ = false;
};

}  // namespace abox::netstack
