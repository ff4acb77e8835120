#include "helper/client.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/byte_reader.h"

namespace abox::helper {

namespace {

base::Err<HelperError> unreachable(std::string message) {
  return base::Err{HelperError{HelperError::Kind::kUnreachable, ErrorCode::kSystem, std::move(message)}};
}
base::Err<HelperError> refused(const WireError& e) {
  return base::Err{HelperError{HelperError::Kind::kRefused, e.code, e.message}};
}

base::Result<void, HelperError> check_limits(const CgroupLimits& l) {
  // The same checks the helper makes, by formatting and parsing the request.
  const std::string text = format_request(CgroupCreateRequest{"x", l});
  auto parsed = parse_request(base::as_bytes(text), 0);
  if (!parsed.ok()) return refused(parsed.error());
  return {};
}

}  // namespace

std::string HelperError::to_string() const {
  switch (kind) {
    case Kind::kUnreachable:
      return "helper unreachable: " + message;
    case Kind::kProtocol:
      return "helper protocol error: " + message;
    case Kind::kRefused:
      break;
  }
  return "helper: " + std::string(code_name(code)) + ": " + message;
}

std::string helper_socket_path(uid_t uid) {
  if (const char* env = std::getenv("ABOX_HELPER_SOCKET"); env != nullptr && *env != '\0') return env;
  return "/run/abox/helper-" + std::to_string(uid) + ".sock";
}

base::Result<HelperClient, HelperError> HelperClient::connect(const std::string& socket_path,
                                                              std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return unreachable("socket path '" + socket_path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return unreachable(std::string("socket: ") + std::strerror(errno));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return unreachable(socket_path + ": " + std::strerror(errno));
  }
  return HelperClient(std::move(fd));
}

base::Result<Reply, HelperError> HelperClient::exchange_raw(std::string_view bytes,
                                                            std::span<const int> fds) {
  if (!fd_) return unreachable("the connection is closed");
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  int recv_flags = 0;
  if (::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    const int err = errno;
    if (err != EPIPE && err != ECONNRESET) {
      fd_.reset();
      return unreachable(std::string("sending: ") + std::strerror(err));
    }
    // The helper answered and closed before our request arrived (it refuses
    // a peer that is not the operator at once): its reply is still queued.
    recv_flags = MSG_DONTWAIT;
  }
  std::uint8_t buf[kMaxMessage + 1];
  ssize_t n;
  do {
    n = ::recv(fd_.get(), buf, sizeof(buf), recv_flags);
  } while (n < 0 && errno == EINTR);
  // A helper that closed with our request unread makes the kernel report
  // ECONNRESET first; a reply it sent before closing is still queued behind it.
  if (n < 0 && errno == ECONNRESET) n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
  if (n <= 0) {
    const int err = errno;
    fd_.reset();
    return unreachable(n == 0 ? std::string("the helper closed the connection") : std::strerror(err));
  }
  auto reply = parse_reply(std::span<const std::uint8_t>(buf, static_cast<std::size_t>(n)));
  if (!reply.ok()) {
    fd_.reset();
    return base::Err{HelperError{HelperError::Kind::kProtocol, ErrorCode::kSystem, reply.error()}};
  }
  return std::move(*reply);
}

base::Result<void, HelperError> HelperClient::call(const Request& request, std::span<const int> fds,
                                                   std::string* ok_text) {
  auto reply = exchange_raw(format_request(request), fds);
  if (!reply.ok()) return base::Err{reply.error()};
  if (!reply->ok) return refused(WireError{reply->code, reply->text});
  if (ok_text != nullptr) *ok_text = reply->text;
  return {};
}

base::Result<HelloInfo, HelperError> HelperClient::hello() {
  std::string text;
  if (auto r = call(HelloRequest{}, {}, &text); !r.ok()) return base::Err{r.error()};
  HelloInfo info;
  info.cgroups = text.find("cgroups=available") != std::string::npos;
  return info;
}

base::Result<void, HelperError> HelperClient::create_cgroup(std::string_view instance,
                                                            const CgroupLimits& limits) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return refused(ok.error());
  if (auto ok = check_limits(limits); !ok.ok()) return ok;
  return call(CgroupCreateRequest{std::string(instance), limits}, {}, nullptr);
}

base::Result<void, HelperError> HelperClient::move_into_cgroup(std::string_view instance,
                                                               std::span<const pid_t> pids) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return refused(ok.error());
  CgroupMoveRequest r{std::string(instance), std::vector<pid_t>(pids.begin(), pids.end())};
  if (pids.empty()) return refused({ErrorCode::kBadField, "pids: give at least one"});
  // Range, count and repeats: the helper's own parse of what would be sent.
  if (auto parsed = parse_request(base::as_bytes(format_request(r)), 0); !parsed.ok()) {
    return refused(parsed.error());
  }
  return call(r, {}, nullptr);
}

base::Result<void, HelperError> HelperClient::delete_cgroup(std::string_view instance) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return refused(ok.error());
  return call(CgroupDeleteRequest{std::string(instance)}, {}, nullptr);
}

base::Result<void, HelperError> HelperClient::create_tap(std::string_view tap, int netns_fd) {
  if (auto ok = check_tap_name(tap); !ok.ok()) return refused(ok.error());
  const int fds[] = {netns_fd};
  return call(TapCreateRequest{std::string(tap)}, fds, nullptr);
}

base::Result<void, HelperError> HelperClient::delete_tap(std::string_view tap, int netns_fd) {
  if (auto ok = check_tap_name(tap); !ok.ok()) return refused(ok.error());
  const int fds[] = {netns_fd};
  return call(TapDeleteRequest{std::string(tap)}, fds, nullptr);
}

}  // namespace abox::helper
