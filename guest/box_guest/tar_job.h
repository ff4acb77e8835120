// TarJob: one run of the image's own tar as the agent, for a copy_in
// (`tar -x -f - -C PATH`, fed the host's stream on its stdin) or a copy_out
// (`tar -c -f - -C DIRNAME -- BASENAME`, whose stdout is the stream for the
// host) (docs/control-protocol.md, "Files in and out").
//
// The child starts as the command does (command_launcher.h): the command's
// uid and gid, no supplementary groups, no capabilities in any set,
// securebits locked, no_new_privs, a session of its own, the environment
// PATH=/usr/bin:/bin and LC_ALL=C only (the image's tar, never one the agent
// put earlier in a PATH). For an extract the target folder is made first,
// `mkdir -p` as that user, so whatever the stream holds lands as the agent
// could have written it, owned by the agent, and nowhere the agent could not
// write.
//
// TarJob owns the child's fds and knows when it is over: the exec happened
// or failed (the start-status pipe), the child was reaped (exited(), fed by
// the session's SIGCHLD handling), and its output pipes reached EOF. Its
// result is tar's exit status and the first line of what it printed.
//
// Bounds: what tar prints is kept up to kDiagnosticBytes (the rest is read
// and dropped, so tar never blocks on it); the copy_in stream passes
// through at most one frame at a time (the session holds it).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "guest/box_guest/command_launcher.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

inline constexpr std::size_t kDiagnosticBytes = 4096;
inline constexpr const char* kTarPath = "/usr/bin:/bin";

class TarJob {
 public:
  // tar -x -f - into dir (made first). Fails only when pipes or fork fail.
  static base::Result<TarJob, std::string> extract(const std::string& dir, std::uint32_t uid,
                                                   std::uint32_t gid);
  // tar -c -f - of path (absolute). Fails only when pipes or fork fail.
  static base::Result<TarJob, std::string> create(const std::string& path, std::uint32_t uid,
                                                  std::uint32_t gid);

  // The argv of create(): {"tar", "-c", "-f", "-", "-C", dirname, "--", basename}.
  static std::vector<std::string> create_argv(const std::string& path);

  pid_t pid() const { return command_.pid; }
  // tar's stdin (extract) and stdout (create: the stream); invalid once closed.
  base::UniqueFd& input() { return command_.stdin_write; }
  base::UniqueFd& stream() { return stream_; }
  // The fds whose bytes are diagnostics, and the start-status pipe.
  base::UniqueFd& diagnostics_a() { return diagnostics_a_; }
  base::UniqueFd& diagnostics_b() { return diagnostics_b_; }
  base::UniqueFd& start_status() { return command_.start_status; }

  // Reads what is there (bounded per call); closes the fd at EOF.
  void read_diagnostics(base::UniqueFd& fd);
  void read_start_status();
  // The child was reaped with this wait status.
  void exited(int wait_status) { wait_status_ = wait_status; }
  bool reaped() const { return wait_status_.has_value(); }

  // Reaped, every pipe but the stream at EOF, and the start status known.
  // (The stream is the session's to drain: a copy_out is over when it is
  // closed too.)
  bool over() const;
  // ok: tar exited 0; detail: the first line tar printed, or why it did not run.
  CopyResult result() const;

 private:
  TarJob() = default;
  static base::Result<TarJob, std::string> start(CommandSpec spec, bool stream_out);

  std::string what_;  // "tar -x into /home/agent/in": for a detail that says what failed
  LaunchedCommand command_;
  base::UniqueFd stream_;
  base::UniqueFd diagnostics_a_, diagnostics_b_;
  std::string diagnostics_;
  std::string start_status_bytes_;
  bool start_known_ = false;
  std::optional<StartFailed> start_failed_;
  CommandSpec spec_;
  std::optional<int> wait_status_;
};

}  // namespace abox::guest
