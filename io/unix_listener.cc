#include "io/unix_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::io {

namespace {

using base::Err;

std::string errno_text(int err) {
  return std::strerror(err);
}

// Removes a stale socket file at path; ok when the path is free afterwards.
base::Result<void, std::string> clear_stale(const std::string& path, const sockaddr_un& addr,
                                            std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return Err{"cannot look at " + path + ": " + errno_text(errno)};
  }
  if (!S_ISSOCK(st.st_mode)) return Err{std::string(what) + " path " + path + " exists and is not a socket"};
  base::UniqueFd probe(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) return Err{"cannot create a unix socket: " + errno_text(errno)};
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 ||
      errno == EPROTOTYPE) {
    return Err{"something is already listening on " + path};
  }
  if (errno != ECONNREFUSED) return Err{"cannot check the socket at " + path + ": " + errno_text(errno)};
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Err{"cannot remove the stale socket " + path + ": " + errno_text(errno)};
  }
  return {};
}

}  // namespace

base::Result<base::UniqueFd, std::string> listen_unix(const std::string& path, int backlog,
                                                      std::string_view what) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty()) return Err{std::string(what) + " path is empty"};
  if (path.size() >= sizeof addr.sun_path) {
    return Err{std::string(what) + " path " + path + " is longer than " +
               std::to_string(sizeof addr.sun_path - 1) + " bytes"};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (auto cleared = clear_stale(path, addr, what); !cleared.ok()) return Err{std::move(cleared).error()};

  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return Err{"cannot create a unix socket: " + errno_text(errno)};
  // bind() creates the file with the umask's mode: 0600 from the start, so
  // there is no moment where others could connect.
  const mode_t old_umask = ::umask(0177);
  const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0)
    return Err{"cannot bind the " + std::string(what) + " " + path + ": " + errno_text(bind_errno)};
  // From here the file is ours: a failure removes it again.
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), backlog) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return Err{"cannot listen on the " + std::string(what) + " " + path + ": " + errno_text(err)};
  }
  return fd;
}

}  // namespace abox::io
