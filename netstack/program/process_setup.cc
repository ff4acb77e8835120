#include "netstack/program/process_setup.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "dns/resolv_conf.h"
#include "policy/policy_file.h"

namespace abox::netstack {

std::optional<LoadedPolicy> load_policy_for(const std::string& mode, const std::string& path) {
  auto loaded = policy::load_policy(path);
  if (!loaded.ok()) {
    std::cerr << loaded.error().to_string() << mode << ": "
              << (loaded.error().unreadable ? "the policy cannot be read" : "the policy is invalid") << '\n';
    return std::nullopt;
  }
  LoadedPolicy out;
  out.policy = std::make_unique<policy::Policy>(std::move(loaded).value());
  for (const auto& w : policy::policy_warnings(*out.policy)) std::cerr << w.to_string() << '\n';
  out.upstreams = out.policy->dns().use_system ? dns::read_resolv_conf() : out.policy->dns().upstreams;
  if (out.upstreams.empty()) {
    std::cerr
        << mode
        << ": no upstream resolver: /etc/resolv.conf has no usable nameserver; set [dns] upstreams in the "
           "policy\n";
    return std::nullopt;
  }
  return out;
}

std::optional<EventsSink> open_events(const std::string& mode, const std::string& path) {
  ::signal(SIGPIPE, SIG_IGN);
  EventsSink sink;
  if (path.empty()) {
    sink.fd = STDERR_FILENO;
  } else if (path == "-") {
    sink.fd = STDOUT_FILENO;
  } else {
    sink.file.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!sink.file) {
      std::cerr << mode << ": cannot open --events " << path << ": " << std::strerror(errno) << '\n';
      return std::nullopt;
    }
    sink.fd = sink.file.get();
  }
  return sink;
}

bool EventsSink::write(std::string_view line) {
  if (!released_ && on_stdout() && held_.size() + line.size() <= kMaxHeldBytes) {
    held_.append(line);
    return true;
  }
  for (;;) {
    const ssize_t n = ::write(fd, line.data(), line.size());
    if (n == static_cast<ssize_t>(line.size())) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;  // partial, EAGAIN or a dead reader: the line is dropped, as EventLog::to_fd does
  }
}

base::EventLog EventsSink::log(std::string instance) {
  return base::EventLog(std::move(instance), [this](std::string_view line) { return write(line); });
}

void EventsSink::release() {
  if (released_) return;
  released_ = true;
  std::string held = std::move(held_);
  held_.clear();
  if (!held.empty() && fd >= 0) write(held);
}

bool has_effective_capability(int cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

SignalWatch::SignalWatch(io::EventLoop& loop, std::function<void()> on_usr1, std::function<void()> on_hup)
    : loop_(loop), on_usr1_(std::move(on_usr1)), on_hup_(std::move(on_hup)) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  if (on_hup_) sigaddset(&mask, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (fd_) handle_ = loop_.watch(fd_.get(), POLLIN, this);
}

SignalWatch::~SignalWatch() {
  if (handle_ != io::EventLoop::kNoHandle) loop_.unwatch(handle_);
}

void SignalWatch::on_ready(std::uint32_t) {
  signalfd_siginfo si{};
  while (::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGUSR1) {
      if (on_usr1_) on_usr1_();
    } else if (si.ssi_signo == SIGHUP) {
      on_hup_();
    } else {
      loop_.stop();
    }
  }
}

}  // namespace abox::netstack
