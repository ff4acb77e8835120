#include "helper/server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "helper/tap_devices.h"

namespace abox::helper {

namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

void log_line(const std::string& line) {
  std::fprintf(stderr, "abox-helper: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string peer_text(const Peer& p) {
  return "pid " + std::to_string(p.pid) + " uid " + std::to_string(p.uid);
}

// false when the reply could not be handed to the kernel at once.
bool send_reply(int fd, const Reply& reply) {
  const std::string text = format_reply(reply);
  return ::send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(text.size());
}

Reply error_reply(const WireError& e) {
  return Reply{false, e.code, e.message};
}

base::Result<sockaddr_un, std::string> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return base::Err{"socket path '" + path + "': 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
                     " bytes"};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Whether something answers on the socket at addr.
bool socket_is_live(const sockaddr_un& addr) {
  base::UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  return probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

}  // namespace

base::Result<std::unique_ptr<HelperServer>, std::string> HelperServer::create(HelperConfig config) {
  if (config.operator_uid == 0) return base::Err{std::string("the operator must not be root (uid 0)")};
  auto addr = unix_address(config.socket_path);
  if (!addr.ok()) return base::Err{addr.error()};
  std::unique_ptr<HelperServer> s(new HelperServer(std::move(config)));
  const std::string& path = s->config_.socket_path;

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return base::Err{path + " exists and is not a socket: remove it or give another --socket"};
    if (socket_is_live(*addr)) return base::Err{"another abox-helper already listens on " + path};
    if (::unlink(path.c_str()) != 0) return base::Err{errno_text("removing the stale socket " + path)};
  }
  // Bound under a temporary name, made 0600 (umask), then opened to the
  // operator's group, listening, and only then renamed into place: the
  // socket is never reachable by anyone else, and a client that sees it can
  // connect.
  const std::string temp = path + ".new";
  auto temp_addr = unix_address(temp);
  if (!temp_addr.ok()) return base::Err{temp_addr.error()};
  ::unlink(temp.c_str());
  s->listener_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s->listener_) return base::Err{errno_text("socket")};
  const mode_t old_umask = ::umask(0177);
  const int bound =
      ::bind(s->listener_.get(), reinterpret_cast<const sockaddr*>(&*temp_addr), sizeof(*temp_addr));
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) {
    errno = bind_errno;
    return base::Err{errno_text("bind " + temp)};
  }
  auto give_up = [&](const std::string& what) -> base::Result<std::unique_ptr<HelperServer>, std::string> {
    auto e = errno_text(what);
    ::unlink(temp.c_str());
    return base::Err{e};
  };
  if (::chown(temp.c_str(), 0, s->config_.operator_gid) != 0 || ::chmod(temp.c_str(), 0660) != 0) {
    return give_up("setting the owner and mode of " + temp);
  }
  if (::listen(s->listener_.get(), 16) != 0) return give_up("listen");

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  s->signals_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!s->signals_) return give_up("signalfd");

  if (s->config_.cgroup_root.empty()) {
    s->cgroup_problem_ = "no cgroup root was given (--cgroup-root)";
  } else {
    auto tree = CgroupTree::open(s->config_.cgroup_root);
    if (tree.ok()) {
      s->cgroups_.emplace(std::move(*tree));
    } else {
      s->cgroup_problem_ = tree.error();
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return give_up("renaming " + temp + " to " + path);
  if (::lstat(path.c_str(), &st) != 0) return base::Err{errno_text(path)};
  s->socket_inode_ = st.st_ino;
  log_line("listening on " + path + " for uid " + std::to_string(s->config_.operator_uid) + " (group " +
           std::to_string(s->config_.operator_gid) + ")");
  if (s->cgroups_) {
    log_line("cgroups under " + s->cgroups_->root());
  } else {
    log_line("cgroup operations unavailable: " + s->cgroup_problem_);
  }
  return s;
}

HelperServer::~HelperServer() {
  struct stat st {};
  if (!config_.socket_path.empty() && ::lstat(config_.socket_path.c_str(), &st) == 0 &&
      st.st_ino == socket_inode_) {
    ::unlink(config_.socket_path.c_str());
  }
  if (cgroups_) cgroups_->remove_root_if_empty();
}

Reply HelperServer::handle(const Request& request, std::vector<base::UniqueFd>& fds) {
  const uid_t op = config_.operator_uid;
  base::Result<void, WireError> done;
  if (std::holds_alternative<HelloRequest>(request)) {
    return Reply{true, ErrorCode::kSystem,
                 std::string("version=1 cgroups=") + (cgroups_ ? "available" : "unavailable")};
  }
  const bool cgroup_op = std::holds_alternative<CgroupCreateRequest>(request) ||
                         std::holds_alternative<CgroupMoveRequest>(request) ||
                         std::holds_alternative<CgroupDeleteRequest>(request);
  if (cgroup_op && !cgroups_) return Reply{false, ErrorCode::kUnavailable, cgroup_problem_};
  if (const auto* c = std::get_if<CgroupCreateRequest>(&request)) {
    done = cgroups_->create(c->instance, c->limits);
  } else if (const auto* m = std::get_if<CgroupMoveRequest>(&request)) {
    done = cgroups_->move(m->instance, m->pids, op);
  } else if (const auto* d = std::get_if<CgroupDeleteRequest>(&request)) {
    done = cgroups_->remove(d->instance);
  } else if (const auto* tc = std::get_if<TapCreateRequest>(&request)) {
    done = create_tap(tc->tap, fds.at(0).get(), op);
  } else if (const auto* td = std::get_if<TapDeleteRequest>(&request)) {
    done = remove_tap(td->tap, fds.at(0).get(), op);
  }
  if (!done.ok()) return error_reply(done.error());
  return Reply{};
}

void HelperServer::run() {
  std::vector<pollfd> polls;
  while (true) {
    polls.clear();
    polls.push_back({signals_.get(), POLLIN, 0});
    polls.push_back({listener_.get(), POLLIN, 0});
    for (const auto& c : clients_) polls.push_back({c.fd.get(), POLLIN, 0});
    if (::poll(polls.data(), polls.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log_line(errno_text("poll"));
      return;
    }
    if (polls[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(signals_.get(), &info, sizeof(info)) == sizeof(info)) {
        log_line("stopping (signal " + std::to_string(info.ssi_signo) + ")");
        return;
      }
    }
    // Clients first, in reverse so that removing one keeps the others' indexes.
    for (std::size_t i = clients_.size(); i-- > 0;) {
      const short ev = polls[2 + i].revents;
      if (ev == 0) continue;
      if (!serve_one(clients_[i])) clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (polls[1].revents != 0) accept_clients();
  }
}

void HelperServer::accept_clients() {
  while (true) {
    base::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) log_line(errno_text("accept"));
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
      log_line(errno_text("SO_PEERCRED"));
      continue;
    }
    Peer peer{cred.pid, cred.uid, cred.gid};
    if (peer.uid != config_.operator_uid) {
      log_line("refused " + peer_text(peer) + ": not the operator (uid " +
               std::to_string(config_.operator_uid) + ")");
      send_reply(fd.get(), Reply{false, ErrorCode::kNotPermitted,
                                 "uid " + std::to_string(peer.uid) + " is not this helper's operator"});
      continue;
    }
    if (clients_.size() >= kMaxClients) {
      log_line("refused " + peer_text(peer) + ": " + std::to_string(kMaxClients) + " connections are open");
      send_reply(fd.get(), Reply{false, ErrorCode::kLimit,
                                 std::to_string(kMaxClients) + " connections are open already"});
      continue;
    }
    clients_.push_back(Client{std::move(fd), peer});
  }
}

bool HelperServer::serve_one(Client& client) {
  std::uint8_t buf[kMaxMessage + 1];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(client.fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  // Every fd that came is owned here first, whatever happens next.
  std::vector<base::UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t k = 0; k < count; ++k) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (n == 0 && fds.empty()) return false;  // the client closed

  Reply reply;
  std::string what;
  if ((msg.msg_flags & MSG_TRUNC) != 0 || static_cast<std::size_t>(n) > kMaxMessage) {
    reply =
        error_reply({ErrorCode::kMalformed, "message longer than " + std::to_string(kMaxMessage) + " bytes"});
    what = "(too long)";
  } else if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    reply =
        error_reply({ErrorCode::kMalformed, "more than " + std::to_string(kMaxFds) + " fds came with it"});
    what = "(too many fds)";
  } else {
    auto request = parse_request(std::span<const std::uint8_t>(buf, static_cast<std::size_t>(n)), fds.size());
    if (!request.ok()) {
      reply = error_reply(request.error());
      what = "(refused request)";
    } else {
      what = format_request(*request);
      what.pop_back();  // its LF
      what.erase(0, kWireVersion.size() + 1);
      reply = handle(*request, fds);
    }
  }
  log_line(peer_text(client.peer) + ": " + what + ": " +
           (reply.ok ? std::string("ok") : std::string(code_name(reply.code)) + ": " + reply.text));
  if (!send_reply(client.fd.get(), reply)) {
    log_line(peer_text(client.peer) + ": does not read its replies: disconnected");
    return false;
  }
  return true;
}

}  // namespace abox::helper
