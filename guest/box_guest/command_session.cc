// CommandSession (see command_session.h for the life of one).
#include "guest/box_guest/command_session.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "guest/box_guest/console.h"

namespace abox::guest {
namespace {

constexpr int kMaxReadsPerWake = 16;

std::size_t readable_bytes(int fd) {
  int n = 0;
  if (::ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<std::size_t>(n);
}

}  // namespace

CommandSession::CommandSession(std::uint32_t id, CommandSpec spec, std::uint32_t output_credit,
                               ControlOutput& out)
    : id_(id), spec_(std::move(spec)), out_(out), credit_(output_credit) {}

std::string CommandSession::label() const {
  return id_ == kMainSession ? std::string("the command") : "session " + std::to_string(id_);
}

void CommandSession::send_start_failed(StartFailed f) {
  f.session = id_;
  out_.log(label() + ": start failed: " + f.detail);
  send_message(GuestMessage::kStartFailed, f);
  command_.stdout_read.reset();
  command_.stderr_read.reset();
  command_.stdin_write.reset();
  command_.pty.reset();
  state_ = State::kEnded;
}

void CommandSession::start() {
  if (state_ != State::kCreated) return;
  auto launched = launch_command(spec_);
  if (!launched.ok()) return send_start_failed(launched.error());
  command_ = std::move(*launched);
  state_ = State::kStarting;
}

void CommandSession::read_start_status() {
  std::uint8_t buf[kStartStatusBytes + 1];
  for (int i = 0; i < kMaxReadsPerWake; ++i) {
    ssize_t n = ::read(command_.start_status.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      n = 0;  // treat as EOF with what came
    }
    if (n > 0) {
      start_status_.insert(start_status_.end(), buf, buf + n);
      if (start_status_.size() > kStartStatusBytes + 1) start_status_.resize(kStartStatusBytes + 1);
      continue;
    }
    command_.start_status.reset();
    if (start_status_.empty()) {
      console_line(label() + ": started pid " + std::to_string(command_.pid));
      send_message(GuestMessage::kStarted, Started{id_, static_cast<std::uint32_t>(command_.pid)});
      state_ = State::kRunning;
      if (spec_.stdin_open) send_message(GuestMessage::kStdinCredit, SessionCredit{id_, stdin_.open()});
      return maybe_finish();
    }
    StartFailed f;
    if (auto decoded = decode_start_status(start_status_)) {
      f = *decoded;
    } else {
      f.reason = StartFailure::kOther;
      f.error = EPROTO;
    }
    f.detail = start_failure_text(f, spec_);
    return send_start_failed(std::move(f));
  }
}

short CommandSession::output_events(const base::UniqueFd& fd) const {
  if (!fd || !out_.room()) return -1;  // not polled now
  if (credit_.available() > 0) return POLLIN;
  // A pty's master says POLLHUP while the kernel may still hold output on its
  // way to the master's buffer, which FIONREAD does not count: its end is
  // only ever learned by reading (EIO), so it waits for credit.
  if (spec_.tty) return -1;
  // No credit: watch only for the hang-up of an empty pipe (EOF needs no credit).
  return readable_bytes(fd.get()) == 0 ? 0 : -1;
}

void CommandSession::read_output(base::UniqueFd& fd, GuestMessage type) {
  std::size_t want = credit_.allowance(kMaxStreamBytes);
  if (want == 0) {
    output_hung_up(fd);
    return;
  }
  std::vector<std::uint8_t> chunk(want);
  ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    n = 0;  // EIO from a pty's master: every holder of the slave is gone
  }
  if (n == 0) {
    fd.reset();
    return maybe_finish();
  }
  chunk.resize(static_cast<std::size_t>(n));
  credit_.spend(chunk.size());
  send_message(type, SessionData{id_, chunk});
}

bool CommandSession::output_hung_up(base::UniqueFd& fd) {
  if (readable_bytes(fd.get()) != 0) return false;
  fd.reset();
  maybe_finish();
  return true;
}

void CommandSession::on_stdin(std::span<const std::uint8_t> bytes) {
  if (!spec_.stdin_open || state_ != State::kRunning || stdin_eof_) {
    out_.log(label() + ": stdin " + (spec_.stdin_open ? "while it does not run" : "with stdin closed") +
             ": dropped");
    return;
  }
  std::size_t dropped = stdin_.accept(bytes);
  if (dropped > 0) {
    if (stdin_dropped_ == 0) out_.log(label() + ": stdin over the credit given: dropped (counted from here)");
    stdin_dropped_ += dropped;
  }
}

void CommandSession::on_stdin_eof() {
  if (stdin_eof_) return out_.log(label() + ": a second stdin_eof: ignored");
  stdin_eof_ = true;
  // With a pty, end of input is its EOF character, typed after what is buffered.
  if (spec_.tty && command_.stdin_write) eof_char_pending_ = true;
  close_stdin_if_done();
}

void CommandSession::on_signal(std::uint8_t signo) {
  if (command_.pid <= 0 || wait_status_)
    return out_.log(label() + ": signal " + std::to_string(signo) + ": it does not run");
  // With a pty, the job in the foreground (a shell's child, say) is the one
  // the operator means; without one, the command's own process group.
  pid_t group = command_.pid;
  if (command_.pty) {
    const pid_t foreground = ::tcgetpgrp(command_.pty.get());
    if (foreground > 0) group = foreground;
  }
  if (::kill(-group, signo) != 0)
    return out_.log(label() + ": signal " + std::to_string(signo) + ": " + std::strerror(errno));
  console_line(label() + ": signal " + std::to_string(signo) + " to process group " + std::to_string(group));
}

void CommandSession::on_resize(const WindowSize& window) {
  if (!spec_.tty) return out_.log(label() + ": a resize without a tty: ignored");
  spec_.window = window;  // before it starts: the pty starts at this size
  if (!command_.pty) return;
  winsize ws{};
  ws.ws_row = window.rows;
  ws.ws_col = window.cols;
  if (::ioctl(command_.pty.get(), TIOCSWINSZ, &ws) != 0)
    out_.log(label() + ": resize: " + std::strerror(errno));
}

void CommandSession::write_stdin() {
  auto pending = stdin_.pending();
  if (!command_.stdin_write) return;
  if (pending.empty()) return close_stdin_if_done();  // the pty's EOF character may wait
  ssize_t n = ::write(command_.stdin_write.get(), pending.data(), pending.size());
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    // EPIPE: the command closed its stdin. What the host sends from now on is dropped.
    console_line(label() + ": its stdin: " + std::strerror(errno));
    stdin_.discard();
    command_.stdin_write.reset();
    return;
  }
  if (auto grant = stdin_.consumed(static_cast<std::size_t>(n)); grant > 0)
    send_message(GuestMessage::kStdinCredit, SessionCredit{id_, grant});
  close_stdin_if_done();
}

