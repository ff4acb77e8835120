// CommandLauncher: starts the operator's command exactly as
// docs/control-protocol.md ("The command") says, and nothing more.
//
// In the child, before execve, in this order (each step that fails reports
// kOther with its errno, except the workdir and the exec itself):
//   1. every signal unblocked and back to its default action (box-guest
//      blocks some for its signalfd and ignores SIGPIPE; both would be
//      inherited);
//   2. setsid(): a session and process group of its own; with `tty`, the
//      pty's slave becomes its controlling terminal (TIOCSCTTY);
//   3. stdin (/dev/null, or a pipe box-guest feeds), stdout and stderr (two
//      pipes, read apart) on 0, 1, 2, or with `tty` the pty's slave on all
//      three; every other fd is close-on-exec;
//   4. the capability bounding set emptied, the ambient set cleared, and the
//      securebits that keep root from regaining capabilities set and locked
//      (NOROOT, NO_CAP_AMBIENT_RAISE, KEEP_CAPS off), while still root;
//   5. no supplementary groups, then gid, then uid (real, effective, saved);
//   6. the effective, permitted and inheritable sets cleared (setuid to a
//      non-root uid clears the first two already; this also covers uid 0);
//   7. PR_SET_NO_NEW_PRIVS;
//   8. with `make_workdir`, mkdir -p workdir as the new user (mode 0755
//      less the umask; what exists is left as it is); chdir(workdir) as the
//      new user (kWorkdir for either);
//   9. execve with setup's env exactly: argv[0] as given when it holds a '/',
//      else looked up in the env's PATH (default
//      /usr/local/bin:/usr/bin:/bin); the first candidate that execs wins;
//      kNotFound when none exists, kNotExecutable when one existed but could
//      not be run (EACCES, ENOEXEC).
// The child tells the parent why it failed over a close-on-exec pipe (one
// reason byte and errno as 4 bytes); a successful exec closes the pipe with
// nothing written, so the parent learns the outcome without blocking.
// Everything the child needs is built before fork(): it allocates nothing.
//
// The pty (`tty`): box-guest opens the master (/dev/ptmx, which needs devpts
// on /dev/pts: the images' /init mounts it), sets its window, and opens the
// slave through the master (TIOCGPTPEER, no path lookup), owned by the
// command's uid and gid with mode 0620 as login(1) would leave it. Only the
// child keeps the slave; the parent holds the master, so the master reads
// EIO (end of output) once every process that had the slave has closed it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

struct CommandSpec {
  std::vector<std::string> argv;  // at least one
  std::vector<EnvEntry> env;
  std::string workdir;  // absolute; "" means /home/agent
  std::uint32_t uid = 1000;
  std::uint32_t gid = 1000;
  bool stdin_open = false;    // false: /dev/null (without tty)
  bool tty = false;           // a pty is the command's stdin, stdout, stderr and controlling terminal
  WindowSize window;          // the pty's first window size (0 x 0: left as the kernel makes it)
  bool make_workdir = false;  // mkdir -p workdir as the user before entering it (copy_in)
};

inline constexpr const char* kDefaultWorkdir = "/home/agent";
inline constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// The parent's ends, all non-blocking and close-on-exec. With `tty`,
// stdout_read, stdin_write (when stdin_open) and pty are three fds of the
// pty's master: output is read from one, input written to another, and the
// window and the foreground process group asked of the third; stderr_read
// is invalid.
struct LaunchedCommand {
  pid_t pid = -1;
  base::UniqueFd stdout_read;
  base::UniqueFd stderr_read;
  base::UniqueFd stdin_write;   // invalid when stdin is /dev/null (or with tty, when stdin is not open)
  base::UniqueFd start_status;  // EOF: the exec happened; 5 bytes: it failed (decode_start_status)
  base::UniqueFd pty;           // the pty's master (tty only)
};

// Forks the command. Fails (kOther) only when the pipes or fork fail; how the
// child's own start went comes through start_status.
base::Result<LaunchedCommand, StartFailed> launch_command(const CommandSpec& spec);

inline constexpr std::size_t kStartStatusBytes = 5;
// What the child wrote on the status pipe: nullopt unless exactly 5 bytes of
// a known reason.
std::optional<StartFailed> decode_start_status(std::span<const std::uint8_t> bytes);

// "no such file: /bin/nope (No such file or directory)", for start_failed's detail.
std::string start_failure_text(const StartFailed& f, const CommandSpec& spec);

}  // namespace abox::guest
