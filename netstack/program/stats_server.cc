#include "netstack/program/stats_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "io/unix_listener.h"

namespace abox::netstack {

base::Result<std::unique_ptr<StatsServer>, std::string> StatsServer::create(
    io::EventLoop& loop, const std::string& path, std::function<std::string()> render) {
  auto fd = io::listen_unix(path, 16, "stats socket");
  if (!fd.ok()) return base::Err{std::move(fd).error()};
  return std::unique_ptr<StatsServer>(new StatsServer(loop, std::move(fd).value(), std::move(render)));
}

StatsServer::StatsServer(io::EventLoop& loop, base::UniqueFd listener, std::function<std::string()> render)
    : loop_(loop), listener_(std::move(listener)), render_(std::move(render)) {
  handle_ = loop_.watch(listener_.get(), POLLIN, this);
}

StatsServer::~StatsServer() {
  if (handle_ != io::EventLoop::kNoHandle) loop_.unwatch(handle_);
}

void StatsServer::on_ready(std::uint32_t) {
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    base::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ++counters_.accept_errors;  // EMFILE and the like: try again next turn
      return;
    }
    std::string reply = render_();
    reply += '\n';
    const ssize_t n = ::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(reply.size())) ++counters_.replies_cut;
    ++counters_.served;
  }
  // More may be waiting: come back next turn instead of starving the guest.
  loop_.wake_next_turn(handle_);
}

}  // namespace abox::netstack
