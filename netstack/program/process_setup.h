// What every abox-net mode does at startup, in one place: load the policy
// and find its upstreams, open the events sink, and turn SIGINT, SIGTERM and
// SIGUSR1 into a watched signalfd (stop, stop, print counters).
// Startup code: failures are reported on stderr, prefixed with the mode's
// name, and become exit status 3.
#pragma once

#include <unistd.h>

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
//
// When the events go to stdout (--events -), lines of log() are held until
// release() (at most kMaxHeldBytes; past that they are written at once), so
// that the ready line is the first line on stdout: setup emits events (this
// host's addresses, ...) before the mode is ready. The caller prints its
// ready line, then calls release(), then emits "start". Anywhere else
// (stderr, a file) nothing is held, and the caller emits "start" before the
// ready line: whoever waits for "ready" then finds the start event already
// written. Held lines are also written when the sink goes (a start that
// failed keeps its events). Must not move once log() has been called.
struct EventsSink {
  static constexpr std::size_t kMaxHeldBytes = 64 * 1024;

  base::UniqueFd file;
  int fd = -1;

  EventsSink() = default;
  EventsSink(EventsSink&&) = default;
  EventsSink& operator=(EventsSink&&) = delete;
  ~EventsSink() { release(); }

  base::EventLog log(std::string instance);
  void release();
  // The events share stdout with the ready line (--events -).
  bool on_stdout() const { return fd == STDOUT_FILENO; }

 private:
  bool write(std::string_view line);
  std::string held_;
  bool released_ = false;
};
std::optional<EventsSink> open_events(const std::string& mode, const std::string& path);

// True when this process holds capability `cap` (CAP_NET_ADMIN, ...) in its
// effective set: for hints when a step that needs privilege fails.
bool has_effective_capability(int cap);

// Blocks SIGINT, SIGTERM and SIGUSR1 and watches them on the loop: the first
// two stop the loop, SIGUSR1 calls on_usr1. Keep the object alive while the
// loop runs.
// With on_hup, SIGHUP too (abox-net run: reread the policy); without,
// SIGHUP keeps its default.
class SignalWatch final : public io::EventLoop::Watcher {
 public:
  SignalWatch(io::EventLoop& loop, std::function<void()> on_usr1, std::function<void()> on_hup = {});
  ~SignalWatch() override;
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  void on_ready(std::uint32_t events) override;

 private:
  io::EventLoop& loop_;
  std::function<void()> on_usr1_;
  std::function<void()> on_hup_;
  base::UniqueFd fd_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
};

}  // namespace abox::netstack
