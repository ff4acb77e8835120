// Session (see session.h for the order of a session and its bounds).
#include "guest/box_guest/session.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "guest/box_guest/console.h"
#include "guest/box_guest/process_sweep.h"

namespace abox::guest {
namespace {

constexpr int kMaxReadsPerWake = 16;
constexpr int kMaxFramesPerRead = 1024;
constexpr int kMaxReapsPerWake = 4096;

std::size_t readable_bytes(int fd) {
  int n = 0;
  if (::ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<std::size_t>(n);
}

}  // namespace

Session::Session(base::UniqueFd control, base::UniqueFd signals, SessionConfig config,
                 base::RandomSource& random)
    : control_(std::move(control)),
      signals_(std::move(signals)),
      config_(std::move(config)),
      random_(random) {}

// ---- output ----------------------------------------------------------------

void Session::send(std::uint8_t type, const std::vector<std::uint8_t>& payload) {
  writer_.append(out_, type, payload);
}

void Session::log(const std::string& text) {
  console_line(text);
  if (!writer_.keyed()) return;  // before setup only hello may be sent
  // A host that sends frames worth a log line and never reads could grow the
  // queue without end: past the high-water mark the line stays on the console.
  if (out_.size() - out_head_ >= kOutputHighWater) {
    if (logs_dropped_++ == 0) console_line("the output queue is full: log lines go to the console only");
    return;
  }
  LogLine line{text.size() > kMaxLogText ? text.substr(0, kMaxLogText) : text};
  send_message(GuestMessage::kLog, line);
}

void Session::flush_control() {
  for (int i = 0; i < kMaxReadsPerWake && out_head_ < out_.size(); ++i) {
    ssize_t n = ::write(control_.get(), out_.data() + out_head_, out_.size() - out_head_);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return end(std::string("writing the control port: ") + std::strerror(errno));
    }
    out_head_ += static_cast<std::size_t>(n);
  }
  if (out_head_ == out_.size()) {
    out_.clear();
    out_head_ = 0;
  } else if (out_head_ > kOutputHighWater) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_head_));
    out_head_ = 0;
  }
}

// ---- input -----------------------------------------------------------------

void Session::end(std::string why) {
  if (!ended_) ended_ = std::move(why);
}

void Session::read_control() {
  for (int i = 0; i < kMaxReadsPerWake && !ended_ && !copy_in_blocked(); ++i) {
    auto space = reader_.space();
    if (space.empty()) return take_frames();  // cannot happen: frames are taken after every read
    ssize_t n = ::read(control_.get(), space.data(), space.size());
    if (n == 0) return end("the host closed the control channel");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return end(std::string("reading the control port: ") + std::strerror(errno));
    }
    reader_.commit(static_cast<std::size_t>(n));
    take_frames();
  }
}

void Session::take_frames() {
  for (int i = 0; i < kMaxFramesPerRead && !ended_ && !copy_in_blocked(); ++i) {
    auto f = reader_.next();
    if (!f.ok()) {
      if (f.error() == FrameError::kLengthTooLarge || f.error() == FrameError::kLengthTooSmall)
        return end("the host's stream cannot be followed: " + std::string(frame_error_name(f.error())));
      bad_frame(frame_error_name(f.error()));
      continue;
    }
    if (!*f) return;
    handle_frame(**f);
  }
}

void Session::bad_frame(std::string_view why) {
  ++bad_frames_;
  log("dropped a frame from the host: " + std::string(why) + " (" + std::to_string(bad_frames_) + " of " +
      std::to_string(kMaxBadFrames) + ")");
  if (bad_frames_ >= kMaxBadFrames) end(std::to_string(kMaxBadFrames) + " bad frames from the host");
}

