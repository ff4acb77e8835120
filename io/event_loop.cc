#include "io/event_loop.h"

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace abox::io {

namespace {
// user_data of requests whose completions carry nothing (removals, updates).
constexpr std::uint64_t kIgnoreTag = ~std::uint64_t{0};
}  // namespace

EventLoop::Timer::~Timer() {
  if (loop_ != nullptr) loop_->cancel(*this);
}

EventLoop::EventLoop(unsigned entries, Clock clock) : clock_(std::move(clock)) {
  // One thread submits and reaps: the kernel may skip cross-thread work.
  // DEFER_TASKRUN (6.1) keeps the work a completion needs (a poll that
  // fired, a read to redo) until this thread waits for completions, where
  // it runs in one batch, instead of interrupting it: about 1 us less CPU
  // per UDP round trip (docs/benchmarks.md). Disabled until enable_ring():
  // see there. Older kernels get what they have.
  int rc = -EINVAL;
  for (unsigned flags : {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
                         IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_R_DISABLED}) {
    io_uring_params params{};
    params.flags = flags;
    rc = io_uring_queue_init_params(entries, &ring_, &params);
    if (rc != -EINVAL) break;
  }
  if (rc == -EINVAL) {  // older still: plain setup (enable_ring() then fails: no sandbox)
    io_uring_params params{};
    rc = io_uring_queue_init_params(entries, &ring_, &params);
    ring_enabled_ = rc == 0;
  }
  if (rc < 0) throw std::runtime_error(std::string("io_uring setup failed: ") + std::strerror(-rc));
  now_ = read_clock();
}

EventLoop::~EventLoop() {
  // Whatever still waits to be destroyed goes first (it may cancel timers
  // and unwatch fds), then the timers still scheduled forget this loop.
  run_deferred();
  for (Timer* t : heap_) t->loop_ = nullptr;
  heap_.clear();
  io_uring_queue_exit(&ring_);
}

int EventLoop::enable_ring(std::span<const io_uring_restriction> restrictions) {
  if (ring_enabled_) return -EBADFD;
  // Debian's liburing 2.3 declares io_uring_register_restrictions() and
  // io_uring_enable_rings() but does not export them: the raw register call.
  auto reg = [this](unsigned op, const void* arg, unsigned n) {
    int rc = io_uring_register(static_cast<unsigned>(ring_.ring_fd), op, arg, n);
    return rc == -1 ? -errno : rc;
  };
  if (!restrictions.empty()) {
    if (int rc = reg(IORING_REGISTER_RESTRICTIONS, restrictions.data(),
                     static_cast<unsigned>(restrictions.size()));
        rc < 0)
      return rc;
  }
  if (int rc = reg(IORING_REGISTER_ENABLE_RINGS, nullptr, 0); rc < 0) return rc;
  ring_enabled_ = true;
  return 0;
}

io_uring_sqe* EventLoop::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  if (s == nullptr) {
    if (!ring_enabled_) enable_ring({});  // a disabled ring cannot submit
    // The submission queue is full: hand what is queued to the kernel.
    io_uring_submit(&ring_);
    s = io_uring_get_sqe(&ring_);
  }
  if (s == nullptr) throw std::runtime_error("io_uring submission queue stuck");
  return s;
}

EventLoop::Handle EventLoop::watch(int fd, std::uint32_t events, Watcher* w, Trigger trigger) {
  Handle h;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
  } else {
    h = static_cast<Handle>(regs_.size());
    regs_.emplace_back();
  }
  Reg& r = regs_[h];
  r.watcher = w;
  r.fd = fd;
  r.events = events;
  r.gen += 1;
  r.active = true;
  r.armed = false;
  r.level = trigger == Trigger::level;
  if (r.level) {
    arm_later(h);
  } else {
    arm(h);
  }
  return h;
}

