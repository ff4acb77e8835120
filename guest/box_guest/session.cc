// Session (see session.h for the order of a session and its bounds).
#include "guest/box_guest/session.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "base/byte_reader.h"
#include "guest/box_guest/console.h"
#include "guest/box_guest/process_sweep.h"

namespace abox::guest {
namespace {

constexpr int kMaxReadsPerWake = 16;
constexpr int kMaxFramesPerRead = 1024;
constexpr int kMaxReapsPerWake = 4096;

}  // namespace

Session::Session(base::UniqueFd control, base::UniqueFd signals, SessionConfig config,
                 base::RandomSource& random)
    : control_(std::move(control)),
      signals_(std::move(signals)),
      config_(std::move(config)),
      random_(random) {}

// ---- output ----------------------------------------------------------------

void Session::send(GuestMessage type, std::span<const std::uint8_t> payload) {
  writer_.append(out_, static_cast<std::uint8_t>(type), payload);
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

CommandSession* Session::session_for(std::uint32_t id, std::string_view what) {
  CommandSession* c = commands_.find(id);
  if (c == nullptr) {
    ++unknown_session_frames_;
    // A session that ended is one the host may still write to for a moment
    // (a grant, a resize on its way when the end came): dropped quietly.
    if (id != kMainSession && id <= highest_exec_) return nullptr;
    log(std::string(what) + " for session " + std::to_string(id) + ", which is not open: dropped (" +
        std::to_string(unknown_session_frames_) + " so far)");
  }
  return c;
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
    case HostMessage::kExec:
      return on_exec(f.payload);
    case HostMessage::kStdin: {
      auto m = decode_session_data(f.payload);
      if (!m) return log("a stdin that does not decode: ignored");
      if (auto* c = session_for(m->session, "stdin")) c->on_stdin(m->bytes);
      return;
    }
    case HostMessage::kStdinEof: {
      auto m = decode_session_ref(f.payload);
      if (!m) return log("a stdin_eof that does not decode: ignored");
      if (auto* c = session_for(m->session, "stdin_eof")) c->on_stdin_eof();
      return;
    }
    case HostMessage::kOutputCredit: {
      auto m = decode_session_credit(f.payload);
      if (!m) return log("an output_credit that does not decode: ignored");
      // Before go the main command's credit is setup's, and it has no session yet.
      if (m->session == kMainSession && phase_ != Phase::kGo) return log("output_credit before go: ignored");
      if (auto* c = session_for(m->session, "output_credit")) c->on_output_credit(m->bytes);
      return;
    }
    case HostMessage::kSignal: {
      auto m = decode_signal(f.payload);
      if (!m) return log("a signal that does not decode: ignored");
      if (auto* c = session_for(m->session, "signal")) c->on_signal(m->signo);
      return;
    }
    case HostMessage::kPoweroff:
      return end("the host asked to power off");
    case HostMessage::kResize: {
      auto m = decode_resize(f.payload);
      if (!m) return log("a resize that does not decode: ignored");
      if (m->session == kMainSession && phase_ != Phase::kGo) {
        // Before go: the main command's pty starts at this size.
        if (!spec_.tty) return log("a resize without a tty: ignored");
        spec_.window = m->window;
        return;
      }
      if (auto* c = session_for(m->session, "resize")) c->on_resize(m->window);
      return;
    }
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

bool Session::main_running() const {
  const CommandSession* m = commands_.main();
  return m != nullptr && m->state() != CommandSession::State::kEnded;
}

void Session::on_exec(std::span<const std::uint8_t> payload) {
  auto exec = decode_exec(payload);
  if (!exec) {
    // Without a session id it can be read, nobody can be told: log it.
    base::ByteReader r(payload);
    auto id = r.u32be();
    if (!id || *id == kMainSession || commands_.find(*id) != nullptr)
      return log("an exec that does not decode: ignored");
    return send_message(GuestMessage::kStartFailed,
                        StartFailed{*id, StartFailure::kRefused, EINVAL, "the exec message does not decode"});
  }
  auto refuse = [&](int error, std::string why) {
    log("exec session " + std::to_string(exec->session) + " refused: " + why);
    if (why.size() > kMaxShortText) why.resize(kMaxShortText);
    send_message(GuestMessage::kStartFailed, StartFailed{exec->session, StartFailure::kRefused, error, why});
  };
  if (commands_.find(exec->session) != nullptr)
    return log("an exec for session " + std::to_string(exec->session) + ", which is open: ignored");
  highest_exec_ = std::max(highest_exec_, exec->session);
  // Deny first: nothing of the operator's before go; and nothing once the
  // main command has ended (the instance is on its way down).
  if (phase_ != Phase::kGo)
    return refuse(EAGAIN, "exec before the main command started (" + phase_name() + ")");
  if (!main_running()) return refuse(ESRCH, "the main command has ended: the instance is stopping");
  CommandSpec spec;
  spec.argv = std::move(exec->argv);
  // The main command's environment, with the exec's own on top (a name given again replaces it).
  spec.env = spec_.env;
  for (auto& e : exec->env) {
    bool replaced = false;
    for (auto& have : spec.env) {
      if (have.name == e.name) {
        have.value = e.value;
        replaced = true;
      }
    }
    if (!replaced) spec.env.push_back(std::move(e));
  }
  spec.workdir = std::move(exec->workdir);
  spec.uid = exec->uid;
  spec.gid = exec->gid;
  spec.stdin_open = exec->stdin_open;
  spec.tty = exec->tty;
  spec.window = exec->window;
  auto opened = commands_.open_exec(exec->session, std::move(spec), exec->output_credit, *this);
  if (!opened.ok()) return refuse(EAGAIN, opened.error());
  console_line("exec session " + std::to_string(exec->session) + ": " + (*opened)->spec().argv.front() +
               ((*opened)->spec().tty ? " (tty)" : "") + ", " + std::to_string(commands_.exec_count()) +
               " open");
  (*opened)->start();
}

void Session::on_setup(std::span<const std::uint8_t> payload) {
  // Another version's setup may not decode at all: its version says why.
  if (auto version = peek_setup_version(payload); version && *version != kProtocolVersion)
    return end("the host speaks control protocol " + std::to_string(*version) + ", box-guest speaks " +
               std::to_string(kProtocolVersion) + ": use an abox and an image of the same version");
  auto setup = decode_setup(payload);
  if (!setup) return end("setup does not decode");
  reader_.set_key(setup->key);
  writer_.set_key(setup->key);
  setup->key.fill(0);  // the reader and writer hold it now; this copy goes
  setup_ = std::move(*setup);
  spec_ = CommandSpec{setup_->argv, setup_->env,        setup_->workdir, setup_->uid,
                      setup_->gid,  setup_->stdin_open, setup_->tty,     setup_->window};
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
  auto opened = commands_.open_main(spec_, setup_->output_credit, *this);
  if (!opened.ok()) return log(opened.error());
  phase_ = Phase::kGo;
  (*opened)->start();
}

void Session::reap() {
  for (int i = 0; i < kMaxReapsPerWake; ++i) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (reap_copy(pid, status)) continue;
    CommandSession* owner = nullptr;
    commands_.for_each([&](CommandSession& c) {
      if (owner == nullptr && c.on_reaped(pid, status)) owner = &c;
    });
    if (owner == nullptr) continue;  // an orphan the kernel gave init
    if (owner->id() == kMainSession) kill_leftovers();
    owner->maybe_finish();
  }
}

void Session::kill_leftovers() {
  // What the main command left running would hold its pipes open. As the
  // VM's init, box-guest ends every other process (a daemon may have left
  // the command's session; the exec sessions go too) but a copy's tar;
  // anywhere else (the unit tests) the command's process group and the exec
  // sessions' groups.
  if (::getpid() != 1) {
    commands_.for_each([](CommandSession& c) {
      if (c.pid() > 0) ::kill(-c.pid(), SIGKILL);
    });
    return;
  }
  std::vector<pid_t> spare;
  if (copy_in_) spare.push_back(copy_in_->tar.pid());
  if (copy_out_) spare.push_back(copy_out_->tar.pid());
  kill_all_processes_but(spare);
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
    case Phase::kGo:
      return main_running() ? "the command runs" : "the command has ended";
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
    const WatchFn watch_fn = watch;
    commands_.for_each([&](CommandSession& c) { c.add_watches(watch_fn); });
    for (TarJob* tar : {copy_in_ ? &copy_in_->tar : nullptr, copy_out_ ? &copy_out_->tar : nullptr}) {
      if (tar == nullptr) continue;
      watch(tar->start_status(), POLLIN, [tar] { tar->read_start_status(); });
      watch(tar->diagnostics_a(), POLLIN, [tar] { tar->read_diagnostics(tar->diagnostics_a()); });
      watch(tar->diagnostics_b(), POLLIN, [tar] { tar->read_diagnostics(tar->diagnostics_b()); });
    }
    if (copy_in_) watch(copy_in_->tar.input(), copy_in_blocked() ? POLLOUT : -1, [this] { write_copy_in(); });
    if (copy_out_) {
      const bool more = room() && copy_out_->credit.available() > 0;
      watch(copy_out_->tar.stream(), more ? POLLIN : -1, [this] { read_copy_out(); });
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
    commands_.remove_ended();
    // Frames that waited in the reader while tar took a copy_data.
    if (!copy_in_blocked()) take_frames();
    flush_control();
  }
  // Say goodbye if the port still takes it; never wait for it.
  flush_control();
  return *ended_;
}

}  // namespace abox::guest
