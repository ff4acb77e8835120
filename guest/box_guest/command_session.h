// CommandSession: one command's life in box-guest (docs/control-protocol.md,
// "Command sessions"): the main command (session 0, from setup and go) or
// an exec (session 1 and up, from `exec`). Each has its own process, its own
// stdout and stderr pipes (or pty), its own output credit, its own stdin
// window, its own window size and its own end; every frame it sends names
// its session.
//
// The life of one: start() forks it (command_launcher.h) -> kStarting; the
// start-status pipe's EOF says the exec happened -> `started`, kRunning (the
// first stdin credit with it when stdin is open); or the child reported a
// failure -> `start_failed`, kEnded. Output is read only within the credit
// and while the channel's queue has room (ControlOutput::room()); the main
// process is reaped (reaped()), and `exited` goes once it is and every
// output fd reached its end -> kEnded. The table (command_table.h) removes
// an ended session.
//
// When an exec's main process exits, its process group is killed (what it
// left running would hold its output open): an exec ends with its command,
// as the main command does (where box-guest, PID 1, sweeps every process;
// session.h does that one). A process that left the group and still holds
// the output keeps the session open until it ends.
//
// Bounded: the stdin window (flow_control.h), at most one frame of output
// read at a time, what the child wrote on its status pipe (5 bytes + 1).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "guest/box_guest/command_launcher.h"
#include "guest/box_guest/flow_control.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

// What a command session needs of the control channel.
class ControlOutput {
 public:
  virtual ~ControlOutput() = default;
  virtual void send(GuestMessage type, std::span<const std::uint8_t> payload) = 0;
  // box-guest's own diagnostics (the console, and a log frame).
  virtual void log(const std::string& text) = 0;
  // The queue to the host is below its high-water mark: more output may be read.
  virtual bool room() const = 0;
};

// The poll loop's registration: watch fd for events (-1: not now), call
// on_ready when it is ready.
using WatchFn = std::function<void(const base::UniqueFd& fd, short events, std::function<void()> on_ready)>;

class CommandSession {
 public:
  enum class State { kCreated, kStarting, kRunning, kEnded };

  CommandSession(std::uint32_t id, CommandSpec spec, std::uint32_t output_credit, ControlOutput& out);
  CommandSession(const CommandSession&) = delete;
  CommandSession& operator=(const CommandSession&) = delete;

  std::uint32_t id() const { return id_; }
  State state() const { return state_; }
  pid_t pid() const { return command_.pid; }
  const CommandSpec& spec() const { return spec_; }
  // The main process was reaped (its status known).
  bool reaped() const { return wait_status_.has_value(); }
  // Some output fd is still open (something holds the pipes or the pty).
  bool output_open() const { return command_.stdout_read || command_.stderr_read; }

  // Forks the command (kCreated only). On a failure to fork it sends
  // start_failed itself and ends.
  void start();

  // The host's messages for this session.
  void on_stdin(std::span<const std::uint8_t> bytes);
  void on_stdin_eof();
  void on_output_credit(std::uint32_t bytes) { credit_.grant(bytes); }
  void on_signal(std::uint8_t signo);
  void on_resize(const WindowSize& window);

  // The poll loop: what to watch now.
  void add_watches(const WatchFn& watch);
  // The kernel reported pid gone with this wait status: true when it was
  // this session's main process. An exec's process group is killed then.
  bool on_reaped(pid_t pid, int status);
  // Sends `exited` when the process was reaped and its output is all sent.
  void maybe_finish();

 private:
  void read_start_status();
  void read_output(base::UniqueFd& fd, GuestMessage type);
  bool output_hung_up(base::UniqueFd& fd);
  short output_events(const base::UniqueFd& fd) const;
  void write_stdin();
  void write_eof_char();
  void close_stdin_if_done();
  void send_start_failed(StartFailed f);
  template <class M>
  void send_message(GuestMessage type, const M& m) {
    std::vector<std::uint8_t> payload;
    encode(m, payload);
    out_.send(type, payload);
  }
  std::string label() const;

  std::uint32_t id_;
  CommandSpec spec_;
  ControlOutput& out_;
  State state_ = State::kCreated;
  LaunchedCommand command_;
  std::vector<std::uint8_t> start_status_;
  std::optional<int> wait_status_;
  OutputCredit credit_;
  StdinFlow stdin_;
  bool stdin_eof_ = false;
  bool eof_char_pending_ = false;  // tty: 0x04 goes to the pty once stdin is drained
  std::size_t stdin_dropped_ = 0;
};

}  // namespace abox::guest