void Session::handle_frame(const Frame& f) {
  const auto type = static_cast<HostMessage>(f.type);
  if (!reader_.keyed()) {
    if (type != HostMessage::kSetup)
      return bad_frame("before setup only setup is accepted, got " + std::string(host_message_name(f.type)));
    return on_setup(f.payload);
  }
  switch (type) {
    case HostMessage::kSetup:
      return log("a second setup: ignored");
    case HostMessage::kGo:
      if (!decode_empty(f.payload)) return log("a go with a payload: ignored");
      return on_go();
    case HostMessage::kStdin: {
      if (!spec_.stdin_open || phase_ != Phase::kRunning || stdin_eof_)
        return log("stdin while " + phase_name() + (spec_.stdin_open ? "" : " with stdin closed") +
                   ": dropped");
      std::size_t dropped = stdin_.accept(f.payload);
      if (dropped > 0) {
        if (stdin_dropped_ == 0) log("stdin over the credit given: dropped (counted from here)");
        stdin_dropped_ += dropped;
      }
      return;
    }
    case HostMessage::kStdinEof:
      if (!decode_empty(f.payload)) return log("a stdin_eof with a payload: ignored");
      if (stdin_eof_) return log("a second stdin_eof: ignored");
      stdin_eof_ = true;
      // With a pty, end of input is its EOF character, typed after what is buffered.
      if (spec_.tty && command_.stdin_write) eof_char_pending_ = true;
      return close_stdin_if_done();
    case HostMessage::kOutputCredit: {
      auto credit = decode_credit(f.payload);
      if (!credit) return log("an output_credit that does not decode: ignored");
      return credit_.grant(credit->bytes);
    }
    case HostMessage::kSignal:
      return on_signal(f.payload);
    case HostMessage::kPoweroff:
      return end("the host asked to power off");
    case HostMessage::kResize:
      return on_resize(f.payload);
    case HostMessage::kCopyIn:
      return on_copy_in(f.payload);
    case HostMessage::kCopyData:
      return on_copy_data(f.payload);
    case HostMessage::kCopyEnd:
      return on_copy_end(f.payload);
    case HostMessage::kCopyOut:
      return on_copy_out(f.payload);
    case HostMessage::kCopyCredit:
      return on_copy_credit(f.payload);
  }
  log("a frame of unknown type " + std::to_string(f.type) + ": ignored");
}

void Session::on_go() {
  if (phase_ != Phase::kAwaitGo) return log("go while " + phase_name() + ": ignored");
  if (copy_in_) {
    // The host waits for copy_in_done before go; one that did not gets its
    // command once the copy is over rather than a session that hangs.
    log("go while a copy_in is open: the command starts when it is over");
    go_pending_ = true;
    return;
  }
  start_command();
}

void Session::on_signal(std::span<const std::uint8_t> payload) {
  auto sig = decode_signal(payload);
  if (!sig) return log("a signal that does not decode: ignored");
  if (command_.pid <= 0 || wait_status_)
    return log("signal " + std::to_string(sig->signo) + ": no command runs");
  // With a pty, the job in the foreground (a shell's child, say) is the one
  // the operator means; without one, the command's own process group.
  pid_t group = command_.pid;
  if (command_.pty) {
    const pid_t foreground = ::tcgetpgrp(command_.pty.get());
    if (foreground > 0) group = foreground;
  }
  if (::kill(-group, sig->signo) != 0)
    return log("signal " + std::to_string(sig->signo) + ": " + std::strerror(errno));
  console_line("signal " + std::to_string(sig->signo) + " to process group " + std::to_string(group));
}

void Session::on_resize(std::span<const std::uint8_t> payload) {
  auto window = decode_window_size(payload);
  if (!window) return log("a resize that does not decode: ignored");
  if (!spec_.tty) return log("a resize without a tty: ignored");
  spec_.window = *window;  // before go: the pty starts at this size
  if (!command_.pty) return;
  winsize ws{};
  ws.ws_row = window->rows;
  ws.ws_col = window->cols;
  if (::ioctl(command_.pty.get(), TIOCSWINSZ, &ws) != 0) log(std::string("resize: ") + std::strerror(errno));
}

