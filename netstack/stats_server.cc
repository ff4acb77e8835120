#include "netstack/stats_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::netstack {

namespace {

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

base::Result<std::unique_ptr<StatsServer>, std::string> StatsServer::create(
    EventLoop& loop, const std::string& path, std::function<std::string()> render) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return base::Err{"the stats socket path must be 1 to " + std::to_string(sizeof addr.sun_path - 1) +
                     " bytes"};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return base::Err{path + " exists and is not a socket; not replacing it"};
    // A live abox-net still answering there is not ours to take over.
    base::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      return base::Err{path + " is in use by a running process"};
    }
    if (::unlink(path.c_str()) != 0) return base::Err{errno_text("cannot remove the stale socket", path)};
  }

  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return base::Err{errno_text("cannot make a socket for", path)};
  // The socket file's mode comes from the umask at bind(): no moment where
  // others could connect. chmod afterwards in case the filesystem ignores it.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    errno = bind_errno;
    return base::Err{errno_text("cannot bind", path)};
  }
  if (::chmod(path.c_str(), 0600) != 0) return base::Err{errno_text("cannot chmod", path)};
  if (::listen(fd.get(), 16) != 0) return base::Err{errno_text("cannot listen on", path)};
  return std::unique_ptr<StatsServer>(new StatsServer(loop, std::move(fd), std::move(render)));
}

StatsServer::StatsServer(EventLoop& loop, base::UniqueFd listener, std::function<std::string()> render)
    : loop_(loop), listener_(std::move(listener)), render_(std::move(render)) {
  handle_ = loop_.watch(listener_.get(), POLLIN, this);
}

StatsServer::~StatsServer() {
  if (handle_ != EventLoop::kNoHandle) loop_.unwatch(handle_);
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
