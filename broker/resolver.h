// UpstreamResolver: the broker resolves each binding's name itself
// (condition 7 of the gate): the guest's DNS answers are never trusted here.
//
// Asynchronous on the broker's loop: one connected UDP socket per query (a
// fresh source port), sent to the policy's [dns] upstreams (or the system's,
// /etc/resolv.conf) in turn for [dns] attempts rounds of timeout_ms each.
// Answers go through dns::filter_upstream_answer(), the DNS gate's own
// filter: only A/AAAA records on the CNAME chain of the asked name count,
// and every address in a reserved range is dropped
// (policy.check_address(); [unsafe] may lift one, which is logged), as is
// every address of the host the broker runs on (read with getifaddrs for
// each answer, and checked again before a cached answer is used; never
// lifted: policy/host_addresses.h). A
// first, AAAA when A gives none. Results are cached for their (clamped) TTL.
//
// Bounds: at most kMaxPending names in flight (the names are the policy's
// bindings, so a handful); callers waiting on one name share its query.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/event_log.h"
#include "base/random.h"
#include "broker/event_loop.h"
#include "policy/policy.h"

namespace abox::broker {

enum class ResolveError : std::uint8_t {
  failed,        // no upstream answered, or the name has no address
  all_reserved,  // every address was in a reserved range
  too_many,      // kMaxPending names already in flight
};

struct ResolveResult {
  std::vector<policy::IpAddress> addresses;  // empty on error
  ResolveError error = ResolveError::failed;
  bool ok() const { return !addresses.empty(); }
};

class UpstreamResolver {
 public:
  static constexpr std::size_t kMaxPending = 64;
  using Callback = std::function<void(const ResolveResult&)>;
  using Ticket = std::uint64_t;

  // `upstreams` empty: every resolve fails (said once in an event).
  UpstreamResolver(BrokerLoop& loop, const policy::Policy& policy, std::vector<policy::Endpoint> upstreams,
                   base::EventLog& events);
  ~UpstreamResolver();

  // Calls `cb` later (never from inside this call) with the addresses.
  Ticket resolve(const std::string& name, Callback cb);
  // The callback of `ticket` will not be called.
  void cancel(Ticket ticket);

  std::uint64_t queries_sent() const { return queries_sent_; }

 private:
  struct Query;
  void start_attempt(Query& q);
  void on_readable(const std::string& name);
  void on_timeout(const std::string& name);
  void finish(const std::string& name, ResolveResult result, std::uint32_t ttl);

  struct CacheEntry {
    std::vector<policy::IpAddress> addresses;
    base::MonoTime expires;
  };

  BrokerLoop& loop_;
  const policy::Policy& policy_;
  std::vector<policy::Endpoint> upstreams_;
  base::EventLog& events_;
  base::SystemRandom random_;
  std::unordered_map<std::string, CacheEntry> cache_;
  std::unordered_map<std::string, std::unique_ptr<Query>> pending_;
  std::unordered_map<Ticket, std::pair<std::string, Callback>> waiters_;
  Ticket next_ticket_ = 1;
  std::uint64_t queries_sent_ = 0;
};

}  // namespace abox::broker