void Session::on_setup(std::span<const std::uint8_t> payload) {
  auto setup = decode_setup(payload);
  if (!setup) return end("setup does not decode");
  reader_.set_key(setup->key);
  writer_.set_key(setup->key);
  setup->key.fill(0);  // the reader and writer hold it now; this copy goes
  setup_ = std::move(*setup);
  spec_ = CommandSpec{setup_->argv, setup_->env,        setup_->workdir, setup_->uid,
                      setup_->gid,  setup_->stdin_open, setup_->tty,     setup_->window};
  credit_ = OutputCredit(setup_->output_credit);
  console_line("setup: " + std::to_string(setup_->argv.size()) + " args, " +
               std::to_string(setup_->env.size()) + " env, " + std::to_string(setup_->probes.size()) +
               " probes, uid " + std::to_string(setup_->uid) + (setup_->tty ? ", tty" : ""));

  if (!setup_->ca_pem.empty()) {
    if (auto r = install_ca(setup_->ca_pem, config_.ca); !r.ok()) {
      log("installing the instance CA failed: " + r.error());
    } else {
      console_line("installed the instance CA in " + config_.ca.dir);
    }
  }
  if (setup_->probes.empty()) {
    phase_ = Phase::kAwaitGo;
    return;
  }
  SelftestContext context;
  context.network_up = config_.network.up;
  context.dns_server = config_.network.dns_server;
  context.env = setup_->env;
  context.timeout_ms = config_.probe_timeout_ms;
  selftest_.emplace(setup_->probes, std::move(context), random_, monotonic_ms());
  phase_ = Phase::kSelftest;
}

// ---- the command -----------------------------------------------------------

void Session::start_command() {
  auto launched = launch_command(spec_);
  if (!launched.ok()) {
    StartFailed f = launched.error();
    log("start failed: " + f.detail);
    send_message(GuestMessage::kStartFailed, f);
    phase_ = Phase::kEnded;
    return;
  }
  command_ = std::move(*launched);
  phase_ = Phase::kStarting;
}

void Session::read_start_status() {
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
      console_line("started pid " + std::to_string(command_.pid));
      send_message(GuestMessage::kStarted, Started{static_cast<std::uint32_t>(command_.pid)});
      phase_ = Phase::kRunning;
      if (spec_.stdin_open) send_message(GuestMessage::kStdinCredit, Credit{stdin_.open()});
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
    log("start failed: " + f.detail);
    send_message(GuestMessage::kStartFailed, f);
    command_.stdout_read.reset();
    command_.stderr_read.reset();
    command_.stdin_write.reset();
    phase_ = Phase::kEnded;
    return;
  }
}

short Session::output_events(const base::UniqueFd& pipe) const {
  if (!pipe || out_.size() - out_head_ >= kOutputHighWater) return -1;  // not polled now
  if (credit_.available() > 0) return POLLIN;
  // A pty's master says POLLHUP while the kernel may still hold output on its
  // way to the master's buffer, which FIONREAD does not count: its end is
  // only ever learned by reading (EIO), so it waits for credit.
  if (spec_.tty) return -1;
  // No credit: watch only for the hang-up of an empty pipe (EOF needs no credit).
  return readable_bytes(pipe.get()) == 0 ? 0 : -1;
}

void Session::read_output(base::UniqueFd& pipe, GuestMessage type) {
  std::size_t want = credit_.allowance(kMaxPayload);
  if (want == 0) {
    output_hung_up(pipe);
    return;
  }
  std::vector<std::uint8_t> chunk(want);
  ssize_t n = ::read(pipe.get(), chunk.data(), chunk.size());
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    n = 0;
  }
  if (n == 0) {
    pipe.reset();
    return maybe_finish();
  }
  chunk.resize(static_cast<std::size_t>(n));
  credit_.spend(chunk.size());
  send(static_cast<std::uint8_t>(type), chunk);
}

bool Session::output_hung_up(base::UniqueFd& pipe) {
  if (readable_bytes(pipe.get()) != 0) return false;
  pipe.reset();
  maybe_finish();
  return true;
}

void Session::write_stdin() {
  auto pending = stdin_.pending();
  if (!command_.stdin_write) return;
  if (pending.empty()) return close_stdin_if_done();  // the pty's EOF character may wait
  ssize_t n = ::write(command_.stdin_write.get(), pending.data(), pending.size());
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    // EPIPE: the command closed its stdin. What the host sends from now on is dropped.
    console_line(std::string("the command's stdin: ") + std::strerror(errno));
    stdin_.discard();
    command_.stdin_write.reset();
    return;
  }
  if (auto grant = stdin_.consumed(static_cast<std::size_t>(n)); grant > 0)
    send_message(GuestMessage::kStdinCredit, Credit{grant});
  close_stdin_if_done();
}

