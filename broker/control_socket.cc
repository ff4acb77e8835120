// The broker's control socket. How this works: each accepted connection is
// a Pending (its fd, the bytes so far, a deadline timer) watched for input;
// at the end of its stream the request is split at its first newline and
// answered by the service's function, the reply written once
// (non-blocking: a few KiB always fit), and the connection closed. See
// control_socket.h for the protocol and bounds.
#include "broker/control_socket.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "base/byte_reader.h"
#include "base/control_protocol.h"
#include "io/unix_listener.h"

namespace abox::broker {

base::Result<std::unique_ptr<BrokerControlSocket>, std::string> BrokerControlSocket::create(
    BrokerLoop& loop, const std::string& path, Answer answer) {
  auto fd = io::listen_unix(path, 16, "control socket");
  if (!fd.ok()) return base::Err{std::move(fd).error()};
  std::unique_ptr<BrokerControlSocket> s(
      new BrokerControlSocket(loop, std::move(fd).value(), std::move(answer)));
  BrokerControlSocket* raw = s.get();
  if (!loop.watch(raw->listener_.get(), POLLIN, [raw](std::uint32_t) { raw->on_accept(); }))
    return base::Err{path + ": cannot watch the control socket"};
  return s;
}

BrokerControlSocket::BrokerControlSocket(BrokerLoop& loop, base::UniqueFd listener, Answer answer)
    : loop_(loop), listener_(std::move(listener)), answer_(std::move(answer)) {}

BrokerControlSocket::~BrokerControlSocket() {
  for (auto& [fd, p] : pending_) {
    loop_.unwatch(fd);
    loop_.cancel(p->deadline);
  }
  if (listener_) loop_.unwatch(listener_.get());
}

void BrokerControlSocket::on_accept() {
  for (std::size_t i = 0; i < kMaxPending; ++i) {
    base::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) return;                             // EAGAIN, or an error the next turn sees again
    if (pending_.size() >= kMaxPending) continue;  // closed: busy
    const int fd = conn.get();
    auto p = std::make_unique<Pending>();
    p->fd = std::move(conn);
    if (!loop_.watch(fd, POLLIN, [this, fd](std::uint32_t) { on_readable(fd); })) continue;
    p->deadline = loop_.schedule(loop_.now() + kRequestDeadline, [this, fd] {
      auto it = pending_.find(fd);
      if (it != pending_.end()) it->second->deadline = 0;
      finish(fd, "");
    });
    pending_.emplace(fd, std::move(p));
  }
}

void BrokerControlSocket::on_readable(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  Pending& p = *it->second;
  char buf[65536];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return finish(fd, "");  // broken: dropped
  }
  if (n > 0) {
    p.bytes.append(buf, static_cast<std::size_t>(n));
    const auto nl = p.bytes.find('\n');
    if (nl == std::string::npos && p.bytes.size() > kMaxRequestLine)
      return finish(fd, "1\nthe request line is longer than 1024 bytes");
    if (nl != std::string::npos && p.bytes.size() - nl - 1 > kMaxPolicyBytes)
      return finish(fd, "1\nthe policy is larger than 4 MiB: nothing changed");
    return;  // level-triggered: called again while there is more
  }
  // The end of the stream: the whole request is here.
  auto request = parse_control_request(p.bytes);
  if (!request.ok())
    return finish(fd, std::to_string(request.error().status) + "\n" + request.error().message);
  const std::string reply = answer_(request->line, request->body);
  finish(fd, reply);
}

base::Result<ControlRequest, ControlRequestError> BrokerControlSocket::parse_control_request(
    std::string_view bytes) {
  auto refuse = [](int status, std::string message) {
    return base::Err{ControlRequestError{status, std::move(message)}};
  };
  // The line: up to the first newline, which must come within the bound.
  base::ByteReader r(base::as_bytes(bytes));
  std::size_t line_end = 0;
  bool newline = false;
  while (auto c = r.u8()) {
    if (*c == '\n') {
      newline = true;
      break;
    }
    if (++line_end > kMaxRequestLine) return refuse(1, "the request line is longer than 1024 bytes");
  }
  std::string_view line = bytes.substr(0, line_end);
  const std::string_view body = newline ? bytes.substr(line_end + 1) : std::string_view();
  if (body.size() > kMaxPolicyBytes) return refuse(1, "the policy is larger than 4 MiB: nothing changed");
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  for (const char c : line) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return refuse(3, "the request line holds a control byte");
  }
  auto unversioned = base::control_request_line(line);
  if (!unversioned.ok()) return refuse(3, unversioned.error().message);
  line = *unversioned;
  if (line == "stats") {
    if (!body.empty()) {
      return refuse(
          3, "one request per connection: " + std::to_string(body.size()) + " bytes came after 'stats'");
    }
    return ControlRequest{line, body};
  }
  if (line == "reload" || (line.starts_with("reload ") && line.size() > 7)) return ControlRequest{line, body};
  return refuse(3, "unknown request (expected 'stats' or 'reload SOURCE')");
}

void BrokerControlSocket::finish(int fd, std::string_view reply) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  if (!reply.empty()) {
    std::string out(reply);
    out += '\n';
    (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ++served_;
  }
  loop_.unwatch(fd);
  if (it->second->deadline != 0) loop_.cancel(it->second->deadline);
  pending_.erase(it);  // closes fd
}

}  // namespace abox::broker
