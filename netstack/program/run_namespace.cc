#include "netstack/program/run_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "base/unique_fd.h"

namespace abox::netstack {

namespace {

constexpr int kReadyTimeoutMs = 30'000;  // the appliance's setup: a tap, a sandbox
constexpr int kStopGraceSeconds = 5;

struct Pipe {
  base::UniqueFd read;
  base::UniqueFd write;
  bool open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    read.reset(fds[0]);
    write.reset(fds[1]);
    return true;
  }
};

// Writes all of text to fd (a child's few bytes to a pipe, or stderr).
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Waits (bounded) for one byte or EOF on fd: true when a byte came.
bool wait_for_byte(int fd, int timeout_ms, char& got) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t n = ::read(fd, &got, 1);
    if (n < 0 && errno == EINTR) continue;
    return n == 1;
  }
}

// A file holding the resolv.conf CMD sees: the gateway is its only DNS
// server. Removed once CMD's process has bind-mounted it (the mount keeps
// it alive), or on any failure.
class ResolvConfFile {
 public:
  bool create(const std::string& gateway) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/abox-net-resolv-XXXXXX";
    base::UniqueFd fd(::mkstemp(path_.data()));
    if (!fd) {
      path_.clear();
      return false;
    }
    const std::string text =
        "# abox-net run: the gateway answers for the names the policy allows\n"
        "nameserver " +
        gateway + "\noptions timeout:2 attempts:2\n";
    write_all(fd.get(), text);
    return ::fchmod(fd.get(), 0644) == 0;
  }
  const std::string& path() const { return path_; }
  void remove() {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }
  ~ResolvConfFile() { remove(); }

 private:
  std::string path_;
};

// CMD's process, after fork(): the namespaces, the resolv.conf, then CMD
// once the supervisor says go. Never returns.
[[noreturn]] void command_child(const std::vector<std::string>& command, const sigset_t& old_mask,
                                const std::string& resolv_path, int ready_fd, int go_fd, pid_t supervisor) {
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::signal(SIGPIPE, SIG_DFL);  // the supervisor ignores it; CMD must not inherit that
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != supervisor) ::_exit(kRunCommandCouldNotStart);
  auto fail = [](const std::string& what) {
    write_all(STDERR_FILENO, "abox-net run: " + what + ": " + std::strerror(errno) + "\n");
    ::_exit(kRunCommandCouldNotStart);
  };
  if (::unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) fail("cannot make CMD's network and mount namespaces");
  // abox-net refuses IPv6 for now: off in CMD's namespace (before the tap
  // exists, so it has none), clients go to IPv4 at once instead of trying
  // IPv6 first, and the kernel's router solicitations make no deny events.
  for (const char* knob :
       {"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"}) {
    base::UniqueFd f(::open(knob, O_WRONLY | O_CLOEXEC));
    if (f) write_all(f.get(), "1\n");
  }
  // Private mounts: the resolv.conf below must not show in the host's view.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    fail("cannot make CMD's mounts private");
  if (::mount(resolv_path.c_str(), "/etc/resolv.conf", nullptr, MS_BIND, nullptr) != 0) {
    // CMD still runs behind the gateway; only names it resolves through
    // /etc/resolv.conf will go elsewhere (and be refused).
    write_all(STDERR_FILENO,
              std::string("abox-net run: warning: cannot put the gateway in CMD's /etc/resolv.conf: ") +
                  std::strerror(errno) + "\n");
  }
  write_all(ready_fd, "r");
  ::close(ready_fd);
  char go = 0;
  if (!wait_for_byte(go_fd, -1, go) || go != 'g') ::_exit(kRunCommandCouldNotStart);
  ::close(go_fd);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int e = errno;
  write_all(STDERR_FILENO, "abox-net run: " + command[0] + ": " + std::strerror(e) + "\n");
  ::_exit(e == ENOENT || e == ENOTDIR ? kRunCommandNotFound : kRunCommandNotExecutable);
}

// The appliance's process, after fork(). Never returns.
[[noreturn]] void appliance_child(ApplianceOptions options, const LoadedPolicy& policy,
                                  const sigset_t& old_mask, int ready_fd, pid_t supervisor) {
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != supervisor) ::_exit(3);
  ::setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C is CMD's
  base::UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null) ::dup2(null.get(), STDIN_FILENO);
  options.ready_fd = ready_fd;
  options.stats_at_exit = false;
  const int code = run_appliance(options, policy);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kRunCommandCouldNotStart;
}

