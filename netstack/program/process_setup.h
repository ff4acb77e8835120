// What every abox-net mode does at startup, in one place: load the policy
// and find its upstreams, open the events sink, and turn SIGINT, SIGTERM and
// SIGUSR1 into a watched signalfd (stop, stop, print counters).
// Startup code: failures are reported on stderr, prefixed with the mode's
// name, and become exit status 3.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/event_log.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "policy/policy.h"

namespace abox::netstack {

struct LoadedPolicy {
  std::unique_ptr<policy::Policy> policy;
  std::vector<policy::Endpoint> upstreams;  // the policy's, or the system's
};
// Prints the policy's diagnostics or warnings; nullopt when it cannot be used.
std::optional<LoadedPolicy> load_policy_for(const std::string& mode, const std::string& path);

// The events sink: "" is stderr, "-" stdout, anything else a file opened for
// appending (owned by the returned object). Ignores SIGPIPE so a gone reader
// costs events, never the process.
struct EventsSink {
  base::UniqueFd file;
  int fd = -1;
};
std::optional<EventsSink> open_events(const std::string& mode, const std::string& path);

// Blocks SIGINT, SIGTERM and SIGUSR1 and watches them on the loop: the first
// two stop the loop, SIGUSR1 calls on_usr1. Keep the object alive while the
// loop runs.
class SignalWatch final : public io::EventLoop::Watcher {
 public:
  SignalWatch(io::EventLoop& loop, std::function<void()> on_usr1);
  ~SignalWatch() override;
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  void on_ready(std::uint32_t events) override;

 private:
  io::EventLoop& loop_;
  std::function<void()> on_usr1_;
  base::UniqueFd fd_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
};

}  // namespace abox::netstack