void Session::write_eof_char() {
  const std::uint8_t eof = 0x04;
  ssize_t n = ::write(command_.stdin_write.get(), &eof, 1);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) console_line(std::string("the pty: ") + std::strerror(errno));
  eof_char_pending_ = false;
}

void Session::close_stdin_if_done() {
  if (!stdin_eof_ || stdin_.buffered() != 0 || !command_.stdin_write) return;
  // A pty stays open (closing the master would hang up the terminal): its end
  // of input is the EOF character.
  if (spec_.tty) {
    if (eof_char_pending_) write_eof_char();
    return;
  }
  command_.stdin_write.reset();
}

void Session::reap() {
  for (int i = 0; i < kMaxReapsPerWake; ++i) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (reap_copy(pid, status)) continue;
    if (pid != command_.pid || wait_status_) continue;  // an orphan the kernel gave init
    wait_status_ = status;
    kill_leftovers();
    maybe_finish();
  }
}

void Session::kill_leftovers() {
  // What the command left running would hold its pipes open. As the VM's
  // init, box-guest ends every other process (a daemon may have left the
  // command's session) but a copy's tar; anywhere else (the unit tests) only
  // the command's process group.
  if (::getpid() != 1) {
    ::kill(-command_.pid, SIGKILL);
    return;
  }
  std::vector<pid_t> spare;
  if (copy_in_) spare.push_back(copy_in_->tar.pid());
  if (copy_out_) spare.push_back(copy_out_->tar.pid());
  kill_all_processes_but(spare);
}

void Session::maybe_finish() {
  if (phase_ != Phase::kRunning || !wait_status_ || command_.stdout_read || command_.stderr_read) return;
  Exited e;
  if (WIFSIGNALED(*wait_status_)) {
    e.signalled = true;
    e.value = static_cast<std::uint32_t>(WTERMSIG(*wait_status_));
  } else {
    e.value = static_cast<std::uint32_t>(WEXITSTATUS(*wait_status_));
  }
  console_line(std::string("the command ") + (e.signalled ? "died of signal " : "exited ") +
               std::to_string(e.value));
  send_message(GuestMessage::kExited, e);
  command_.stdin_write.reset();
  command_.pty.reset();
  phase_ = Phase::kEnded;
}

void Session::on_signals() {
  for (int i = 0; i < kMaxReadsPerWake; ++i) {
    signalfd_siginfo info{};
    ssize_t n = ::read(signals_.get(), &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) return;
    if (info.ssi_signo == SIGCHLD) {
      reap();
    } else {
      end("signal " + std::to_string(info.ssi_signo) + " (" + strsignal(static_cast<int>(info.ssi_signo)) +
          ")");
    }
  }
}

std::string Session::phase_name() const {
  switch (phase_) {
    case Phase::kAwaitSetup:
      return "waiting for setup";
    case Phase::kSelftest:
      return "running the self-test";
    case Phase::kAwaitGo:
      return "waiting for go";
    case Phase::kStarting:
      return "starting the command";
    case Phase::kRunning:
      return "the command runs";
    case Phase::kEnded:
      return "the command has ended";
  }
  return "?";
}

// ---- the loop --------------------------------------------------------------

