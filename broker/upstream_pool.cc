#include "broker/upstream_pool.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace abox::broker {

UpstreamPool::UpstreamPool(BrokerLoop& loop, std::size_t bindings) : loop_(loop), idle_(bindings) {}

UpstreamPool::~UpstreamPool() {
  for (auto& list : idle_) {
    for (auto& i : list) {
      loop_.unwatch(i.stream->fd());
      loop_.cancel(i.timer);
    }
  }
}

std::unique_ptr<TlsStream> UpstreamPool::take(std::size_t binding) {
  auto& list = idle_.at(binding);
  while (!list.empty()) {
    Idle i = std::move(list.back());
    list.pop_back();
    loop_.unwatch(i.stream->fd());
    loop_.cancel(i.timer);
    // The watch drops a connection that turned readable, but only when the
    // loop gets to that event: one that came in the same turn as the request
    // taking it is seen here. An idle connection has nothing to say.
    if (!quiet(i.stream->fd())) {
      loop_.defer([s = std::shared_ptr<TlsStream>(std::move(i.stream))] {});
      continue;
    }
    ++reused_;
    return std::move(i.stream);
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
  if (list.size() >= kPerBinding) drop(binding, list.front().serial);
  std::uint64_t serial = next_serial_++;
  int fd = stream->fd();
  // Anything readable on an idle connection is its end (or junk): drop it.
  if (!loop_.watch(fd, POLLIN, [this, binding, serial](std::uint32_t) { drop(binding, serial); })) return;
  Idle i;
  i.stream = std::move(stream);
  i.serial = serial;
  i.timer = loop_.schedule(loop_.now() + kIdleTimeout, [this, binding, serial] { drop(binding, serial); });
  list.push_back(std::move(i));
}

void UpstreamPool::drop(std::size_t binding, std::uint64_t serial) {
  auto& list = idle_.at(binding);
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->serial != serial) continue;
    loop_.unwatch(it->stream->fd());
    loop_.cancel(it->timer);
    // Closed after the turn: its own handler may be what called us.
    loop_.defer([s = std::shared_ptr<TlsStream>(std::move(it->stream))] {});
    list.erase(it);
    return;
  }
}

std::size_t UpstreamPool::idle() const {
  std::size_t n = 0;
  for (const auto& list : idle_) n += list.size();
  return n;
}

}  // namespace abox::broker