void EventLoop::arm(Handle h) {
  Reg& r = regs_[h];
  io_uring_sqe* s = sqe();
  if (r.level) {
    io_uring_prep_poll_add(s, r.fd, r.events);
  } else {
    io_uring_prep_poll_multishot(s, r.fd, r.events);
  }
  io_uring_sqe_set_data64(s, tag(h, r.gen));
  r.armed = true;
  r.armed_events = r.events;
  ++polls_armed_;
}

void EventLoop::arm_later(Handle h) {
  Reg& r = regs_[h];
  if (r.arm_pending) return;
  r.arm_pending = true;
  to_arm_.push_back(h);
}

void EventLoop::flush_arms() {
  // By index: sqe() may submit (a full queue) but never adds to the list.
  for (std::size_t i = 0; i < to_arm_.size(); ++i) {
    const Handle h = to_arm_[i];
    if (h >= regs_.size()) continue;
    Reg& r = regs_[h];
    if (!r.arm_pending) continue;  // unwatched (and maybe reused) since
    r.arm_pending = false;
    if (r.active && !r.armed) arm(h);
  }
  to_arm_.clear();
}

void EventLoop::remove_poll(Handle h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_poll_remove(s, tag(h, regs_[h].gen));
  io_uring_sqe_set_data64(s, kIgnoreTag);
  ++polls_removed_;
}

void EventLoop::modify(Handle h, std::uint32_t events) {
  if (h >= regs_.size() || !regs_[h].active) return;
  Reg& r = regs_[h];
  if (r.events == events) return;
  if (r.level) {
    const bool widens = (events & ~r.armed_events) != 0;
    r.events = events;
    // An armed poll asking for at least these events stays: what it
    // reports beyond them is filtered out when it comes.
    if (r.armed && !widens) return;
    if (r.armed) {
      remove_poll(h);
      r.armed = false;
      r.gen += 1;  // the removed poll's late completion is stale
    }
    arm_later(h);
    return;
  }
  // Retire the old poll (its late completions carry the old generation)
  // and arm a new one under a new generation.
  if (r.armed) remove_poll(h);
  r.events = events;
  r.gen += 1;
  arm(h);
}

void EventLoop::rebind(Handle h, Watcher* w) {
  if (h >= regs_.size() || !regs_[h].active) return;
  regs_[h].watcher = w;
}

void EventLoop::unwatch(Handle h) {
  if (h >= regs_.size() || !regs_[h].active) return;
  Reg& r = regs_[h];
  if (r.armed) remove_poll(h);
  r.arm_pending = false;
  r.active = false;
  r.armed = false;
  r.watcher = nullptr;
  r.gen += 1;
  free_.push_back(h);
}

io_uring_sqe* EventLoop::request(Completion* c, bool done_at_submit) {
  io_uring_sqe* s = sqe();
  if (done_at_submit) ++done_at_submit_;
  io_uring_sqe_set_data64(s, kRequestBit | reinterpret_cast<std::uintptr_t>(c));
  return s;
}

void EventLoop::submit_now() {
  flush_arms();
  if (io_uring_sq_ready(&ring_) == 0) return;
  if (!ring_enabled_) enable_ring({});  // a disabled ring cannot submit (as in sqe())
  io_uring_submit(&ring_);
}

void EventLoop::cancel_all(Completion* c, std::size_t& in_flight) {
  if (in_flight == 0) return;
  const std::uint64_t mine = kRequestBit | reinterpret_cast<std::uintptr_t>(c);
  io_uring_sqe* s = sqe();
  io_uring_prep_cancel64(s, mine, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(s, kIgnoreTag);
  flush_arms();
  if (!ring_enabled_) enable_ring({});
  io_uring_submit(&ring_);
  // Cancelled requests complete at once (-ECANCELED, or their result if
  // they had just finished); the bound only guards against a kernel bug.
  for (int waits = 0; in_flight > 0 && waits < 100; ++waits) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{.tv_sec = 0, .tv_nsec = 10'000'000};
    if (io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) < 0 || cqe == nullptr) continue;
    const std::uint64_t data = io_uring_cqe_get_data64(cqe);
    if (data == mine) {
      --in_flight;
    } else if (data != kIgnoreTag) {
      finished_.push_back({data, cqe->res, cqe->flags});  // someone else's: next turn
    }
    io_uring_cqe_seen(&ring_, cqe);
  }
  in_flight = 0;
}

