// StatsServer: the live counters on a unix stream socket (--stats-socket).
// Each connection gets one JSON object and a newline (what render() returns
// at that moment: stats.h builds it), then the server closes it. The client
// sends nothing; anything it sends is ignored.
//
// The socket file is made 0600 (unix_listener.h): only the operator who
// runs abox-net may read its counters. A stale socket at the path (left by
// a process that is gone: nothing answers a connect) is replaced; a socket
// something listens on, or any other kind of file, is an error naming the
// path. The file stays when abox-net exits, because the sandbox forbids
// unlink(); the next start replaces it.
//
// Limits: at most kAcceptsPerTurn connections are served per loop turn
// (the rest wait for the next turn), and the reply is written once,
// non-blocking: a reply that does not fit the socket buffer at once (it
// always does: it is a few KiB) is cut and counted in replies_cut.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"

namespace abox::netstack {

struct StatsServerCounters {
  std::uint64_t served = 0;
  std::uint64_t replies_cut = 0;
  std::uint64_t accept_errors = 0;
};

class StatsServer final : public io::EventLoop::Watcher {
 public:
  static constexpr int kAcceptsPerTurn = 16;

  // Binds and listens on path (startup; the error is a message). render
  // must stay callable while the server lives.
  static base::Result<std::unique_ptr<StatsServer>, std::string> create(io::EventLoop& loop,
                                                                        const std::string& path,
                                                                        std::function<std::string()> render);
  ~StatsServer() override;
  StatsServer(const StatsServer&) = delete;
  StatsServer& operator=(const StatsServer&) = delete;

  void on_ready(std::uint32_t events) override;
  const StatsServerCounters& counters() const { return counters_; }

 private:
  StatsServer(io::EventLoop& loop, base::UniqueFd listener, std::function<std::string()> render);

  io::EventLoop& loop_;
  base::UniqueFd listener_;
  std::function<std::string()> render_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  StatsServerCounters counters_;
};

}  // namespace abox::netstack
