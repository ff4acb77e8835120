// EventLoop: the one io_uring of a data-plane process (abox-net, the broker).
//
// Everything such a process does happens on this loop's thread: it watches
// fds for readiness with poll requests on the ring, wakes for the earliest
// deadline, runs one-shot timers, and runs deferred work and deferred
// deletions between turns. No other thread, no locks.
//
// A turn: wait (submitting whatever was queued) for a completion, the
// earliest deadline or nothing at all when work is pending; read the clock
// once (now()); call every watcher and request owner whose completion came,
// in the order the kernel finished them; then, when one is due, every timer
// source, then every due one-shot Timer; then deferred work and deferred
// deletions (objects destroyed after the callbacks that asked for it); last
// the turn hooks (a link's batch flushed once per turn).
//
// Readiness comes in two kinds, chosen per watch:
//   - edge (the default, abox-net): one multishot poll posts on wake-ups, so
//     a watcher must drain its fd until EAGAIN, or ask for another turn with
//     wake_next_turn() when it stops early to stay fair to other fds;
//   - level (the broker): a one-shot poll armed again after each callback,
//     so an fd still ready after its callback fires again at the next turn
//     (epoll's level-triggered behaviour, with no system call per change:
//     arming and removing are submission entries handed over with the wait).
//     A level poll is armed when the loop next submits, with the events
//     asked last, so a watch changed several times in a turn costs one
//     entry; narrowing the events of an armed poll removes nothing (the
//     poll stays, and readiness no longer asked for is not reported: the
//     poll is armed again with the narrower events instead). Only widening
//     an armed poll costs a removal. The broker changes its events several
//     times per request: a removal and a new poll each cost two completions.
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
// own callback. An object destroyed from inside one of its own callbacks
// goes through delete_later() (Envoy's deferredDelete, STYLE.md 2).
//
// Time: the loop reads its clock once per turn. The clock is injected
// (deterministic tests, STYLE.md 14); by default it is the monotonic clock.
// A test with an injected clock turns the loop with run_once(0) after moving
// its clock: the wait itself is real time.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/clock.h"

namespace abox::io {

class EventLoop {
 public:
  class Watcher {
   public:
    virtual ~Watcher() = default;
    // events: POLLIN / POLLOUT / POLLERR / POLLHUP / POLLRDHUP bits that fired.
    virtual void on_ready(std::uint32_t events) = 0;
  };
  class Completion {
   public:
    virtual ~Completion() = default;
    // res: the operation's result (bytes, or -errno); cqe_flags: the CQE's.
    virtual void on_complete(int res, std::uint32_t cqe_flags) = 0;
  };
  // A one-shot deadline: schedule() it, and on_timer() runs once in the
  // first turn at or after it, unless cancel()led or scheduled again
  // before. Its owner cancels it before it goes (the destructor asserts
  // nothing: a Timer destroyed while scheduled is a bug the loop cannot
  // see, so ~Timer() cancels it itself).
  class Timer {
   public:
    Timer() = default;
    virtual ~Timer();
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    virtual void on_timer() = 0;
    bool scheduled() const { return loop_ != nullptr; }
    base::MonoTime due() const { return due_; }

   private:
    friend class EventLoop;
    EventLoop* loop_ = nullptr;  // set while scheduled
    base::MonoTime due_{};
    std::size_t heap_index_ = 0;
  };
  // What delete_later() takes: anything destroyed through a base pointer.
  class Deletable {
   public:
    virtual ~Deletable() = default;
  };
  enum class Trigger : std::uint8_t { edge, level };
  using Handle = std::uint32_t;
  static constexpr Handle kNoHandle = 0xFFFF'FFFFu;
  using Clock = std::function<base::MonoTime()>;

  // Throws std::runtime_error when io_uring cannot be set up (a startup
  // failure, said clearly: seccomp or an old kernel). clock: empty reads
  // the monotonic clock.
  explicit EventLoop(unsigned entries = 256, Clock clock = {});
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts watching fd for `events` (POLLIN, POLLOUT, or both; 0 reports
  // errors and hang-ups only). The watcher must stay alive until unwatch().
  Handle watch(int fd, std::uint32_t events, Watcher* w, Trigger trigger = Trigger::edge);
  // Changes the events of a watch (e.g. add POLLOUT while output is queued).
  void modify(Handle h, std::uint32_t events);
  void unwatch(Handle h);
  // Gives the watch h to another watcher, with nothing asked of the kernel:
  // the poll outstanding, if any, now reports to w. Safe from inside the old
  // watcher's callback (which must then not touch the watch again).
  void rebind(Handle h, Watcher* w);

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

  // One-shot timers (no allocation: the timer is its own heap entry).
  // schedule() of a scheduled timer moves it.
  void schedule(Timer& t, base::MonoTime at);
  void cancel(Timer& t);

  // Deadline sources: asked each turn for their next deadline; the loop
  // wakes by the earliest, and in a turn where one is due it calls every
  // source's fire(now) (each checks its own deadlines).
  struct TimerSource {
    std::function<std::optional<base::MonoTime>()> next;
    std::function<void(base::MonoTime)> fire;
  };
  // A timer source or turn hook is registered while its Registration lives:
  // its owner keeps it as a member declared after everything the callbacks
  // use, so an owner destroyed before the loop (a stack in a test, a
  // component torn down) leaves nothing behind that names it. Move-only;
  // it must not outlive the loop (like a Watcher). Removing one from inside
  // a callback is safe: it is skipped from then on and forgotten after the
  // turn.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept { *this = std::move(other); }
    Registration& operator=(Registration&& other) noexcept;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration() { reset(); }
    void reset();

   private:
    friend class EventLoop;
    Registration(EventLoop* loop, std::uint64_t id) : loop_(loop), id_(id) {}
    EventLoop* loop_ = nullptr;
    std::uint64_t id_ = 0;
  };
  [[nodiscard]] Registration add_timer_source(TimerSource t);
  // Runs at the end of every turn, after all callbacks, timers and deferred
  // work (e.g. to flush a batch of frames queued while handling the turn).
  [[nodiscard]] Registration add_turn_hook(std::function<void()> hook);

