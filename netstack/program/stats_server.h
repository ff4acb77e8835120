// StatsServer: the live counters, and answers to `abox-net explain`, on a
// unix stream socket (--stats-socket).
//
// The protocol: the client connects and sends one request line, then reads
// the reply until the server closes the connection:
//   "stats"                   the counters: one JSON object and a newline
//                             (what render_stats() returns then: stats.h
//                             builds it). A client that half-closes
//                             without sending anything gets the same.
//   "explain ARGS"            what answer_explain(ARGS) returns (the
//                             program's business: explain_command.h); a
//                             server without that handler answers
//                             {"error": ...}.
//   "reload SOURCE"           then the new policy's text, to the end of the
//                             stream (the client half-closes): what
//                             apply_policy(SOURCE, TEXT) returns
//                             (reload_command.h). SOURCE names the text in
//                             error messages (the client's path). At most
//                             kMaxReloadBytes of text; a server without that
//                             handler (abox-net dns) answers "3\n" and why.
//                             An fd sent with the request (SCM_RIGHTS) is
//                             handed to apply_policy too: the file the text
//                             is from (`abox policy apply`'s policy of
//                             record), which SIGHUP rereads from then on.
//                             Any other fd a client sends is closed.
// Anything else gets {"error":"unknown request ..."}.
//
// The socket file is made 0600 (unix_listener.h): only the operator who
// runs abox-net may read its counters. A stale socket at the path (left by
// a process that is gone: nothing answers a connect) is replaced; a socket
// something listens on, or any other kind of file, is an error naming the
// path. The file stays when abox-net exits, because the sandbox forbids
// unlink(); the next start replaces it.
//
// Limits: at most kAcceptsPerTurn connections are accepted per loop turn
// (the rest wait for the next turn). A request of more than kMaxRequest
// bytes is answered with an error. A connection whose request has not come
// yet waits, at most kMaxWaiting of them at a time and at most
// kRequestDeadline each (a connection past its deadline is closed when the
// next one is accepted, and counted in timed_out; one past kMaxWaiting is
// closed at once, counted in refused_busy). The reply is written once,
// non-blocking: a reply that does not fit the socket buffer at once (it
// always does: it is a few KiB) is cut and counted in replies_cut.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"

namespace abox::netstack {

struct StatsServerCounters {
  std::uint64_t served = 0;
  std::uint64_t replies_cut = 0;
  std::uint64_t accept_errors = 0;
  std::uint64_t bad_requests = 0;  // too long, or not a known request
  std::uint64_t timed_out = 0;     // no request within kRequestDeadline
  std::uint64_t refused_busy = 0;  // kMaxWaiting connections were already waiting
};

class StatsServer final : public io::EventLoop::Watcher {
 public:
  static constexpr int kAcceptsPerTurn = 16;
  static constexpr std::size_t kMaxWaiting = 16;
  static constexpr std::size_t kMaxRequest = 1024;
  static constexpr base::Millis kRequestDeadline{2000};
  static constexpr std::size_t kMaxReloadBytes = 4u << 20;  // load_policy()'s own bound

  using RenderStats = std::function<std::string()>;
  using AnswerExplain = std::function<std::string(std::string_view args)>;
  // file: the fd sent with the request, or none.
  using ApplyPolicy =
      std::function<std::string(std::string_view source, std::string_view text, base::UniqueFd file)>;

  // Binds and listens on path (startup; the error is a message). The
  // handlers must stay callable while the server lives; answer_explain
  // may be empty.
  static base::Result<std::unique_ptr<StatsServer>, std::string> create(io::EventLoop& loop,
                                                                        const std::string& path,
                                                                        RenderStats render_stats,
                                                                        AnswerExplain answer_explain = {},
                                                                        ApplyPolicy apply_policy = {});
  ~StatsServer() override;
  StatsServer(const StatsServer&) = delete;
  StatsServer& operator=(const StatsServer&) = delete;

  void on_ready(std::uint32_t events) override;
  const StatsServerCounters& counters() const { return counters_; }

 private:
  // A connection whose request line has not fully arrived.
  struct Waiting final : io::EventLoop::Watcher {
    StatsServer* server = nullptr;
    base::UniqueFd fd;
    std::string request;
    base::UniqueFd passed;  // an fd the client sent with its request
    base::MonoTime deadline{};
    io::EventLoop::Handle handle = io::EventLoop::kNoHandle;
    bool done = false;  // answered or closed; freed by the next sweep (never inside its own callback)
    void on_ready(std::uint32_t events) override;
  };

  StatsServer(io::EventLoop& loop, base::UniqueFd listener, RenderStats render_stats,
              AnswerExplain answer_explain, ApplyPolicy apply_policy);
  // Reads what fd has; true when the connection is finished (answered, or
  // closed by the client, or broken).
  bool read_request(int fd, std::string& request, base::UniqueFd& passed);
  void reply(int fd, std::string_view request, base::UniqueFd passed);
  void finish(Waiting& w);
  void sweep(base::MonoTime now);

  io::EventLoop& loop_;
  base::UniqueFd listener_;
  RenderStats render_stats_;
  AnswerExplain answer_explain_;
  ApplyPolicy apply_policy_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  std::vector<std::unique_ptr<Waiting>> waiting_;
  StatsServerCounters counters_;
};

}  // namespace abox::netstack
