// SessionRig: a whole box-guest session without a VM, for the session tests
// (session_test.cc, session_tty_test.cc, session_copy_test.cc). Session runs
// in a forked child on one end of a socketpair (its control port); the test
// is the host on the other, speaking through guest/protocol/.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/random.h"
#include "guest/box_guest/console.h"
#include "guest/box_guest/session.h"
#include "tests/support/needs_root.h"

namespace abox::guest::testing {

struct Received {
  std::uint8_t type = 0;
  std::vector<std::uint8_t> payload;
};

class SessionRig {
 public:
  explicit SessionRig(SessionConfig config = {}) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair");
    int result[2];
    if (::pipe2(result, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    config.network.summary = "test network";
    child_ = ::fork();
    if (child_ == 0) {
      ::close(sv[0]);
      ::close(result[0]);
      sigset_t handled;
      sigemptyset(&handled);
      for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, sig);
      ::sigprocmask(SIG_BLOCK, &handled, nullptr);
      ::signal(SIGPIPE, SIG_IGN);
      base::UniqueFd signals(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
      ::fcntl(sv[1], F_SETFL, O_NONBLOCK);
      base::SeededRandom random(3);
      Session session(base::UniqueFd(sv[1]), std::move(signals), std::move(config), random);
      std::string why = session.run();
      [[maybe_unused]] auto n = ::write(result[1], why.data(), why.size());
      ::_exit(0);
    }
    ::close(sv[1]);
    ::close(result[1]);
    host_.reset(sv[0]);
    result_.reset(result[0]);
  }
  ~SessionRig() {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }

  void send(HostMessage type, const std::vector<std::uint8_t>& payload = {}) {
    std::vector<std::uint8_t> wire;
    writer_.append(wire, static_cast<std::uint8_t>(type), payload);
    write_all(wire);
  }
  // A frame with a wrong MAC at the current sequence number (which it does not use up).
  void send_forged(HostMessage type) {
    FrameWriter forger(Direction::kHostToGuest);
    ChannelKey wrong{};
    wrong.fill(0x66);
    forger.set_key(wrong);
    std::vector<std::uint8_t> wire;
    for (std::uint64_t i = 0; i <= writer_.next_seq(); ++i) {
      wire.clear();
      forger.append(wire, static_cast<std::uint8_t>(type), {});
    }
    write_all(wire);
  }
  template <class M>
  void send_message(HostMessage type, const M& m) {
    std::vector<std::uint8_t> p;
    encode(m, p);
    send(type, p);
  }
  // A command session's messages (protocol 3): session 0 is the main command.
  void send_stdin(std::uint32_t session, const std::string& bytes) {
    std::vector<std::uint8_t> b(bytes.begin(), bytes.end());
    send_message(HostMessage::kStdin, SessionData{session, b});
  }
  void send_stdin_eof(std::uint32_t session = kMainSession) {
    send_message(HostMessage::kStdinEof, SessionRef{session});
  }
  void grant(std::uint32_t session, std::uint32_t bytes) {
    send_message(HostMessage::kOutputCredit, SessionCredit{session, bytes});
  }
  void send_signal(std::uint32_t session, int signo) {
    send_message(HostMessage::kSignal, Signal{session, static_cast<std::uint8_t>(signo)});
  }
  void send_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols) {
    send_message(HostMessage::kResize, Resize{session, {rows, cols}});
  }
  void write_all(const std::vector<std::uint8_t>& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(host_.get(), bytes.data() + done, bytes.size() - done);
      if (n <= 0) throw std::runtime_error(std::string("write: ") + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
  }

  Setup setup(std::vector<std::string> argv, std::uint32_t credit = 1 << 20, bool stdin_open = false) {
    Setup s;
    s.key.fill(0x42);
    s.argv = std::move(argv);
    s.env = {{"PATH", "/usr/bin:/bin"}};
    s.workdir = "/";
    s.uid = 1000;
    s.gid = 1000;
    s.output_credit = credit;
    s.stdin_open = stdin_open;
    return s;
  }
  void send_setup(const Setup& s) {
    std::vector<std::uint8_t> p;
    encode(s, p);
    send(HostMessage::kSetup, p);
    writer_.set_key(s.key);
    reader_.set_key(s.key);
  }

  // The next frame (log frames are kept in logs, not returned); nullopt after 10 s.
  std::optional<Received> next(int timeout_ms = 10000) {
    const auto end = monotonic_ms() + timeout_ms;
    for (;;) {
      auto f = reader_.next();
      if (!f.ok()) throw std::runtime_error(std::string(frame_error_name(f.error())));
      if (*f) {
        Received r{(*f)->type, std::vector<std::uint8_t>((*f)->payload.begin(), (*f)->payload.end())};
        if (r.type == static_cast<std::uint8_t>(GuestMessage::kLog)) {
          logs.push_back(decode_log(r.payload)->text);
          continue;
        }
        return r;
      }
      const auto left = end - monotonic_ms();
      if (left <= 0) return std::nullopt;
      pollfd p{host_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      auto space = reader_.space();
      ssize_t n = ::read(host_.get(), space.data(), space.size());
      if (n <= 0) return std::nullopt;
      reader_.commit(static_cast<std::size_t>(n));
    }
  }
  Received expect(GuestMessage type) {
    auto r = next();
    if (!r)
      throw std::runtime_error("no frame, expected " +
                               std::string(guest_message_name(static_cast<std::uint8_t>(type))));
    if (r->type != static_cast<std::uint8_t>(type))
      throw std::runtime_error("got " + std::string(guest_message_name(r->type)) + ", expected " +
                               std::string(guest_message_name(static_cast<std::uint8_t>(type))));
    return *r;
  }

  // Why the session ended (what run() returned), once the child is gone; "" after 10 s.
  std::string ended() {
    std::string why;
    pollfd p{result_.get(), POLLIN, 0};
    for (auto end = monotonic_ms() + 10000; monotonic_ms() < end;) {
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = ::read(result_.get(), buf, sizeof buf);
      if (n <= 0) break;
      why.append(buf, static_cast<std::size_t>(n));
    }
    ::waitpid(child_, nullptr, 0);
    child_ = -1;
    return why;
  }

  void close_host() { host_.reset(); }
  int host_fd() const { return host_.get(); }
  FrameWriter& writer() { return writer_; }
  pid_t session_pid() const { return child_; }

  std::vector<std::string> logs;

 private:
  pid_t child_ = -1;
  base::UniqueFd host_, result_;
  FrameWriter writer_{Direction::kHostToGuest};
  FrameReader reader_{Direction::kGuestToHost};
};

inline std::string text(const std::vector<std::uint8_t>& b) {
  return std::string(b.begin(), b.end());
}

// A stdout or stderr frame's session and bytes (throws when it does not decode).
inline std::uint32_t session_of(const Received& r) {
  auto d = decode_session_data(r.payload);
  if (!d) throw std::runtime_error("an output frame that does not decode");
  return d->session;
}
inline std::string stream_text(const Received& r) {
  auto d = decode_session_data(r.payload);
  if (!d) throw std::runtime_error("an output frame that does not decode");
  return std::string(d->bytes.begin(), d->bytes.end());
}

#define REQUIRE_ROOT() ABOX_NEEDS_ROOT("the command runs as uid 1000: needs root")

// Collects output until exited, granting `grant` bytes of credit back after
// each chunk; checks the guest never sends past its credit.
struct Outcome {
  std::string out, err;
  std::optional<Exited> exited;
  std::uint64_t most_outstanding = 0;
};
inline Outcome collect(SessionRig& rig, std::uint64_t credit, std::uint32_t grant) {
  Outcome o;
  std::uint64_t outstanding = 0;  // received, not yet granted back
  while (!o.exited) {
    auto r = rig.next();
    if (!r) throw std::runtime_error("the session went quiet");
    switch (static_cast<GuestMessage>(r->type)) {
      case GuestMessage::kStdout:
      case GuestMessage::kStderr: {
        EXPECT_EQ(session_of(*r), kMainSession);
        std::string chunk = stream_text(*r);
        (r->type == static_cast<std::uint8_t>(GuestMessage::kStdout) ? o.out : o.err) += chunk;
        outstanding += chunk.size();
        EXPECT_LE(outstanding, credit) << "the guest sent past its credit";
        o.most_outstanding = std::max(o.most_outstanding, outstanding);
        while (outstanding >= grant) {
          rig.grant(kMainSession, grant);
          outstanding -= grant;
        }
        break;
      }
      case GuestMessage::kExited:
        o.exited = decode_exited(r->payload);
        break;
      case GuestMessage::kStdinCredit:
        break;
      default:
        throw std::runtime_error("unexpected " + std::string(guest_message_name(r->type)));
    }
  }
  return o;
}

}  // namespace abox::guest::testing