// This process's children now (every task's /proc/self/task/TID/children),
// but one. Each is ours until we reap it, so its pid cannot be reused
// meanwhile: kill() on it hits that very process (or its zombie).
std::vector<pid_t> children_but(pid_t except) {
  std::vector<pid_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> tasks(::opendir("/proc/self/task"), ::closedir);
  if (!tasks) return out;
  while (const dirent* e = ::readdir(tasks.get())) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/children");
    for (long pid = 0; in >> pid;) {
      if (pid > 0 && pid != except) out.push_back(static_cast<pid_t>(pid));
    }
  }
  return out;
}

// What is left of CMD's tree once CMD is gone: its descendants, each ours
// once its parent is gone (this process is their subreaper), except the
// appliance. Each gets SIGTERM; whatever is still there at kill_at gets
// SIGKILL; their own children, orphaned in turn, the same as they come.
// Bounded: it gives up (saying so) a second after the SIGKILLs, which the
// kernel never refuses.
void stop_leftovers(pid_t appliance, const sigset_t& chld, std::chrono::steady_clock::time_point kill_at) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up = kill_at + std::chrono::seconds(1);
  std::set<pid_t> termed;
  const timespec step{0, 50'000'000};
  while (Clock::now() < give_up) {
    bool any = false;
    const bool killing = Clock::now() >= kill_at;
    for (pid_t pid : children_but(appliance)) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) continue;
      any = true;
      if (killing) {
        ::kill(pid, SIGKILL);
      } else if (termed.insert(pid).second) {
        ::kill(pid, SIGTERM);
      }
    }
    if (!any) return;
    ::sigtimedwait(&chld, nullptr, &step);
  }
  std::cerr << "abox-net run: processes CMD started are still there after SIGKILL\n";
}

