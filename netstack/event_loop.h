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
// Besides readiness, the loop runs one-shot requests (a read, a write) for
// a Completion: request() hands out a submission entry for it, the kernel
// does the I/O when the entry is submitted (at the next turn's wait, with no
// system call of its own) or when the fd becomes ready, and on_complete()
// gets the result once. A Completion must outlive its requests: its owner
// calls cancel_all() before it goes away.
//
// Registrations are slots with generations: a completion that arrives for a
// slot already unwatched (or reused) is recognized and ignored, so a watcher
// may unwatch itself, or be destroyed right after unwatch(), from inside its
// own callback.
#pragma once

#include <liburing.h>

#include <cstddef>
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
  class Completion {
   public:
    virtual ~Completion() = default;
    // res: the operation's result (bytes, or -errno); cqe_flags: the CQE's.
    virtual void on_complete(int res, std::uint32_t cqe_flags) = 0;
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

  // A submission entry whose completion goes to c->on_complete(). The caller
  // fills it with io_uring_prep_*() (and must not change its user data).
  // It is handed to the kernel at the next wait, or by submit_now().
  // done_at_submit: the operation never waits (a write to a tap), so its
  // completion is there as soon as it is submitted; the next wait then waits
  // for one completion more than those, instead of waking for them at once.
  io_uring_sqe* request(Completion* c, bool done_at_submit = false);
  // Hands every queued entry to the kernel now: for an owner that is about
  // to do I/O by a system call that must come after what it queued.
  void submit_now();
  // Cancels every request of c still in the kernel and waits until each has
  // completed (their results are dropped; completions of others that arrive
  // meanwhile are kept for the next turn). `in_flight` is how many requests
  // c has outstanding; it is 0 on return.
  void cancel_all(Completion* c, std::size_t& in_flight);
  // Asks the kernel to cancel every request of c, without waiting: each
  // still completes through c->on_complete() (-ECANCELED, or its result if
  // it had just finished), so c must live until its last completion (for a
  // multishot request: the one without IORING_CQE_F_MORE).
  void cancel(Completion* c);
  // Dispatches c's completions that are ready now, without waiting and
  // outside a turn: submits what is queued, lets the kernel post what has
  // finished, and hands c's completions to c->on_complete() (which may queue
  // new requests: they go at the next submit). Everyone else's are kept for
  // the next turn, as cancel_all() keeps them. Returns how many of c's it
  // dispatched. For an owner that must take what waits now (a test, a
  // fuzzer driving the stack by hand), never the loop's own path.
  std::size_t complete_ready(Completion* c);

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
  // A request's user data: the Completion's address with the top bit set
  // (user-space addresses never have it; watcher tags never reach it: their
  // generation would have to pass 2^31).
  static constexpr std::uint64_t kRequestBit = std::uint64_t{1} << 63;
  struct Finished {
    std::uint64_t data;
    int res;
    std::uint32_t flags;
  };

  io_uring ring_{};
  std::vector<Reg> regs_;
  std::vector<Handle> free_;
  std::vector<Handle> wake_;
  std::vector<Handle> waking_;
  unsigned done_at_submit_ = 0;     // such requests since the last wait
  std::vector<Finished> finished_;  // request completions to dispatch (kept across cancel_all)
  std::vector<TimerSource> timers_;
  std::vector<std::function<void()>> turn_hooks_;
  base::MonoTime now_{};
  bool stopping_ = false;
  bool ring_enabled_ = false;
};

}  // namespace abox::netstack
