#include "netstack/program/stats_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/control_protocol.h"
#include "base/json.h"
#include "io/unix_listener.h"

namespace abox::netstack {

namespace {

std::string error_reply(std::string_view message) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object().field("error", message).end_object();
  return js;
}

}  // namespace

base::Result<std::unique_ptr<StatsServer>, std::string> StatsServer::create(io::EventLoop& loop,
                                                                            const std::string& path,
                                                                            RenderStats render_stats,
                                                                            AnswerExplain answer_explain,
                                                                            ApplyPolicy apply_policy) {
  auto fd = io::listen_unix(path, 16, "stats socket");
  if (!fd.ok()) return base::Err{std::move(fd).error()};
  return std::unique_ptr<StatsServer>(new StatsServer(loop, std::move(fd).value(), std::move(render_stats),
                                                      std::move(answer_explain), std::move(apply_policy)));
}

StatsServer::StatsServer(io::EventLoop& loop, base::UniqueFd listener, RenderStats render_stats,
                         AnswerExplain answer_explain, ApplyPolicy apply_policy)
    : loop_(loop),
      listener_(std::move(listener)),
      render_stats_(std::move(render_stats)),
      answer_explain_(std::move(answer_explain)),
      apply_policy_(std::move(apply_policy)) {
  handle_ = loop_.watch(listener_.get(), POLLIN, this);
}

StatsServer::~StatsServer() {
  for (auto& w : waiting_) {
    if (w->handle != io::EventLoop::kNoHandle) loop_.unwatch(w->handle);
  }
  if (handle_ != io::EventLoop::kNoHandle) loop_.unwatch(handle_);
}

namespace {

// "reload SOURCE": its text follows the line, to the end of the stream.
bool is_reload_line(std::string_view line) {
  return line == "reload" || line.starts_with("reload ");
}

// recv() that also takes the fds a client sent (SCM_RIGHTS): the first is
// kept in `passed` (a reload's policy file), any other is closed at once.
ssize_t receive(int fd, char* buf, std::size_t size, base::UniqueFd& passed) {
  iovec iov{buf, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      base::UniqueFd owned(got);
      if (!passed) passed = std::move(owned);
    }
  }
  return n;
}

}  // namespace

bool StatsServer::read_request(int fd, std::string& request, base::UniqueFd& passed) {
  char buf[16384];
  for (;;) {
    const ssize_t n = receive(fd, buf, sizeof buf, passed);
    if (n == 0) {
      // The client sent all it will: an empty request is a stats request;
      // one without a newline is its line (its version checked here).
      if (request.find('\n') == std::string::npos) {
        auto line = base::control_request_line(request);
        if (!line.ok()) {
          ++counters_.bad_requests;
          const std::string r = "3\n" + line.error().message + "\n";
          ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          return true;
        }
        request.erase(0, request.size() - line->size());
      }
      reply(fd, request, std::move(passed));
      return true;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno != EAGAIN && errno != EWOULDBLOCK;  // broken: drop it
    }
    request.append(buf, static_cast<std::size_t>(n));
    if (auto nl = request.find('\n'); nl != std::string::npos) {
      // The protocol's version first (base/control_protocol.h): dropped from
      // the request once checked, so what follows reads a versionless line.
      auto line = base::control_request_line(std::string_view(request).substr(0, nl));
      if (!line.ok()) {
        ++counters_.bad_requests;
        const std::string r = "3\n" + line.error().message + "\n";
        ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        return true;
      }
      request.erase(0, nl - line->size());
    }
    if (auto nl = request.find('\n'); nl != std::string::npos && is_reload_line(request.substr(0, nl))) {
      if (request.size() - nl - 1 <= kMaxReloadBytes) continue;  // the policy's text, to the end
      ++counters_.bad_requests;
      std::string r = "1\nthe policy is larger than 4 MiB; nothing changed\n";
      ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return true;
    }
    if (auto nl = request.find('\n'); nl != std::string::npos) {
      request.resize(nl);
      if (!request.empty() && request.back() == '\r') request.pop_back();
      reply(fd, request, std::move(passed));
      return true;
    }
    if (request.size() > kMaxRequest) {
      ++counters_.bad_requests;
      std::string r = error_reply("the request is longer than 1024 bytes") + "\n";
      ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return true;
    }
  }
}

void StatsServer::reply(int fd, std::string_view request, base::UniqueFd passed) {
  std::string out;
  if (request.empty() || request == "stats") {
    out = render_stats_();
  } else if (request == "explain" || request.starts_with("explain ")) {
    std::string_view args = request.substr(std::min<std::size_t>(request.size(), 8));
    out = answer_explain_
              ? answer_explain_(args)
              : error_reply("this abox-net admits no flows (abox-net dns): ask an 'abox-net run'");
  } else if (auto nl = request.find('\n');
             nl != std::string_view::npos && is_reload_line(request.substr(0, nl))) {
    std::string_view line = request.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view source = line.substr(std::min<std::size_t>(line.size(), 7));
    out = apply_policy_ ? apply_policy_(source.empty() ? std::string_view("<reload>") : source,
                                        request.substr(nl + 1), std::move(passed))
                        : "3\nthis abox-net has no policy to reload (abox-net dns)";
  } else {
    ++counters_.bad_requests;
    out = error_reply("unknown request (expected 'stats', 'explain TARGET' or 'reload SOURCE')");
  }
  out += '\n';
  const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(out.size())) ++counters_.replies_cut;
  ++counters_.served;
}

void StatsServer::finish(Waiting& w) {
  if (w.handle != io::EventLoop::kNoHandle) loop_.unwatch(w.handle);
  w.handle = io::EventLoop::kNoHandle;
  w.fd.reset();
  w.passed.reset();
  w.done = true;
}

void StatsServer::Waiting::on_ready(std::uint32_t) {
  if (done) return;
  if (server->read_request(fd.get(), request, passed)) server->finish(*this);
}

void StatsServer::sweep(base::MonoTime now) {
  for (auto& w : waiting_) {
    if (!w->done && now >= w->deadline) {
      ++counters_.timed_out;
      finish(*w);
    }
  }
  std::erase_if(waiting_, [](const std::unique_ptr<Waiting>& w) { return w->done; });
}

void StatsServer::on_ready(std::uint32_t) {
  sweep(loop_.now());
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    base::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ++counters_.accept_errors;  // EMFILE and the like: try again next turn
      return;
    }
    // Usually the request is already there: answered at once.
    std::string request;
    base::UniqueFd passed;
    if (read_request(conn.get(), request, passed)) continue;
    if (waiting_.size() >= kMaxWaiting) {
      ++counters_.refused_busy;
      continue;  // closed
    }
    auto w = std::make_unique<Waiting>();
    w->server = this;
    w->fd = std::move(conn);
    w->request = std::move(request);
    w->passed = std::move(passed);
    w->deadline = loop_.now() + kRequestDeadline;
    w->handle = loop_.watch(w->fd.get(), POLLIN, w.get());
    waiting_.push_back(std::move(w));
  }
  // More may be waiting: come back next turn instead of starving the guest.
  loop_.wake_next_turn(handle_);
}

}  // namespace abox::netstack