  // Runs fn after this turn's callbacks and timers (or at the end of the
  // next turn, when called outside one), and the turn after waits for
  // nothing. Not for the per-packet path: a std::function each.
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }
  // Destroys `object` after this turn's callbacks and timers: for an object
  // that must go from inside one of its own callbacks.
  void delete_later(std::unique_ptr<Deletable> object) { dying_.push_back(std::move(object)); }
  // Destroys now every object handed to delete_later() and not yet gone:
  // for an owner about to go whose retired objects still refer to it (a
  // stack's flows). Never from inside a callback of one of those objects.
  void delete_retired_now();

  // Runs until stop() is called (from a callback) or a signal watcher stops it.
  void run();
  // One turn: waits for at most `max_wait` (or the earliest deadline).
  void run_once(base::Millis max_wait);
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_; }

  // The clock as read at the start of this turn's callbacks.
  base::MonoTime now() const { return now_; }

  // Poll requests handed to the kernel so far, and removals of armed ones
  // (the cost of watching, for stats and tests).
  std::uint64_t polls_armed() const { return polls_armed_; }
  std::uint64_t polls_removed() const { return polls_removed_; }

  // The ring is created disabled (IORING_SETUP_R_DISABLED) so that a
  // sandbox can limit the operations it accepts before anything runs on it
  // (netstack/program/sandbox.h): enable_ring() registers `restrictions`
  // (none: unrestricted) and enables it. run_once() enables it unrestricted
  // if nobody did. Returns 0, or -errno (-EBADFD: already enabled).
  int enable_ring(std::span<const io_uring_restriction> restrictions);

 private:
  struct Reg {
    Watcher* watcher = nullptr;
    int fd = -1;
    std::uint32_t events = 0;
    std::uint32_t gen = 0;
    bool active = false;
    bool armed = false;              // a poll is outstanding
    bool level = false;              // one-shot polls, armed again after each callback
    bool arm_pending = false;        // a level watch listed in to_arm_
    std::uint32_t armed_events = 0;  // what the outstanding poll asks for
  };
  io_uring_sqe* sqe();
  void arm(Handle h);
  // A level watch is armed at the next submission (flush_arms()).
  void arm_later(Handle h);
  void flush_arms();
  // Hands a removal of h's outstanding poll to the kernel.
  void remove_poll(Handle h);
  base::MonoTime read_clock() const { return clock_ ? clock_() : base::MonoClock::now(); }
  void run_due_timers();
  void run_deferred();
  // The timer heap (a binary min-heap by due time, each timer knowing its
  // index).
  void heap_up(std::size_t i);
  void heap_down(std::size_t i);
  void heap_swap(std::size_t a, std::size_t b);
  void heap_remove(std::size_t i);
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
  Clock clock_;
  std::vector<Reg> regs_;
  std::vector<Handle> free_;
  std::vector<Handle> wake_;
  std::vector<Handle> waking_;
  std::vector<Handle> to_arm_;  // level watches to arm at the next submission
  std::uint64_t polls_armed_ = 0;
  std::uint64_t polls_removed_ = 0;
  unsigned done_at_submit_ = 0;     // such requests since the last wait
  std::vector<Finished> finished_;  // request completions to dispatch (kept across cancel_all)
  std::vector<Timer*> heap_;
  // Registered sources and hooks; a removed one has id 0 until the end of
  // the turn (removal_pending_), then it is erased.
  struct SourceEntry {
    std::uint64_t id;
    TimerSource source;
  };
  struct HookEntry {
    std::uint64_t id;
    std::function<void()> hook;
  };
  void remove_registration(std::uint64_t id);
  void erase_removed_registrations();
  std::vector<SourceEntry> timers_;
  std::vector<HookEntry> turn_hooks_;
  std::uint64_t next_registration_ = 1;
  bool removal_pending_ = false;
  std::vector<std::function<void()>> deferred_;
  std::vector<std::unique_ptr<Deletable>> dying_;
  base::MonoTime now_{};
  bool stopping_ = false;
  bool ring_enabled_ = false;
};

}  // namespace abox::io
