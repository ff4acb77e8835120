// UpstreamPool: verified upstream TLS connections kept open between requests
// (HTTP keep-alive to the provider), per binding.
//
// A connection enters the pool only after a response that ended cleanly
// (its length or last chunk seen, no "Connection: close", nothing left
// unread), so its next byte belongs to the next response. While idle it is
// watched for readability: the provider closing it (or sending anything
// unasked) drops it at once. Each idles at most kIdleTimeout, and at most
// kPerBinding wait per binding; past that the oldest goes.
// take() hands out the most recently used one (the least likely to be stale)
// that has nothing to read: one the provider closed in the same turn is
// dropped there.
// A connection's fd stays watched on the BrokerLoop from its first use to
// its close: give() takes over the watch of a connection whose fd is
// watched (BrokerLoop::hand_over) and take() hands out a stream whose fd is
// still watched, with the pool's handler, which the taker hands over to its
// own at once (or unwatches). No poll is removed and armed again per
// request. A request sent on a pooled connection that fails, or ends,
// before any response byte is retried once on a fresh connection by the
// caller (connection.cc, connection_upstream.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "broker/event_loop.h"
#include "broker/tls_stream.h"

namespace abox::broker {

class UpstreamPool {
 public:
  static constexpr std::size_t kPerBinding = 64;
  static constexpr base::Millis kIdleTimeout{30'000};

  UpstreamPool(BrokerLoop& loop, std::size_t bindings);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Null when none is idle for this binding. The stream's fd is still
  // watched: the caller hands the watch over to itself or unwatches it.
  std::unique_ptr<TlsStream> take(std::size_t binding);
  // The stream's fd may be watched (its watch is taken over) or not.
  void give(std::size_t binding, std::unique_ptr<TlsStream> stream);

  std::size_t idle() const;
  std::uint64_t reused() const { return reused_; }

 private:
  // One idle connection: its stream and its idle deadline in one object
  // (no allocation per timer). Entries are kept for reuse once their stream
  // is handed out. Its fd's handler (anything readable on an idle
  // connection is its end, or junk) drops it.
  struct Idle final : io::EventLoop::Timer, io::EventLoop::Deletable {
    explicit Idle(UpstreamPool& p) : pool(p) {}
    void on_timer() override { pool.drop(*this); }
    UpstreamPool& pool;
    std::size_t binding = 0;
    std::unique_ptr<TlsStream> stream;
  };
  // Stops watching i and forgets it; its stream closes after the turn (its
  // own callback may be what called this).
  void drop(Idle& i);
  // Nothing to read and no end seen on fd (an idle connection's only state).
  static bool quiet(int fd);

  BrokerLoop& loop_;
  std::vector<std::deque<std::unique_ptr<Idle>>> idle_;  // per binding, oldest first
  std::vector<std::unique_ptr<Idle>> spare_;             // entries whose stream was taken
  std::uint64_t reused_ = 0;
};

}  // namespace abox::broker
