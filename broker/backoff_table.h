// BackoffTable: the provider backoff of one instance's broker, one
// ProviderBackoff (provider_backoff.h) per [[broker]] binding, in policy
// order, and what the broker says and counts about it.
//
// How this works. A provider's final answer on a binding goes to
// on_response(); a 429 or 503 with a Retry-After the parser takes starts (or
// extends) the binding's backoff until then, capped at
// kMaxProviderBackoffSeconds. While it lasts, held_back() gives the seconds
// left, and the connection answers the request with 429 itself, before any
// upstream connection, so the provider sees nothing (connection.cc,
// refuse_backoff). When it runs out, expire() (called through the Scheduler
// at the time on_response asked for) ends it. Only what the broker saw counts:
// nothing the guest says starts, extends or ends a backoff.
//
// Events (base/event_log.h), kind "broker_backoff", binding and port always:
//   {"event":"started","status":429,"retry_after":"17","seconds":17}
//   {"event":"extended", ... the same}      a later answer named a later time
//   {"event":"ended","answered":N}          N requests the broker answered for it
// Accounting (per binding): backoffs (started or extended), backoff_answered,
// backoff_active.
//
// A binding with `backoff = false` in the policy is never held back and its
// answers start nothing: the guest gets every provider answer as it was.
// Bounded: one entry per binding (from the policy), no allocation per request.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/event_log.h"
#include "broker/accounting.h"
#include "broker/provider_backoff.h"
#include "policy/policy.h"

namespace abox::broker {

class BackoffTable {
 public:
  // Asked to call expire(now) at (or after) `at`; extra calls are harmless.
  using Scheduler = std::function<void(base::MonoTime at)>;

  BackoffTable(const policy::Policy& policy, Accounting& accounting, base::EventLog& events,
               Scheduler schedule);

  // A provider's final response on binding `index`.
  void on_response(std::size_t index, int status, std::string_view retry_after, base::MonoTime now,
                   std::int64_t wall_now_unix);
  // While binding `index` is held back: the seconds left (>= 1), and the
  // request is counted as answered by the broker. nullopt: send it on.
  std::optional<std::uint32_t> held_back(std::size_t index, base::MonoTime now);
  // Ends every backoff that has run out by `now` (an "ended" event each).
  void expire(base::MonoTime now);

  bool active(std::size_t index) const { return entries_.at(index).active; }

 private:
  struct Entry {
    ProviderBackoff backoff;
    bool active = false;
    std::uint64_t answered = 0;  // during the current backoff
  };

  const policy::Policy& policy_;
  Accounting& accounting_;
  base::EventLog& events_;
  Scheduler schedule_;
  std::vector<Entry> entries_;
};

}  // namespace abox::broker
