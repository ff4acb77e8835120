// CommandLauncher (see command_launcher.h for the order of the child's steps).
#include "guest/box_guest/command_launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::guest {
namespace {

constexpr int kLastPossibleCap = 63;

// What the child needs, built before fork() so the child allocates nothing.
struct PreparedExec {
  std::vector<std::string> candidates;
  std::vector<std::string> env_strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string workdir;
  std::vector<std::string> workdir_prefixes;  // "/a", "/a/b", ... for make_workdir
};

PreparedExec prepare(const CommandSpec& spec) {
  PreparedExec p;
  const std::string& name = spec.argv.front();
  if (name.find('/') != std::string::npos) {
    p.candidates.push_back(name);
  } else if (!name.empty()) {
    std::string path = kDefaultPath;
    for (const auto& e : spec.env)
      if (e.name == "PATH") path = e.value;  // the last one, as the command will see it
    std::size_t at = 0;
    while (at <= path.size()) {
      std::size_t colon = path.find(':', at);
      if (colon == std::string::npos) colon = path.size();
      // An empty element would mean the working directory: never searched.
      if (colon > at) p.candidates.push_back(path.substr(at, colon - at) + "/" + name);
      at = colon + 1;
    }
  }
  for (const auto& e : spec.env) p.env_strings.push_back(e.name + "=" + e.value);
  for (const auto& a : spec.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (auto& s : p.env_strings) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  p.workdir = spec.workdir.empty() ? kDefaultWorkdir : spec.workdir;
  if (spec.make_workdir) {
    for (std::size_t at = 1; at <= p.workdir.size(); ++at) {
      if (at == p.workdir.size() || p.workdir[at] == '/') {
        if (p.workdir[at - 1] != '/') p.workdir_prefixes.push_back(p.workdir.substr(0, at));
      }
    }
  }
  return p;
}

[[noreturn]] void child_fail(int status_fd, StartFailure reason, int error) {
  const auto e = static_cast<std::uint32_t>(error);
  const std::uint8_t b[kStartStatusBytes] = {
      static_cast<std::uint8_t>(reason), static_cast<std::uint8_t>(e >> 24),
      static_cast<std::uint8_t>(e >> 16), static_cast<std::uint8_t>(e >> 8), static_cast<std::uint8_t>(e)};
  [[maybe_unused]] auto n = ::write(status_fd, b, sizeof b);
  ::_exit(127);
}

// fd onto target, without close-on-exec.
bool place_fd(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

[[noreturn]] void run_child(const PreparedExec& p, const CommandSpec& spec, int stdin_fd, int stdout_fd,
                            int stderr_fd, int status_fd, int tty_fd) {
  auto fail_other = [&] { child_fail(status_fd, StartFailure::kOther, errno); };

  // 1. Signals as a fresh process has them.
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail_other();
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::signal(sig, SIG_DFL);  // fails harmlessly for the real-time signals glibc reserves
  }
  // 2. Its own session and process group.
  if (::setsid() < 0) fail_other();
  if (tty_fd >= 0 && ::ioctl(tty_fd, TIOCSCTTY, 0) != 0) fail_other();
  // 3. The standard fds; everything else closes on exec.
  if (tty_fd >= 0) stdin_fd = stdout_fd = stderr_fd = tty_fd;
  if (!place_fd(stdin_fd, 0) || !place_fd(stdout_fd, 1) || !place_fd(stderr_fd, 2)) fail_other();
  ::syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);  // belt and braces; ENOSYS before 5.11
  // 4. Capabilities that could come back: the bounding set, the ambient set, securebits.
  for (int cap = 0; cap <= kLastPossibleCap; ++cap)
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail_other();
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail_other();
  const unsigned long securebits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                   SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                   SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, securebits, 0, 0, 0) != 0) fail_other();
  // 5. The user.
  if (::setgroups(0, nullptr) != 0) fail_other();
  if (::setresgid(spec.gid, spec.gid, spec.gid) != 0) fail_other();
  if (::setresuid(spec.uid, spec.uid, spec.uid) != 0) fail_other();
  // 6. No capability left in any set.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) fail_other();
  // 7. No exec can grant privileges again.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_other();
  // 8. The working directory, as the user (made first, for a copy_in).
  for (const auto& dir : p.workdir_prefixes)
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      child_fail(status_fd, StartFailure::kWorkdir, errno);
  if (::chdir(p.workdir.c_str()) != 0) child_fail(status_fd, StartFailure::kWorkdir, errno);
  // 9. Exec.
  bool denied = false;
  for (const auto& c : p.candidates) {
    ::execve(c.c_str(), p.argv.data(), p.envp.data());
    switch (errno) {
      case ENOENT:
      case ENOTDIR:
      case ESTALE:
        continue;
      case EACCES:
        denied = true;
        continue;
      case ENOEXEC:
        child_fail(status_fd, StartFailure::kNotExecutable, ENOEXEC);
      default:
        child_fail(status_fd, StartFailure::kOther, errno);
    }
  }
  if (denied) child_fail(status_fd, StartFailure::kNotExecutable, EACCES);
  child_fail(status_fd, StartFailure::kNotFound, ENOENT);
}

