#include "broker/event_loop.h"

#include <sys/epoll.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace abox::broker {

BrokerLoop::BrokerLoop() : epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
}

bool BrokerLoop::watch(int fd, std::uint32_t events, Handler h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  watches_[fd] = Watch{std::move(h), events, next_generation_++};
  return true;
}

void BrokerLoop::modify(int fd, std::uint32_t events) {
  auto it = watches_.find(fd);
  if (it == watches_.end() || it->second.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) == 0) it->second.events = events;
}

void BrokerLoop::unwatch(int fd) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  // The handler may be running right now: destroy it after the turn.
  deferred_.push_back([h = std::move(it->second.handler)] {});
  watches_.erase(it);
}

BrokerLoop::TimerId BrokerLoop::schedule(base::MonoTime at, std::function<void()> fn) {
  TimerId id = next_timer_++;
  auto pos = timers_.emplace(at, id);
  timer_fns_.emplace(id, std::make_pair(pos, std::move(fn)));
  return id;
}

void BrokerLoop::cancel(TimerId id) {
  auto it = timer_fns_.find(id);
  if (it == timer_fns_.end()) return;
  timers_.erase(it->second.first);
  timer_fns_.erase(it);
}

void BrokerLoop::run() {
  while (!stopping_) run_once(base::Millis(60'000));
}

void BrokerLoop::run_once(base::Millis max_wait) {
  now_ = base::MonoClock::now();
  base::Millis wait = max_wait;
  if (!deferred_.empty()) wait = base::Millis(0);
  if (!timers_.empty()) {
    auto until = std::chrono::duration_cast<base::Millis>(timers_.begin()->first - now_) + base::Millis(1);
    if (until < wait) wait = until < base::Millis(0) ? base::Millis(0) : until;
  }
  std::array<epoll_event, 64> events{};
  int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                       static_cast<int>(wait.count()));
  now_ = base::MonoClock::now();
  // Remember each fd's generation first: a handler may close another fd of
  // this batch (and a new accept may reuse the number).
  std::array<std::uint64_t, 64> generations{};
  for (int i = 0; i < n; ++i) {
    auto it = watches_.find(events[static_cast<std::size_t>(i)].data.fd);
    generations[static_cast<std::size_t>(i)] = it == watches_.end() ? 0 : it->second.generation;
  }
  for (int i = 0; i < n; ++i) {
    auto idx = static_cast<std::size_t>(i);
    auto it = watches_.find(events[idx].data.fd);
    if (it == watches_.end() || it->second.generation != generations[idx]) continue;
    Handler h = it->second.handler;  // a copy: the handler may unwatch itself
    h(events[idx].events);
  }
  while (!timers_.empty() && timers_.begin()->first <= now_) {
    TimerId id = timers_.begin()->second;
    auto fn_it = timer_fns_.find(id);
    std::function<void()> fn = std::move(fn_it->second.second);
    timers_.erase(timers_.begin());
    timer_fns_.erase(fn_it);
    fn();
  }
  while (!deferred_.empty()) {
    auto work = std::move(deferred_);
    deferred_.clear();
    for (auto& fn : work) fn();
  }
}

}  // namespace abox::broker
