#include "engine/daemon/daemon_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace abox::engine {

std::string daemon_runtime_dir() {
  std::string uid = std::to_string(::getuid());
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/abox";
  if (::stat(("/run/user/" + uid).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return "/run/user/" + uid + "/abox";
  return "/tmp/abox-" + uid;
}

namespace {

// The paths in dir, once dir is checked: a real folder of this uid, 0700.
base::Result<DaemonPaths, std::string> checked_paths(const std::string& dir) {
  std::string uid = std::to_string(::getuid());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return base::Err{dir + ": " + std::strerror(errno)};
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    return base::Err{dir + ": must be a folder of uid " + uid + " with mode 0700; refusing to use it"};
  DaemonPaths p;
  p.dir = dir;
  p.socket = dir + "/daemon.sock";
  p.lock = dir + "/daemon.lock";
  p.log = dir + "/daemon.log";
  if (p.socket.size() > 107) return base::Err{p.socket + ": too long for a unix socket"};
  return p;
}

}  // namespace

base::Result<DaemonPaths, std::string> daemon_paths() {
  std::string dir = daemon_runtime_dir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return base::Err{dir + ": " + std::strerror(errno)};
  return checked_paths(dir);
}

base::Result<DaemonPaths, std::string> existing_daemon_paths() {
  return checked_paths(daemon_runtime_dir());
}

}  // namespace abox::engine