void EventLoop::cancel(Completion* c) {
  io_uring_sqe* s = sqe();
  io_uring_prep_cancel64(s, kRequestBit | reinterpret_cast<std::uintptr_t>(c), IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(s, kIgnoreTag);
}

std::size_t EventLoop::complete_ready(Completion* c) {
  if (!ring_enabled_) enable_ring({});
  // With IORING_SETUP_DEFER_TASKRUN the kernel posts a completion that
  // finished after its submission only when asked for events: ask, without
  // waiting for any.
  flush_arms();
  io_uring_submit_and_get_events(&ring_);
  // The requests that complete at submission were just submitted, and their
  // completions leave the ring here: the next wait must not wait for them.
  done_at_submit_ = 0;
  const std::uint64_t mine = kRequestBit | reinterpret_cast<std::uintptr_t>(c);
  std::vector<Finished> ours;  // not a hot path: a vector per call
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    const std::uint64_t data = io_uring_cqe_get_data64(cqe);
    if (data == mine) {
      ours.push_back({data, cqe->res, cqe->flags});
    } else if (data != kIgnoreTag) {
      finished_.push_back({data, cqe->res, cqe->flags});  // someone else's: next turn
    }
  }
  io_uring_cq_advance(&ring_, seen);
  // Collected first: a callback's new requests are not this call's.
  for (const Finished& f : ours) c->on_complete(f.res, f.flags);
  return ours.size();
}

void EventLoop::wake_next_turn(Handle h) {
  if (h < regs_.size() && regs_[h].active) wake_.push_back(h);
}

// ---- one-shot timers: a binary min-heap of Timer*, each knowing its index ----

void EventLoop::schedule(Timer& t, base::MonoTime at) {
  if (t.loop_ == this) {
    const base::MonoTime before = t.due_;
    t.due_ = at;
    if (at < before) {
      heap_up(t.heap_index_);
    } else {
      heap_down(t.heap_index_);
    }
    return;
  }
  if (t.loop_ != nullptr) t.loop_->cancel(t);
  t.loop_ = this;
  t.due_ = at;
  t.heap_index_ = heap_.size();
  heap_.push_back(&t);
  heap_up(t.heap_index_);
}

void EventLoop::cancel(Timer& t) {
  if (t.loop_ != this) return;
  heap_remove(t.heap_index_);
  t.loop_ = nullptr;
}

void EventLoop::heap_swap(std::size_t a, std::size_t b) {
  std::swap(heap_[a], heap_[b]);
  heap_[a]->heap_index_ = a;
  heap_[b]->heap_index_ = b;
}

void EventLoop::heap_up(std::size_t i) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!(heap_[i]->due_ < heap_[parent]->due_)) return;
    heap_swap(i, parent);
    i = parent;
  }
}

void EventLoop::heap_down(std::size_t i) {
  for (;;) {
    const std::size_t left = 2 * i + 1;
    const std::size_t right = left + 1;
    std::size_t least = i;
    if (left < heap_.size() && heap_[left]->due_ < heap_[least]->due_) least = left;
    if (right < heap_.size() && heap_[right]->due_ < heap_[least]->due_) least = right;
    if (least == i) return;
    heap_swap(i, least);
    i = least;
  }
}

void EventLoop::heap_remove(std::size_t i) {
  const std::size_t last = heap_.size() - 1;
  if (i != last) {
    heap_swap(i, last);
    heap_.pop_back();
    heap_down(i);
    heap_up(i);
  } else {
    heap_.pop_back();
  }
}

