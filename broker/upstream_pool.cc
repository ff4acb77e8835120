#include "broker/upstream_pool.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace abox::broker {

UpstreamPool::UpstreamPool(BrokerLoop& loop, std::size_t bindings) : loop_(loop), idle_(bindings) {}

UpstreamPool::~UpstreamPool() {
  for (auto& list : idle_) {
    for (auto& i : list) {
      loop_.unwatch(i->stream->fd());
      loop_.io().cancel(static_cast<io::EventLoop::Timer&>(*i));
    }
  }
}

std::unique_ptr<TlsStream> UpstreamPool::take(std::size_t binding) {
  auto& list = idle_.at(binding);
  while (!list.empty()) {
    std::unique_ptr<Idle> i = std::move(list.back());
    list.pop_back();
    loop_.io().cancel(static_cast<io::EventLoop::Timer&>(*i));
    // The watch drops a connection that turned readable, but only when the
    // loop gets to that event: one that came in the same turn as the request
    // taking it is seen here. An idle connection has nothing to say, in its
    // socket or read ahead of its TLS.
    if (i->stream->has_pending() || !quiet(i->stream->fd())) {
      loop_.unwatch(i->stream->fd());
      loop_.delete_later(std::move(i));
      continue;
    }
    ++reused_;
    std::unique_ptr<TlsStream> stream = std::move(i->stream);
    // Not inside its own timer (cancelled above), and its fd's handler,
    // which names it, is the taker's from now on: kept for the next give().
    if (spare_.size() < kPerBinding) spare_.push_back(std::move(i));
    return stream;
  }
  return nullptr;
}

bool UpstreamPool::quiet(int fd) {
  std::uint8_t byte = 0;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void UpstreamPool::give(std::size_t binding, std::unique_ptr<TlsStream> stream) {
  auto& list = idle_.at(binding);
  if (list.size() >= kPerBinding) drop(*list.front());
  std::unique_ptr<Idle> i;
  if (!spare_.empty()) {
    i = std::move(spare_.back());
    spare_.pop_back();
  } else {
    i = std::make_unique<Idle>(*this);
  }
  i->binding = binding;
  i->stream = std::move(stream);
  const int fd = i->stream->fd();
  auto on_ready = [this, idle = i.get()](std::uint32_t) { drop(*idle); };
  if (loop_.hand_over(fd, on_ready)) {
    loop_.modify(fd, POLLIN);
  } else if (!loop_.watch(fd, POLLIN, on_ready)) {
    return;  // cannot happen (not watched, then watched): the stream closes
  }
  loop_.io().schedule(*i, loop_.now() + kIdleTimeout);
  list.push_back(std::move(i));
}

void UpstreamPool::drop(Idle& idle) {
  auto& list = idle_.at(idle.binding);
  auto it = std::find_if(list.begin(), list.end(), [&idle](const auto& i) { return i.get() == &idle; });
  if (it == list.end()) return;
  loop_.unwatch(idle.stream->fd());
  loop_.io().cancel(static_cast<io::EventLoop::Timer&>(idle));
  loop_.delete_later(std::move(*it));
  list.erase(it);
}

std::size_t UpstreamPool::idle() const {
  std::size_t n = 0;
  for (const auto& list : idle_) n += list.size();
  return n;
}

}  // namespace abox::broker