std::string Session::run() {
  Hello hello;
  hello.agent = config_.agent;
  hello.uptime_ms = uptime_ms();
  hello.network_up = config_.network.up;
  hello.network = config_.network.summary.substr(0, kMaxShortText);
  send_message(GuestMessage::kHello, hello);
  console_line("hello sent; waiting for setup");

  // Each polled fd with what to do when it is ready. A handler may close an
  // fd polled later in the same round: the owner is checked before its turn.
  struct Watch {
    const base::UniqueFd* owner;
    std::function<void()> on_ready;
  };
  std::vector<pollfd> fds;
  std::vector<Watch> watches;
  while (!ended_) {
    fds.clear();
    watches.clear();
    const std::size_t kControl = 0, kSignals = 1;
    // While tar has not taken the last copy_data the port is not read, so the host's writes wait.
    const short control_events =
        static_cast<short>((copy_in_blocked() ? 0 : POLLIN) | (out_head_ < out_.size() ? POLLOUT : 0));
    fds.push_back({control_events != 0 ? control_.get() : -1, control_events, 0});
    fds.push_back({signals_.get(), POLLIN, 0});
    auto watch = [&](const base::UniqueFd& fd, short events, std::function<void()> on_ready) {
      if (!fd || events < 0) return;
      fds.push_back({fd.get(), events, 0});
      watches.push_back({&fd, std::move(on_ready)});
    };
    watch(command_.start_status, POLLIN, [this] { read_start_status(); });
    watch(command_.stdout_read, output_events(command_.stdout_read),
          [this] { read_output(command_.stdout_read, GuestMessage::kStdout); });
    watch(command_.stderr_read, output_events(command_.stderr_read),
          [this] { read_output(command_.stderr_read, GuestMessage::kStderr); });
    watch(command_.stdin_write, stdin_.buffered() > 0 || eof_char_pending_ ? POLLOUT : -1,
          [this] { write_stdin(); });
    for (TarJob* tar : {copy_in_ ? &copy_in_->tar : nullptr, copy_out_ ? &copy_out_->tar : nullptr}) {
      if (tar == nullptr) continue;
      watch(tar->start_status(), POLLIN, [tar] { tar->read_start_status(); });
      watch(tar->diagnostics_a(), POLLIN, [tar] { tar->read_diagnostics(tar->diagnostics_a()); });
      watch(tar->diagnostics_b(), POLLIN, [tar] { tar->read_diagnostics(tar->diagnostics_b()); });
    }
    if (copy_in_) watch(copy_in_->tar.input(), copy_in_blocked() ? POLLOUT : -1, [this] { write_copy_in(); });
    if (copy_out_) {
      const bool room = out_.size() - out_head_ < kOutputHighWater && copy_out_->credit.available() > 0;
      watch(copy_out_->tar.stream(), room ? POLLIN : -1, [this] { read_copy_out(); });
    }
    const std::size_t watched_to = fds.size();
    if (selftest_) selftest_->add_poll_fds(fds);

    int timeout = -1;
    if (selftest_) {
      if (auto deadline = selftest_->next_deadline())
        timeout = static_cast<int>(std::max<std::int64_t>(0, *deadline - monotonic_ms()));
    }
    int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return std::string("poll: ") + std::strerror(errno);
    }

    if (fds[kSignals].revents != 0) on_signals();
    const short control = fds[kControl].revents;
    if (control & (POLLIN | POLLERR)) read_control();
    // POLLHUP without data: the host end went away (the driver's way of saying it).
    if ((control_events & POLLIN) && (control & POLLHUP) && !(control & POLLIN))
      end("the host closed the control channel");
    if (ended_) break;

    for (std::size_t i = 2; i < watched_to; ++i) {
      const Watch& w = watches[i - 2];
      if (fds[i].revents != 0 && w.owner->get() == fds[i].fd) w.on_ready();
    }

    if (selftest_ && phase_ == Phase::kSelftest) {
      selftest_->on_poll(std::span(fds).subspan(watched_to), monotonic_ms());
      if (selftest_->done()) {
        auto report = selftest_->report();
        std::string summary = "self-test:";
        for (const auto& r : report.results)
          summary +=
              " " + std::string(probe_kind_name(r.kind)) + "=" + std::string(probe_outcome_name(r.outcome));
        console_line(summary);
        send_message(GuestMessage::kSelftestReport, report);
        selftest_.reset();
        phase_ = Phase::kAwaitGo;
      }
    }
    settle_copies();
    // Frames that waited in the reader while tar took a copy_data.
    if (!copy_in_blocked()) take_frames();
    flush_control();
  }
  // Say goodbye if the port still takes it; never wait for it.
  flush_control();
  return *ended_;
}

}  // namespace abox::guest
