#include "engine/process/child_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace abox::engine {
namespace {

// Through syscall(): glibc 2.36's <sys/pidfd.h> declares these without C
// linkage, so C++ cannot link against them.
int sys_pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}
int sys_pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// In the child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void child_fail(int error_pipe, int err) {
  ssize_t ignored = ::write(error_pipe, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

[[noreturn]] void exec_child(const ChildSpec& spec, char* const* argv, char* const* envp, int error_pipe,
                             pid_t parent) {
  if (spec.kill_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(error_pipe, errno);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the prctl took effect
  }
  // Move every source fd above every target first, so that a dup2 never
  // overwrites a source still to be copied.
  int high = 64;
  for (const auto& [target, source] : spec.fds) high = std::max({high, target + 1, source + 1});
  int error_fd = ::fcntl(error_pipe, F_DUPFD_CLOEXEC, high + static_cast<int>(spec.fds.size()));
  if (error_fd < 0) child_fail(error_pipe, errno);
  error_pipe = error_fd;
  int moved[256];
  std::size_t n = std::min<std::size_t>(spec.fds.size(), 256);
  for (std::size_t i = 0; i < n; ++i) {
    moved[i] = ::fcntl(spec.fds[i].second, F_DUPFD_CLOEXEC, high);
    if (moved[i] < 0) child_fail(error_pipe, errno);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (::dup2(moved[i], spec.fds[i].first) < 0) child_fail(error_pipe, errno);  // dup2 clears CLOEXEC
  }
  // Everything else goes: the error pipe survives until exec (it is CLOEXEC).
  int max_target = 2;
  for (std::size_t i = 0; i < n; ++i) max_target = std::max(max_target, spec.fds[i].first);
  for (int fd = 0; fd <= max_target; ++fd) {
    bool wanted = false;
    for (std::size_t i = 0; i < n; ++i) wanted = wanted || spec.fds[i].first == fd;
    if (!wanted) ::close(fd);
  }
  if (max_target + 1 <= error_pipe - 1 && ::syscall(SYS_close_range, max_target + 1, error_pipe - 1, 0) != 0)
    child_fail(error_pipe, errno);
  if (::syscall(SYS_close_range, error_pipe + 1, ~0U, 0) != 0) child_fail(error_pipe, errno);

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::signal(sig, SIG_DFL);
  }
  if (spec.new_session && ::setsid() < 0) child_fail(error_pipe, errno);
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) child_fail(error_pipe, errno);
  ::execve(spec.program.c_str(), argv, envp);
  child_fail(error_pipe, errno);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signalled) return "killed by signal " + std::to_string(value) + " (" + signal_name(value) + ")";
  return "exited with status " + std::to_string(value);
}

base::Result<ChildProcess, std::string> ChildProcess::spawn(const ChildSpec& spec) {
  if (spec.program.empty() || spec.program[0] != '/')
    return base::Err{"not an absolute path: " + spec.program};
  if (spec.argv.empty()) return base::Err{std::string("no argv[0] for ") + spec.program};
  if (spec.fds.size() > 256) return base::Err{std::string("too many fds for ") + spec.program};
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return base::Err{std::string("pipe: ") + std::strerror(errno)};
  base::UniqueFd err_read(pipe_fds[0]), err_write(pipe_fds[1]);

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return base::Err{std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) exec_child(spec, argv.data(), envp.data(), err_write.get(), parent);
  err_write.reset();

  // The pid cannot be reused before we reap it, so opening the pidfd now is race-free.
  base::UniqueFd pidfd(static_cast<int>(sys_pidfd_open(pid)));
  int child_errno = 0;
  ssize_t got;
  do {
    got = ::read(err_read.get(), &child_errno, sizeof child_errno);
  } while (got < 0 && errno == EINTR);
  if (got == sizeof child_errno || !pidfd) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!pidfd) return base::Err{std::string("pidfd_open: ") + std::strerror(errno)};
    return base::Err{spec.program + ": " + std::strerror(child_errno)};
  }
  return ChildProcess(pid, std::move(pidfd), process_start_ticks(pid));
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pidfd_ && !status_) kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    start_ticks_ = other.start_ticks_;
    status_ = std::move(other.status_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pidfd_ && !status_) kill_and_reap();
}

bool ChildProcess::signal(int sig) {
  if (!pidfd_ || status_) return false;
  return sys_pidfd_send_signal(pidfd_.get(), sig) == 0;
}

std::optional<ExitStatus> ChildProcess::try_reap() {
  if (status_) return status_;
  if (!pidfd_) return std::nullopt;
  siginfo_t info{};
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG) !=
      0)
    return std::nullopt;
  if (info.si_pid == 0) return std::nullopt;  // still running
  ExitStatus s;
  s.signalled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  s.value = info.si_status;
  status_ = s;
  return status_;
}

void ChildProcess::kill_and_reap() {
  if (!pidfd_ || status_) return;
  sys_pidfd_send_signal(pidfd_.get(), SIGKILL);
  wait();
}

ExitStatus ChildProcess::wait() {
  if (status_) return *status_;
  siginfo_t info{};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 &&
         errno == EINTR) {
  }
  ExitStatus s;
  s.signalled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  s.value = info.si_status;
  status_ = s;
  return s;
}

std::uint64_t process_start_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted after its last ')'.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    auto end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace abox::engine