void EventLoop::run_due_timers() {
  // Bounded by what is due now: a timer that schedules itself again for
  // now or earlier runs at the next turn, not in a loop here.
  std::size_t budget = heap_.size();
  while (budget-- > 0 && !heap_.empty() && heap_.front()->due_ <= now_) {
    Timer* t = heap_.front();
    heap_remove(0);
    t->loop_ = nullptr;
    t->on_timer();
  }
}

void EventLoop::run_deferred() {
  // Work may defer more work, and a destructor may delete_later() another
  // object: keep going until both lists are empty (each round takes what
  // was there when it began).
  while (!deferred_.empty() || !dying_.empty()) {
    auto work = std::move(deferred_);
    deferred_.clear();
    for (auto& fn : work) fn();
    auto objects = std::move(dying_);
    dying_.clear();
    objects.clear();
  }
}

void EventLoop::delete_retired_now() {
  // A destructor may retire another object: until none is left.
  while (!dying_.empty()) {
    auto objects = std::move(dying_);
    dying_.clear();
    objects.clear();
  }
}

EventLoop::Registration& EventLoop::Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    reset();
    loop_ = other.loop_;
    id_ = other.id_;
    other.loop_ = nullptr;
    other.id_ = 0;
  }
  return *this;
}

void EventLoop::Registration::reset() {
  if (loop_ != nullptr) loop_->remove_registration(id_);
  loop_ = nullptr;
  id_ = 0;
}

EventLoop::Registration EventLoop::add_timer_source(TimerSource t) {
  const std::uint64_t id = next_registration_++;
  timers_.push_back({id, std::move(t)});
  return Registration(this, id);
}

EventLoop::Registration EventLoop::add_turn_hook(std::function<void()> hook) {
  const std::uint64_t id = next_registration_++;
  turn_hooks_.push_back({id, std::move(hook)});
  return Registration(this, id);
}

void EventLoop::remove_registration(std::uint64_t id) {
  // Marked, not erased: the turn may be iterating over these right now.
  for (auto& e : timers_) {
    if (e.id == id) e.id = 0;
  }
  for (auto& e : turn_hooks_) {
    if (e.id == id) e.id = 0;
  }
  removal_pending_ = true;
}

void EventLoop::erase_removed_registrations() {
  if (!removal_pending_) return;
  std::erase_if(timers_, [](const SourceEntry& e) { return e.id == 0; });
  std::erase_if(turn_hooks_, [](const HookEntry& e) { return e.id == 0; });
  removal_pending_ = false;
}

void EventLoop::run() {
  while (!stopping_) run_once(base::Millis(1000));
}

