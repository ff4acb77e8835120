#include "engine/daemon/daemon_client.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/daemon/daemon_paths.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

base::UniqueFd connect_to(const std::string& path, int& error) {
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    error = errno;
    return {};
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof addr.sun_path - 1));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = errno;
    return {};
  }
  return fd;
}

// `abox daemon`, detached from this process and its terminal.
bool start_daemon(const DaemonPaths& paths) {
  pid_t first = ::fork();
  if (first < 0) return false;
  if (first == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    int null_fd = ::open("/dev/null", O_RDWR);
    int log = ::open(paths.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    if (null_fd < 0 || log < 0) ::_exit(1);
    ::dup2(null_fd, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close_range(3, ~0u, 0);
    ::signal(SIGPIPE, SIG_DFL);
    const char* argv[] = {"abox", "daemon", nullptr};
    ::execv("/proc/self/exe", const_cast<char**>(argv));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(first, &status, 0);
  return true;
}

}  // namespace

base::Result<DaemonClient, std::string> DaemonClient::connect(bool autostart, std::ostream& err) {
  // Only a client that may start the daemon makes its folder: one that asks
  // whether a daemon runs leaves the host as it found it.
  auto paths = autostart ? daemon_paths() : existing_daemon_paths();
  if (!paths.ok()) return base::Err{paths.error()};
  int error = 0;
  base::UniqueFd fd = connect_to(paths->socket, error);
  if (fd) return DaemonClient(std::move(fd));
  if (!autostart || (error != ENOENT && error != ECONNREFUSED))
    return base::Err{"cannot reach the daemon at " + paths->socket + ": " + std::strerror(error)};
  if (!start_daemon(*paths))
    return base::Err{std::string("cannot start the daemon: ") + std::strerror(errno)};
  err << "abox: the daemon was not running: started it (" << paths->socket << ", log " << paths->log << ")\n";
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fd = connect_to(paths->socket, error);
    if (fd) return DaemonClient(std::move(fd));
  }
  return base::Err{"started the daemon, but it did not answer at " + paths->socket + " within 10 s (see " +
                   paths->log + ")"};
}

base::Result<std::uint64_t, std::string> DaemonClient::send(std::string_view op, json::object fields) {
  std::uint64_t id = next_id_++;
  fields["v"] = 1;
  fields["id"] = id;
  fields["op"] = op;
  std::string line = json::serialize(fields);
  line.push_back('\n');
  std::size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::send(fd_.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::Err{std::string("the daemon went away: ") + std::strerror(errno)};
    done += static_cast<std::size_t>(n);
  }
  return id;
}

base::Result<json::object, std::string> DaemonClient::next(std::uint64_t id) {
  for (;;) {
    auto o = next_any();
    if (!o.ok()) return o;
    auto* rid = o->if_contains("id");
    std::uint64_t got = rid != nullptr && rid->is_number() ? rid->to_number<std::uint64_t>() : 0;
    if (got == id) return o;
  }
}

base::Result<json::object, std::string> DaemonClient::next_any() {
  auto nl = buffer_.find('\n');
  while (nl == std::string::npos) {
    if (buffer_.size() > kMaxReplyBytes) return base::Err{std::string("a reply longer than 64 MiB")};
    char buf[65536];
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::Err{std::string("the daemon closed the connection")};
    buffer_.append(buf, static_cast<std::size_t>(n));
    nl = buffer_.find('\n');
  }
  std::string line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  std::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) return base::Err{"the daemon sent something that is not a JSON object"};
  auto& o = v.get_object();
  auto* rid = o.if_contains("id");
  std::uint64_t got = rid != nullptr && rid->is_number() ? rid->to_number<std::uint64_t>() : 0;
  if (got == 0) {
    // A refusal of the connection itself (the peer check, the client bound).
    auto* e = o.if_contains("error");
    if (e != nullptr && e->is_string()) return base::Err{std::string(e->get_string())};
  }
  return std::move(o);
}

base::Result<json::object, std::string> DaemonClient::call(std::string_view op, json::object fields) {
  auto id = send(op, std::move(fields));
  if (!id.ok()) return base::Err{id.error()};
  auto reply = next(*id);
  if (!reply.ok()) return reply;
  auto* ok = reply->if_contains("ok");
  if (ok == nullptr || !ok->is_bool() || !ok->get_bool()) {
    auto* e = reply->if_contains("error");
    return base::Err{e != nullptr && e->is_string() ? std::string(e->get_string()) : std::string("refused")};
  }
  return reply;
}

}  // namespace abox::engine
