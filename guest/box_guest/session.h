// Session: one boot's conversation with the host over the control port
// (docs/control-protocol.md), and the command sessions inside it
// (command_session.h, command_table.h). One thread, one poll() loop over: the
// control port, a signalfd (SIGCHLD and the stop signals), the self-test's
// sockets, each command session's start-status pipe, stdout, stderr and
// stdin pipes (or its pty), and the copies' tar processes (tar_job.h).
// Timers are the self-test's deadlines. No call blocks: every fd is
// non-blocking and every loop is bounded per wake.
//
// The order, each step only after the one before:
//   hello (unkeyed) -> setup (unkeyed; carries the key and the host's
//   version: both directions are keyed from here) -> CA installed ->
//   self-test (when setup asked for probes) -> selftest_report -> go -> the
//   main command (session 0) starts -> started or start_failed ->
//   stdout/stderr under the output credit, stdin under the stdin credit ->
//   exited, after the command's last output.
// Between the report and go, copy_ins, one at a time (copy_in, copy_data...,
// copy_end -> copy_in_done); from setup on, copy_outs, one at a time
// (copy_out, copy_credit... -> copy_out_data... -> copy_out_done), beside
// the command's output (session_copy.cc).
// From go until the main command has ended, `exec` opens more command
// sessions beside it (each with its own id, output credit and stdin window;
// at most kMaxExecSessions at once; one refused gets start_failed kRefused
// with the reason, and the others go on).
// Then the session waits for poweroff. run() returns why it ended:
// poweroff from the host, the host closing the port, a stop signal, too
// many bad frames, a setup of another protocol version, or a stream that
// cannot be followed. The caller powers off.
//
// Frames from the host that fail the MAC or the sequence are dropped and
// logged (console, and a log frame once keyed); the 16th ends the session,
// as the host does for the guest's. A frame that is valid but out of place
// (go before the report, stdin without credit, a message for a session that
// was never opened) is logged and ignored; one for an exec session that has
// ended (a credit racing its end) is ignored and counted only.
//
// When the main command's process exits, whatever it left running (a
// background job, a daemon that left the command's session, the exec
// sessions) is killed, so its pipes reach EOF and `exited` can follow the
// last output: one command per instance, as with `docker run`. A copy's tar
// is spared; when it ends and the command's output is still held open, the
// sweep runs again.
//
// With a `tty` (setup's or exec's) a command's stdin, stdout and stderr are
// a pty (command_launcher.h): its output comes as stdout frames, stdin_eof
// is the pty's EOF character (0x04) written after what stdin still holds,
// resize sets the pty's window (the kernel sends SIGWINCH), signal goes to
// the pty's foreground process group, and `exited` follows the main
// process's exit once the pty has no more output (the master reads EIO when
// the last holder of the slave is gone).
//
// Bounded memory: the frame reader's one buffer; an output queue that the
// pipes, a copy_out's stream and log lines stop filling at kOutputHighWater
// (so at most that plus one frame; a log line that finds it full goes to
// the console only); each command session's stdin window (flow_control.h);
// at most 1 + kMaxExecSessions command sessions; one copy_data frame
// (the port is not read while tar has not taken it, so the host's writes
// wait); what each tar prints, up to kDiagnosticBytes.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/unique_fd.h"
#include "guest/box_guest/ca_install.h"
#include "guest/box_guest/command_launcher.h"
#include "guest/box_guest/command_table.h"
#include "guest/box_guest/flow_control.h"
#include "guest/box_guest/network_setup.h"
#include "guest/box_guest/selftest.h"
#include "guest/box_guest/tar_job.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

inline constexpr int kMaxBadFrames = 16;
inline constexpr std::size_t kOutputHighWater = 128 * 1024;

struct SessionConfig {
  std::string agent = "box-guest/1";
  NetworkState network;
  CaPaths ca;
  int probe_timeout_ms = 2000;
};

class Session final : private ControlOutput {
 public:
  Session(base::UniqueFd control, base::UniqueFd signals, SessionConfig config, base::RandomSource& random);
  std::string run();

 private:
  // kGo: go came; the main command runs, or ran (its session says which).
  enum class Phase { kAwaitSetup, kSelftest, kAwaitGo, kGo };

  // Output (ControlOutput, for the command sessions too).
  void send(GuestMessage type, std::span<const std::uint8_t> payload) override;
  void log(const std::string& text) override;
  bool room() const override { return out_.size() - out_head_ < kOutputHighWater; }
  template <class M>
  void send_message(GuestMessage type, const M& m) {
    std::vector<std::uint8_t> payload;
    encode(m, payload);
    send(type, payload);
  }
  void flush_control();

  // Input.
  void read_control();
  void take_frames();
  void handle_frame(const Frame& f);
  void on_setup(std::span<const std::uint8_t> payload);
  void on_go();
  void on_exec(std::span<const std::uint8_t> payload);
  // The open command session a host message names, or nullptr (logged: the
  // frame is dropped).
  CommandSession* session_for(std::uint32_t id, std::string_view what);
  void bad_frame(std::string_view why);
  void end(std::string why);

  // Files in and out (session_copy.cc).
  struct CopyIn {
    TarJob tar;
    std::vector<std::uint8_t> pending;  // one copy_data frame tar has not taken yet
    std::size_t head = 0;
    bool end_received = false;
    std::uint64_t received = 0;
    std::uint64_t discarded = 0;  // bytes that came after tar stopped reading
  };
  struct CopyOut {
    TarJob tar;
    OutputCredit credit{0};
    std::uint64_t sent = 0;
  };
  void on_copy_in(std::span<const std::uint8_t> payload);
  void on_copy_data(std::span<const std::uint8_t> payload);
  void on_copy_end(std::span<const std::uint8_t> payload);
  void on_copy_out(std::span<const std::uint8_t> payload);
  void on_copy_credit(std::span<const std::uint8_t> payload);
  void write_copy_in();
  void read_copy_out();
  bool copy_in_blocked() const;  // tar has not taken the last copy_data: the port is not read
  bool reap_copy(pid_t pid, int status);
  void settle_copies();  // sends copy_in_done / copy_out_done for a copy that is over
  void copy_in_done(const CopyResult& r);
  void copy_out_done(const CopyResult& r);

  // The commands.
  void start_command();
  bool main_running() const;  // started (or starting) and not yet ended
  void reap();
  void kill_leftovers();
  void on_signals();

  std::string phase_name() const;

  base::UniqueFd control_;
  base::UniqueFd signals_;
  SessionConfig config_;
  base::RandomSource& random_;
  FrameReader reader_{Direction::kHostToGuest};
  FrameWriter writer_{Direction::kGuestToHost};
  std::vector<std::uint8_t> out_;
  std::size_t out_head_ = 0;

  Phase phase_ = Phase::kAwaitSetup;
  std::optional<Setup> setup_;
  std::optional<Selftest> selftest_;
  CommandSpec spec_;  // the main command's, from setup (a resize before go sets its window)
  CommandTable commands_;
  bool go_pending_ = false;                   // go came while a copy_in was open: start when it is over
  std::uint64_t unknown_session_frames_ = 0;  // host frames for a session that is not open
  // The highest exec id the host used: a frame for a lower one that is not
  // open names a session that ended (a credit racing its end: counted, not logged).
  std::uint32_t highest_exec_ = 0;

  std::optional<CopyIn> copy_in_;
  std::optional<CopyOut> copy_out_;

  int bad_frames_ = 0;
  std::size_t logs_dropped_ = 0;  // log lines kept off the channel by a full output queue
  std::optional<std::string> ended_;
};

}  // namespace abox::guest
