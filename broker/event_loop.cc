#include "broker/event_loop.h"

namespace abox::broker {

struct BrokerLoop::FdWatch final : io::EventLoop::Watcher, io::EventLoop::Deletable {
  explicit FdWatch(Handler h) : handler(std::move(h)) {}
  void on_ready(std::uint32_t events) override { handler(events); }
  Handler handler;
  io::EventLoop::Handle handle = io::EventLoop::kNoHandle;
};

struct BrokerLoop::FnTimer final : io::EventLoop::Timer {
  FnTimer(BrokerLoop& o, TimerId i, std::function<void()> f) : owner(o), id(i), fn(std::move(f)) {}
  void on_timer() override {
    // Erasing destroys this object: take what runs first.
    std::function<void()> run = std::move(fn);
    owner.timers_.erase(id);
    run();
  }
  BrokerLoop& owner;
  TimerId id;
  std::function<void()> fn;
};

BrokerLoop::BrokerLoop(io::EventLoop::Clock clock) : loop_(256, std::move(clock)) {}

BrokerLoop::~BrokerLoop() {
  // Unwatch and cancel while the loop is still whole.
  for (auto& [_, w] : watches_) loop_.unwatch(w->handle);
  watches_.clear();
  timers_.clear();
}

bool BrokerLoop::watch(int fd, std::uint32_t events, Handler h) {
  auto [it, added] = watches_.try_emplace(fd);
  if (!added) return false;
  it->second = std::make_unique<FdWatch>(std::move(h));
  it->second->handle = loop_.watch(fd, events, it->second.get(), io::EventLoop::Trigger::level);
  return true;
}

void BrokerLoop::modify(int fd, std::uint32_t events) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return;
  loop_.modify(it->second->handle, events);
}

void BrokerLoop::unwatch(int fd) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return;
  loop_.unwatch(it->second->handle);
  // Its handler may be running right now: it goes after the turn.
  loop_.delete_later(std::move(it->second));
  watches_.erase(it);
}

bool BrokerLoop::hand_over(int fd, Handler h) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return false;
  auto next = std::make_unique<FdWatch>(std::move(h));
  next->handle = it->second->handle;
  loop_.rebind(next->handle, next.get());
  // The old handler may be running right now: it goes after the turn.
  loop_.delete_later(std::move(it->second));
  it->second = std::move(next);
  return true;
}

BrokerLoop::TimerId BrokerLoop::schedule(base::MonoTime at, std::function<void()> fn) {
  TimerId id = next_timer_++;
  auto& t = timers_[id];
  t = std::make_unique<FnTimer>(*this, id, std::move(fn));
  loop_.schedule(*t, at);
  return id;
}

void BrokerLoop::cancel(TimerId id) {
  // ~Timer() cancels a scheduled timer.
  timers_.erase(id);
}

}  // namespace abox::broker