// Sends sig to pid, then waits up to kStopGraceSeconds for it to be
// reaped (SIGKILL after that), collecting every child that ends meanwhile.
void stop_and_reap(pid_t pid, int sig, const sigset_t& chld) {
  ::kill(pid, sig);
  const timespec step{0, 100'000'000};
  for (int i = 0; i < kStopGraceSeconds * 10; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return;
    ::sigtimedwait(&chld, nullptr, &step);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

int run_in_new_namespace(const ApplianceOptions& options, const LoadedPolicy& policy,
                         const std::vector<std::string>& command) {
  if (!has_effective_capability(CAP_SYS_ADMIN) || !has_effective_capability(CAP_NET_ADMIN)) {
    std::cerr << "abox-net run: running CMD needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN): it makes a "
                 "network namespace for CMD and a tap in it. Without privilege, run a VM behind "
                 "'abox-net run --stream' (docs/vm.md) or use 'abox run'\n";
    return kRunCommandCouldNotStart;
  }
  ResolvConfFile resolv;
  if (!resolv.create(options.net.gateway.to_string())) {
    std::cerr << "abox-net run: cannot write CMD's resolv.conf in " << resolv.path() << ": "
              << std::strerror(errno) << '\n';
    return kRunCommandCouldNotStart;
  }
  std::cout.flush();
  std::cerr.flush();
  // A CMD that is gone before "go" must not take the supervisor with it.
  ::signal(SIGPIPE, SIG_IGN);

  // Every process CMD starts and leaves behind becomes this process's child
  // (not init's), so that none outlives abox-net: stop_leftovers().
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::cerr << "abox-net run: prctl(PR_SET_CHILD_SUBREAPER): " << std::strerror(errno) << '\n';
    return kRunCommandCouldNotStart;
  }
  // Every signal the supervisor acts on is taken synchronously (sigwaitinfo).
  sigset_t handled, old_mask, chld;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&handled, sig);
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &handled, &old_mask);
  struct RestoreMask {
    const sigset_t& mask;
    ~RestoreMask() { ::sigprocmask(SIG_SETMASK, &mask, nullptr); }
  } restore{old_mask};

  Pipe command_ready, go, appliance_ready;
  if (!command_ready.open() || !go.open() || !appliance_ready.open()) {
    std::cerr << "abox-net run: pipe: " << std::strerror(errno) << '\n';
    return kRunCommandCouldNotStart;
  }
  const pid_t self = ::getpid();
  const pid_t cmd = ::fork();
  if (cmd < 0) {
    std::cerr << "abox-net run: fork: " << std::strerror(errno) << '\n';
    return kRunCommandCouldNotStart;
  }
  if (cmd == 0) {
    command_ready.read.reset();
    go.write.reset();
    appliance_ready.read.reset();
    appliance_ready.write.reset();
    command_child(command, old_mask, resolv.path(), command_ready.write.get(), go.read.get(), self);
  }
  command_ready.write.reset();
  go.read.reset();
  auto give_up = [&] {
    go.write.reset();  // EOF: CMD's process exits without running CMD
    stop_and_reap(cmd, SIGKILL, chld);
    return kRunCommandCouldNotStart;
  };
  char byte = 0;
  if (!wait_for_byte(command_ready.read.get(), kReadyTimeoutMs, byte)) return give_up();
  resolv.remove();  // mounted in CMD's namespace; nobody else needs it

  ApplianceOptions appliance = options;
  appliance.netns = "/proc/" + std::to_string(cmd) + "/ns/net";
  const pid_t net = ::fork();
  if (net < 0) {
    std::cerr << "abox-net run: fork: " << std::strerror(errno) << '\n';
    return give_up();
  }
  if (net == 0) {
    command_ready.read.reset();
    go.write.reset();
    appliance_ready.read.reset();
    appliance_child(appliance, policy, old_mask, appliance_ready.write.release(), self);
  }
  appliance_ready.write.reset();
  if (!wait_for_byte(appliance_ready.read.get(), kReadyTimeoutMs, byte)) {
    // The appliance said why on stderr (or is stuck: it goes too).
    stop_and_reap(net, SIGKILL, chld);
    return give_up();
  }
  write_all(go.write.get(), "g");
  go.write.reset();

  int cmd_status = 0;
  bool cmd_done = false;
  bool appliance_died = false;
  // A SIGTERM from a process asks abox-net to end: CMD has
  // kStopGraceSeconds to exit on it, then gets SIGKILL.
  std::optional<std::chrono::steady_clock::time_point> kill_cmd_at;
  bool cmd_killed = false;
  while (!cmd_done) {
    siginfo_t si{};
    int sig = -1;
    const auto now = std::chrono::steady_clock::now();
    if (kill_cmd_at && !cmd_killed && now >= *kill_cmd_at) {
      std::cerr << "abox-net run: CMD did not exit within " << kStopGraceSeconds
                << " s of SIGTERM: killing it\n";
      ::kill(cmd, SIGKILL);
      cmd_killed = true;
    }
    if (kill_cmd_at && !cmd_killed) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(*kill_cmd_at - now);
      const timespec wait{static_cast<time_t>(left.count() / 1'000'000'000),
                          static_cast<long>(left.count() % 1'000'000'000)};
      sig = ::sigtimedwait(&handled, &si, &wait);
    } else {
      sig = ::sigwaitinfo(&handled, &si);
    }
    if (sig < 0) continue;  // EINTR, or the grace is over
    if (sig != SIGCHLD) {
      // From a process (kill, a supervisor): CMD should hear it. From the
      // terminal (si_code > 0): CMD, in the foreground group, already did.
      if (si.si_code <= 0) ::kill(cmd, sig);
      if (sig == SIGTERM && si.si_code <= 0 && !kill_cmd_at)
        kill_cmd_at = std::chrono::steady_clock::now() + std::chrono::seconds(kStopGraceSeconds);
      continue;
    }
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      if (pid == cmd) {
        cmd_done = true;
        cmd_status = status;
      } else if (pid == net && !appliance_died) {
        appliance_died = true;
        std::cerr << "abox-net run: the appliance exited (" << status_code(status)
                  << ") while CMD ran: stopping CMD\n";
        stop_and_reap(cmd, SIGTERM, chld);
        cmd_done = true;
      }
    }
  }
  // After a SIGTERM, within the grace it gave CMD (already over if CMD had
  // to be killed); else a grace of their own.
  stop_leftovers(
      net, chld,
      kill_cmd_at.value_or(std::chrono::steady_clock::now() + std::chrono::seconds(kStopGraceSeconds)));
  if (appliance_died) return kRunCommandApplianceDied;
  stop_and_reap(net, SIGTERM, chld);
  return status_code(cmd_status);
}

}  // namespace abox::netstack
