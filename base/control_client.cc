#include "base/control_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "base/control_protocol.h"
#include "base/unique_fd.h"

namespace abox::base {

namespace {

constexpr std::size_t kMaxReply = 1u << 20;

bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// The first byte of bytes with fd attached, then the rest.
bool send_all_with_fd(int sock, std::string_view bytes, int fd) {
  if (fd < 0 || bytes.empty()) return send_all(sock, bytes);
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<char*>(bytes.data()), 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return false;
    break;
  }
  return send_all(sock, bytes.substr(1));
}

}  // namespace

std::optional<std::string> ask_control_socket(const std::string& path, std::string_view line,
                                              std::string_view body, std::string& error,
                                              std::chrono::milliseconds timeout, int pass_fd) {
  return ask_unix_socket(path, versioned_control_line(line), body, error, timeout, pass_fd);
}

UniqueFd connect_unix_socket(const std::string& path, std::string& error, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    error = "the socket path must be 1 to " + std::to_string(sizeof addr.sun_path - 1) + " bytes";
    return UniqueFd();
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    error = std::string("socket: ") + std::strerror(errno);
    return UniqueFd();
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == ECONNREFUSED) {
      // The socket file is there but nobody listens: a sandboxed server
      // leaves it behind when it exits (its sandbox forbids unlink).
      error = "nothing is running at " + path + " (a socket left by a process that has exited)";
    } else if (errno == ENOENT) {
      error = "no socket at " + path;
    } else {
      error = "cannot connect to " + path + ": " + std::strerror(errno);
    }
    return UniqueFd();
  }
  return fd;
}

std::optional<std::string> ask_unix_socket(const std::string& path, std::string_view line,
                                           std::string_view body, std::string& error,
                                           std::chrono::milliseconds timeout, int pass_fd) {
  UniqueFd fd = connect_unix_socket(path, error, timeout);
  if (!fd) return std::nullopt;
  std::string request(line);
  request += '\n';
  // A peer that answers without reading may have closed already (EPIPE):
  // its answer is still there to read, and is judged as any other.
  std::string send_error;
  if (!send_all_with_fd(fd.get(), request, pass_fd) || !send_all(fd.get(), body))
    send_error = "writing to " + path + ": " + std::strerror(errno);
  // The half-close ends the body (the broker waits for it even with none).
  ::shutdown(fd.get(), SHUT_WR);
  std::string reply;
  std::array<char, 16384> buf{};
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET && !reply.empty()) break;  // it answered, then closed on our unread request
      error = (errno == EAGAIN || errno == EWOULDBLOCK)
                  ? "no answer from " + path + " within " + std::to_string(timeout.count() / 1000) + " s"
                  : "reading " + path + ": " + std::strerror(errno);
      return std::nullopt;
    }
    if (reply.size() + static_cast<std::size_t>(n) > kMaxReply) {
      error = "the answer from " + path + " is larger than 1 MiB";
      return std::nullopt;
    }
    reply.append(buf.data(), static_cast<std::size_t>(n));
  }
  if (reply.empty()) {
    error = send_error.empty() ? path + ": closed without an answer" : send_error;
    return std::nullopt;
  }
  return reply;
}

}  // namespace abox::base
