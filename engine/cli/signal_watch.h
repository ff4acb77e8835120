// SignalWatch: signals a blocking command (abox exec, abox attach) takes on
// its poll() loop: blocked while it lives and read from a signalfd; the old
// mask is back when it goes. Make it after any fork (a daemon started on
// first use must not inherit the blocked mask).
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <initializer_list>

namespace abox::engine {

class SignalWatch {
 public:
  explicit SignalWatch(std::initializer_list<int> signals) {
    sigemptyset(&set_);
    for (int s : signals) sigaddset(&set_, s);
    ::sigprocmask(SIG_BLOCK, &set_, &old_);
    fd_ = ::signalfd(-1, &set_, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch() {
    if (fd_ >= 0) ::close(fd_);
    ::sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  int fd() const { return fd_; }
  // The next pending signal, or 0.
  int next() {
    signalfd_siginfo info{};
    if (::read(fd_, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return 0;
    return static_cast<int>(info.ssi_signo);
  }

 private:
  sigset_t set_{}, old_{};
  int fd_ = -1;
};

}  // namespace abox::engine
