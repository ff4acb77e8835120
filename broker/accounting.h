// Accounting: what the broker itself saw, per binding of its instance.
// Backoff and billing read this, never anything the guest reports.
//
// Per binding: requests forwarded, requests refused (by reason), response
// statuses (by code), bytes each way (request bytes sent upstream, response
// bytes sent to the guest), 429s and 5xx, the last Retry-After a provider
// sent (as sent), and the provider backoffs (backoff_table.h). Plus connection-level counters for the
// service. Bounded: statuses are counted per code (100-599), reasons per GateReason or HttpError name,
// bindings come from the policy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace abox::broker {

struct BindingAccount {
  std::uint64_t requests = 0;  // forwarded upstream
  std::uint64_t refused = 0;
  std::map<std::string, std::uint64_t> refused_by_reason;
  std::map<int, std::uint64_t> statuses;
  std::uint64_t bytes_up = 0;       // request bytes sent to the provider (head and body)
  std::uint64_t bytes_down = 0;     // response bytes sent to the guest
  std::uint64_t rate_limited = 0;   // 429
  std::uint64_t server_errors = 0;  // 5xx
  std::uint64_t keys_scrubbed = 0;  // key occurrences overwritten in responses
  std::string last_retry_after;
  // Provider backoff (backoff_table.h): backoffs started or extended, requests
  // the broker answered with 429 itself during one, whether one runs now.
  std::uint64_t backoffs = 0;
  std::uint64_t backoff_answered = 0;
  bool backoff_active = false;
};

struct ServiceCounters {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused_limit = 0;  // over max connections
  std::uint64_t handshakes_refused_limit = 0;   // over max handshakes in progress
  std::uint64_t handoff_refused = 0;            // malformed line, other instance, no binding
  std::uint64_t sni_refused = 0;                // no binding for the SNI
  std::uint64_t handshake_failed = 0;
  std::uint64_t idle_timeouts = 0;
  std::uint64_t handshake_timeouts = 0;    // hand-off + TLS handshake past tls_handshake_ms: closed
  std::uint64_t head_timeouts = 0;         // a request head past http_head_ms: 408
  std::uint64_t body_timeouts = 0;         // a request body past http_body_ms: 408
  std::uint64_t malformed_requests = 0;    // 400s
  std::uint64_t upstream_failures = 0;     // 502s
  std::uint64_t upstream_connections = 0;  // new upstream TLS connections made
  std::uint64_t upstream_reused = 0;       // requests sent on a pooled upstream connection
  std::uint64_t connections_open = 0;
  std::uint64_t handshakes_in_progress = 0;
  std::uint64_t trailer_fields_dropped = 0;  // after chunked upstream responses: checked, not forwarded
};

class Accounting {
 public:
  explicit Accounting(const policy::Policy& policy);

  BindingAccount& binding(std::size_t index) { return bindings_.at(index); }
  ServiceCounters& service() { return service_; }
  // The whole table as one JSON object:
  // {"instance","bindings":[{"name","port","credential","requests",...}],"service":{...},"leaves":{...}}
  std::string to_json(std::string_view instance, std::uint64_t leaves_cached,
                      std::uint64_t leaves_minted) const;

 private:
  const policy::Policy& policy_;
  std::vector<BindingAccount> bindings_;
  ServiceCounters service_;
};

}  // namespace abox::broker