void EventLoop::run_once(base::Millis max_wait) {
  if (!ring_enabled_) {
    if (int rc = enable_ring({}); rc < 0)
      throw std::runtime_error(std::string("io_uring enable failed: ") + std::strerror(-rc));
  }
  now_ = read_clock();
  base::MonoTime deadline = now_ + max_wait;
  base::MonoTime earliest_timer = base::MonoTime::max();
  erase_removed_registrations();
  for (const auto& t : timers_) {
    if (auto d = t.source.next(); d && *d < earliest_timer) earliest_timer = *d;
  }
  if (earliest_timer < deadline) deadline = earliest_timer;
  if (!heap_.empty() && heap_.front()->due_ < deadline) deadline = heap_.front()->due_;
  if (!wake_.empty() || !finished_.empty() || !deferred_.empty() || !dying_.empty()) deadline = now_;

  auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now_);
  if (wait.count() < 0) wait = std::chrono::nanoseconds(0);
  __kernel_timespec ts{};
  ts.tv_sec = static_cast<long long>(wait.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long long>(wait.count() % 1'000'000'000);
  io_uring_cqe* first = nullptr;
  // Completions that come with the submission itself do not end the wait:
  // one more does (or the deadline).
  const unsigned wait_for = 1 + done_at_submit_;
  done_at_submit_ = 0;
  flush_arms();
  int rc = io_uring_submit_and_wait_timeout(&ring_, &first, wait_for, &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    throw std::runtime_error(std::string("io_uring wait failed: ") + std::strerror(-rc));
  }
  now_ = read_clock();

  // Collect first, then dispatch: callbacks may queue new requests. Both
  // kinds go in one list, in the order the kernel completed them.
  struct Ready {
    std::uint64_t data;  // a request's user data, or 0 for a watcher
    Handle h;
    std::uint32_t gen;
    std::uint32_t events;  // a watcher's events, or a request's CQE flags
    int res;
  };
  thread_local std::vector<Ready> ready;
  ready.clear();
  auto collect = [&](std::uint64_t data, int res, std::uint32_t flags) {
    if (data == kIgnoreTag) return;
    if ((data & kRequestBit) != 0) {
      ready.push_back({data, 0, 0, flags, res});
      return;
    }
    auto h = static_cast<Handle>(data & 0xFFFF'FFFFu);
    auto gen = static_cast<std::uint32_t>(data >> 32);
    if (h >= regs_.size()) return;
    Reg& r = regs_[h];
    if (!r.active || r.gen != gen) return;              // stale: unwatched or modified
    if (!(flags & IORING_CQE_F_MORE)) r.armed = false;  // a one-shot poll, or the kernel ended the multishot
    if (res < 0) {
      if (res == -ECANCELED) return;
      ready.push_back({0, h, gen, POLLERR, 0});
      return;
    }
    ready.push_back({0, h, gen, static_cast<std::uint32_t>(res), 0});
  };
  for (const Finished& f : finished_) collect(f.data, f.res, f.flags);
  finished_.clear();
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    collect(io_uring_cqe_get_data64(cqe), cqe->res, cqe->flags);
  }
  io_uring_cq_advance(&ring_, seen);

  waking_.swap(wake_);
  wake_.clear();
  for (Handle h : waking_) {
    // res 1 marks a wake-up asked for: never filtered by the watch's events.
    if (h < regs_.size() && regs_[h].active) ready.push_back({0, h, regs_[h].gen, POLLIN, 1});
  }
  for (const auto& rd : ready) {
    if (rd.data != 0) {
      reinterpret_cast<Completion*>(static_cast<std::uintptr_t>(rd.data & ~kRequestBit))
          ->on_complete(rd.res, rd.events);
      continue;
    }
    if (rd.h >= regs_.size()) continue;
    Reg& r = regs_[rd.h];
    if (!r.active || r.gen != rd.gen) continue;
    if (r.level) {
      // Armed again after the callback (which may modify or unwatch), at the
      // next submission: the kernel then checks readiness afresh, as a
      // level-triggered wait would. Readiness the watch no longer asks for
      // (its events narrowed while the poll was out) is not reported.
      const std::uint32_t wanted =
          rd.res == 1 ? rd.events : rd.events & (r.events | POLLERR | POLLHUP | POLLNVAL);
      if (wanted != 0) r.watcher->on_ready(wanted);
      Reg& after = regs_[rd.h];  // the callback may have grown regs_
      if (after.active && after.gen == rd.gen && !after.armed) arm_later(rd.h);
      continue;
    }
    if (!r.armed) arm(rd.h);
    r.watcher->on_ready(rd.events);
  }
  // Timer sources run only when one is due: at high rates most turns are
  // woken by fds, and a source's fire() may scan a table.
  if (now_ >= earliest_timer) {
    // By index: a source may add another (reallocating) or remove one.
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      if (timers_[i].id != 0) timers_[i].source.fire(now_);
    }
  }
  run_due_timers();
  run_deferred();
  for (std::size_t i = 0; i < turn_hooks_.size(); ++i) {
    if (turn_hooks_[i].id != 0) turn_hooks_[i].hook();
  }
  erase_removed_registrations();
}

}  // namespace abox::io
