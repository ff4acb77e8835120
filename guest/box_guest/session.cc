// Session (see session.h for the order of a session and its bounds).
#include "guest/box_guest/session.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "guest/box_guest/console.h"

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

template <class M>
void Session::send_message(GuestMessage type, const M& m) {
  std::vector<std::uint8_t> payload;
  encode(m, payload);
  send(static_cast<std::uint8_t>(type), payload);
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
  for (int i = 0; i < kMaxReadsPerWake && !ended_; ++i) {
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
  for (int i = 0; i < kMaxFramesPerRead && !ended_; ++i) {
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
      if (phase_ != Phase::kAwaitGo) return log("go while " + phase_name() + ": ignored");
      return start_command();
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
      stdin_eof_ = true;
      return close_stdin_if_done();
    case HostMessage::kOutputCredit: {
      auto credit = decode_credit(f.payload);
      if (!credit) return log("an output_credit that does not decode: ignored");
      return credit_.grant(credit->bytes);
    }
    case HostMessage::kSignal: {
      auto sig = decode_signal(f.payload);
      if (!sig) return log("a signal that does not decode: ignored");
      if (command_.pid <= 0 || wait_status_)
        return log("signal " + std::to_string(sig->signo) + ": no command runs");
      if (::kill(-command_.pid, sig->signo) != 0)
        return log("signal " + std::to_string(sig->signo) + ": " + std::strerror(errno));
      console_line("signal " + std::to_string(sig->signo) + " to process group " +
                   std::to_string(command_.pid));
      return;
    }
    case HostMessage::kPoweroff:
      return end("the host asked to power off");
  }
  log("a frame of unknown type " + std::to_string(f.type) + ": ignored");
}

void Session::on_setup(std::span<const std::uint8_t> payload) {
  auto setup = decode_setup(payload);
  if (!setup) return end("setup does not decode");
  reader_.set_key(setup->key);
  writer_.set_key(setup->key);
  setup->key.fill(0);  // the reader and writer hold it now; this copy goes
  setup_ = std::move(*setup);
  spec_ =
      CommandSpec{setup_->argv, setup_->env, setup_->workdir, setup_->uid, setup_->gid, setup_->stdin_open};
  credit_ = OutputCredit(setup_->output_credit);
  console_line("setup: " + std::to_string(setup_->argv.size()) + " args, " +
               std::to_string(setup_->env.size()) + " env, " + std::to_string(setup_->probes.size()) +
               " probes, uid " + std::to_string(setup_->uid));

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
  if (pending.empty() || !command_.stdin_write) return;
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

void Session::close_stdin_if_done() {
  if (stdin_eof_ && stdin_.buffered() == 0 && command_.stdin_write) command_.stdin_write.reset();
}

void Session::reap() {
  for (int i = 0; i < kMaxReapsPerWake; ++i) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (pid != command_.pid || wait_status_) continue;  // an orphan the kernel gave init
    wait_status_ = status;
    kill_leftovers();
    maybe_finish();
  }
}

void Session::kill_leftovers() {
  // What the command left running would hold its pipes open. As the VM's
  // init, box-guest ends every other process (a daemon may have left the
  // command's session); anywhere else (the unit tests) only the command's
  // process group.
  if (::getpid() == 1) {
    ::kill(-1, SIGKILL);
  } else {
    ::kill(-command_.pid, SIGKILL);
  }
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

  std::vector<pollfd> fds;
  while (!ended_) {
    fds.clear();
    const std::size_t kControl = 0, kSignals = 1;
    fds.push_back({control_.get(), static_cast<short>(POLLIN | (out_head_ < out_.size() ? POLLOUT : 0)), 0});
    fds.push_back({signals_.get(), POLLIN, 0});
    auto watch = [&](const base::UniqueFd& fd, short events) -> std::ptrdiff_t {
      if (!fd || events < 0) return -1;
      fds.push_back({fd.get(), events, 0});
      return static_cast<std::ptrdiff_t>(fds.size() - 1);
    };
    const auto status_at = watch(command_.start_status, POLLIN);
    const auto stdout_at = watch(command_.stdout_read, output_events(command_.stdout_read));
    const auto stderr_at = watch(command_.stderr_read, output_events(command_.stderr_read));
    const auto stdin_at = watch(command_.stdin_write, stdin_.buffered() > 0 ? POLLOUT : -1);
    const std::size_t probes_at = fds.size();
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
    if ((control & POLLHUP) && !(control & POLLIN)) end("the host closed the control channel");
    if (ended_) break;

    if (status_at >= 0 && fds[static_cast<std::size_t>(status_at)].revents != 0) read_start_status();
    if (stdout_at >= 0 && fds[static_cast<std::size_t>(stdout_at)].revents != 0 && command_.stdout_read)
      read_output(command_.stdout_read, GuestMessage::kStdout);
    if (stderr_at >= 0 && fds[static_cast<std::size_t>(stderr_at)].revents != 0 && command_.stderr_read)
      read_output(command_.stderr_read, GuestMessage::kStderr);
    if (stdin_at >= 0 && fds[static_cast<std::size_t>(stdin_at)].revents != 0) write_stdin();

    if (selftest_ && phase_ == Phase::kSelftest) {
      selftest_->on_poll(std::span(fds).subspan(probes_at), monotonic_ms());
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
    flush_control();
  }
  // Say goodbye if the port still takes it; never wait for it.
  flush_control();
  return *ended_;
}

}  // namespace abox::guest
