#include "engine/cli/control_request.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::engine {

namespace {

constexpr std::size_t kMaxReply = 1u << 20;
constexpr std::size_t kMaxPolicyText = 4u << 20;

bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

std::optional<std::string> ask_control_socket(const std::string& path, std::string_view line,
                                              std::string_view body, std::string& error,
                                              std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    error = path + ": the socket path is too long";
    return std::nullopt;
  }
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string request(line);
  request += '\n';
  if (!send_all(fd.get(), request) || !send_all(fd.get(), body)) {
    error = path + ": cannot send the request: " + std::strerror(errno);
    return std::nullopt;
  }
  ::shutdown(fd.get(), SHUT_WR);
  std::string reply;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = path + ": no answer: " + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
    if (reply.size() > kMaxReply) {
      error = path + ": the answer is larger than 1 MiB";
      return std::nullopt;
    }
  }
  if (reply.empty()) {
    error = path + ": closed without an answer";
    return std::nullopt;
  }
  return reply;
}

base::Result<std::string, std::string> read_policy_text(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return base::Err{std::string(std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return base::Err{std::string("not a regular file")};
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Err{std::string(std::strerror(errno))};
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxPolicyText) return base::Err{std::string("larger than 4 MiB")};
  }
}

ReloadReply parse_reload_reply(std::string_view reply) {
  ReloadReply r;
  if (reply.size() < 2 || reply[1] != '\n' || reply[0] < '0' || reply[0] > '9') {
    r.text = std::string(reply);
  } else {
    r.status = reply[0] - '0';
    r.text = std::string(reply.substr(2));
  }
  while (!r.text.empty() && r.text.back() == '\n') r.text.pop_back();
  return r;
}

}  // namespace abox::engine