struct Pipe {
  base::UniqueFd read;
  base::UniqueFd write;
};

bool make_pipe(Pipe& p) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  p.read.reset(fds[0]);
  p.write.reset(fds[1]);
  return true;
}

bool set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// The pty: the master, its window set; the slave opened through it, owned
// by the command's user. Both close-on-exec (the child dup2()s the slave).
bool open_pty(const CommandSpec& spec, base::UniqueFd& master, base::UniqueFd& slave) {
  master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master || ::unlockpt(master.get()) != 0) return false;
  if (spec.window.rows != 0 || spec.window.cols != 0) {
    winsize ws{};
    ws.ws_row = spec.window.rows;
    ws.ws_col = spec.window.cols;
    if (::ioctl(master.get(), TIOCSWINSZ, &ws) != 0) return false;
  }
  slave.reset(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave) return false;
  return ::fchown(slave.get(), spec.uid, spec.gid) == 0 && ::fchmod(slave.get(), 0620) == 0;
}

base::Err<StartFailed> other(std::string what) {
  StartFailed f;
  f.reason = StartFailure::kOther;
  f.error = errno;
  f.detail = std::move(what) + ": " + std::strerror(errno);
  return base::Err{f};
}

}  // namespace

base::Result<LaunchedCommand, StartFailed> launch_command(const CommandSpec& spec) {
  if (spec.argv.empty()) {
    errno = EINVAL;
    return other("no argv");
  }
  const PreparedExec prepared = prepare(spec);
  Pipe out, err, in, status;
  base::UniqueFd dev_null, master, slave;
  if (!make_pipe(status)) return other("pipe2");
  if (spec.tty) {
    if (!open_pty(spec, master, slave)) return other("a pty (/dev/ptmx on /dev/pts)");
  } else {
    if (!make_pipe(out) || !make_pipe(err)) return other("pipe2");
    if (spec.stdin_open) {
      if (!make_pipe(in)) return other("pipe2");
    } else {
      dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!dev_null) return other("open /dev/null");
    }
  }
  LaunchedCommand c;
  if (spec.tty) {
    c.stdout_read.reset(::fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
    if (spec.stdin_open) c.stdin_write.reset(::fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
    if (!c.stdout_read || (spec.stdin_open && !c.stdin_write)) return other("dup the pty");
    c.pty = std::move(master);
  }
  const int child_stdin = spec.stdin_open ? in.read.get() : dev_null.get();

  const pid_t pid = ::fork();
  if (pid < 0) return other("fork");
  if (pid == 0)
    run_child(prepared, spec, child_stdin, out.write.get(), err.write.get(), status.write.get(), slave.get());

  c.pid = pid;
  if (!spec.tty) {
    c.stdout_read = std::move(out.read);
    c.stderr_read = std::move(err.read);
    if (spec.stdin_open) c.stdin_write = std::move(in.write);
  }
  c.start_status = std::move(status.read);
  for (int fd : {c.stdout_read.get(), c.stderr_read.get(), c.start_status.get(), c.stdin_write.get()})
    if (fd >= 0) set_nonblocking(fd);
  // The child's ends (and the pty's slave) close here, so EOF comes when the
  // command's last holder closes them.
  return c;
}

std::optional<StartFailed> decode_start_status(std::span<const std::uint8_t> b) {
  if (b.size() != kStartStatusBytes || b[0] < 1 || b[0] > 4) return std::nullopt;
  StartFailed f;
  f.reason = static_cast<StartFailure>(b[0]);
  f.error = static_cast<std::int32_t>((std::uint32_t{b[1]} << 24) | (std::uint32_t{b[2]} << 16) |
                                      (std::uint32_t{b[3]} << 8) | b[4]);
  return f;
}

std::string start_failure_text(const StartFailed& f, const CommandSpec& spec) {
  std::string what;
  switch (f.reason) {
    case StartFailure::kNotFound:
      what = "not found: " + spec.argv.front();
      break;
    case StartFailure::kNotExecutable:
      what = "not executable: " + spec.argv.front();
      break;
    case StartFailure::kWorkdir:
      what = "workdir " + (spec.workdir.empty() ? kDefaultWorkdir : spec.workdir);
      break;
    case StartFailure::kOther:
      what = "could not become the user or start " + spec.argv.front();
      break;
    case StartFailure::kRefused:  // the session's, never the child's (decode_start_status refuses it)
      what = "refused: " + spec.argv.front();
      break;
  }
  what += " (" + std::string(std::strerror(f.error)) + ")";
  if (what.size() > kMaxShortText) what.resize(kMaxShortText);
  return what;
}

}  // namespace abox::guest