void CommandSession::write_eof_char() {
  const std::uint8_t eof = 0x04;
  ssize_t n = ::write(command_.stdin_write.get(), &eof, 1);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) console_line(label() + ": the pty: " + std::strerror(errno));
  eof_char_pending_ = false;
}

void CommandSession::close_stdin_if_done() {
  if (!stdin_eof_ || stdin_.buffered() != 0 || !command_.stdin_write) return;
  // A pty stays open (closing the master would hang up the terminal): its end
  // of input is the EOF character.
  if (spec_.tty) {
    if (eof_char_pending_) write_eof_char();
    return;
  }
  command_.stdin_write.reset();
}

void CommandSession::add_watches(const WatchFn& watch) {
  watch(command_.start_status, POLLIN, [this] { read_start_status(); });
  watch(command_.stdout_read, output_events(command_.stdout_read),
        [this] { read_output(command_.stdout_read, GuestMessage::kStdout); });
  watch(command_.stderr_read, output_events(command_.stderr_read),
        [this] { read_output(command_.stderr_read, GuestMessage::kStderr); });
  watch(command_.stdin_write, stdin_.buffered() > 0 || eof_char_pending_ ? POLLOUT : -1,
        [this] { write_stdin(); });
}

bool CommandSession::on_reaped(pid_t pid, int status) {
  if (pid != command_.pid || wait_status_) return false;
  wait_status_ = status;
  // An exec ends with its command: what it left in its process group would
  // hold its output open. (The main command's leftovers are the session's
  // to sweep: as PID 1 it ends every process but a copy's tar.)
  if (id_ != kMainSession) ::kill(-command_.pid, SIGKILL);
  return true;
}

void CommandSession::maybe_finish() {
  if (state_ != State::kRunning || !wait_status_ || output_open()) return;
  Exited e;
  e.session = id_;
  if (WIFSIGNALED(*wait_status_)) {
    e.signalled = true;
    e.value = static_cast<std::uint32_t>(WTERMSIG(*wait_status_));
  } else {
    e.value = static_cast<std::uint32_t>(WEXITSTATUS(*wait_status_));
  }
  console_line(label() + (e.signalled ? " died of signal " : " exited ") + std::to_string(e.value));
  send_message(GuestMessage::kExited, e);
  command_.stdin_write.reset();
  command_.pty.reset();
  state_ = State::kEnded;
}

}  // namespace abox::guest
