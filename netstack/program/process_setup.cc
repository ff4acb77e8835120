#include "netstack/program/process_setup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
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
    std::cerr << loaded.error().to_string() << mode << ": the policy is invalid\n";
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

SignalWatch::SignalWatch(io::EventLoop& loop, std::function<void()> on_usr1)
    : loop_(loop), on_usr1_(std::move(on_usr1)) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
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
    } else {
      loop_.stop();
    }
  }
}

}  // namespace abox::netstack
