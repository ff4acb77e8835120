// ChildProcess: one child started from a typed ChildSpec and held by a
// pidfd, never by a pid number or a name.
//
// The whole start is data (ChildSpec): the program's absolute path, argv, the
// exact environment, and which of the parent's fds become which fds of the
// child. Every other fd is closed in the child, signal dispositions and the
// mask are reset, and nothing is spliced into a shell string. A failed exec
// is reported to the parent through a close-on-exec pipe, so spawn() fails
// with the errno instead of returning a child that already died.
//
// Invariants: a ChildProcess owns its pidfd and reaps its child exactly once
// (try_reap() or the destructor). The destructor of a child still running
// kills it (SIGKILL by pidfd) and reaps it: an owner that goes away leaves no
// process behind. With kill_with_parent the kernel does the same if this
// whole process dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::engine {

struct ChildSpec {
  std::string program;            // an absolute path: no PATH search here
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // NAME=VALUE, exactly the child's environment
  // Child fd number <- parent fd. 0, 1 and 2 should be given (from /dev/null
  // if nothing else); fds not listed are closed in the child.
  std::vector<std::pair<int, int>> fds;
  std::string cwd;               // "" = the parent's
  bool kill_with_parent = true;  // SIGKILL the child when this process dies
  bool new_session = false;      // setsid(): no controlling terminal, own process group
};

struct ExitStatus {
  bool signalled = false;
  int value = 0;  // the exit status, or the signal number
  // "exited with status 3", "killed by signal 9 (SIGKILL)"
  std::string describe() const;
  // As a shell reports it: the status, or 128 + the signal.
  int shell_code() const { return signalled ? 128 + value : value; }
};

class ChildProcess {
 public:
  static base::Result<ChildProcess, std::string> spawn(const ChildSpec& spec);

  ChildProcess(ChildProcess&&) noexcept = default;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool running() const { return !status_.has_value(); }
  const std::optional<ExitStatus>& status() const { return status_; }

  // Sends sig through the pidfd; false once the child was reaped (or on error).
  bool signal(int sig);
  // Reaps the child if it has ended (never blocks); its status, or nullopt while it runs.
  std::optional<ExitStatus> try_reap();
  // SIGKILL and reap, blocking until it is gone (a killed process ends at once).
  void kill_and_reap();
  // Blocks until the child ends and reaps it (for tools that run a child to completion, not for a loop).
  ExitStatus wait();

  // The start time of the child in clock ticks since boot (/proc/PID/stat
  // field 22): with the pid it names this process and no later one.
  std::uint64_t start_ticks() const { return start_ticks_; }

 private:
  ChildProcess(pid_t pid, base::UniqueFd pidfd, std::uint64_t start_ticks)
      : pid_(pid), pidfd_(std::move(pidfd)), start_ticks_(start_ticks) {}
  pid_t pid_ = -1;
  base::UniqueFd pidfd_;
  std::uint64_t start_ticks_ = 0;
  std::optional<ExitStatus> status_;
};

// The start time (clock ticks since boot) of a pid from /proc, 0 if unknown.
std::uint64_t process_start_ticks(pid_t pid);

// Resolves a program name the way execvp would (a name with a '/' is taken as
// it is), against PATH from this process's environment; "" when not found.
std::string find_program(const std::string& name);

}  // namespace abox::engine
