#include "broker/accounting.h"

#include "base/json.h"

namespace abox::broker {

Accounting::Accounting(const policy::Policy& policy) : policy_(policy), bindings_(policy.brokers().size()) {}

std::string Accounting::to_json(std::string_view instance, std::uint64_t leaves_cached,
                                std::uint64_t leaves_minted) const {
  std::string out;
  base::JsonWriter w(out);
  w.begin_object().field("instance", instance).key("bindings").begin_array();
  for (std::size_t i = 0; i < bindings_.size(); ++i) {
    const auto& b = policy_.brokers()[i];
    const auto& a = bindings_[i];
    w.begin_object()
        .field("name", b.name)
        .field("port", static_cast<std::uint64_t>(b.port))
        .field("credential", b.credential)
        .field("requests", a.requests)
        .field("refused", a.refused);
    w.key("refused_by_reason").begin_object();
    for (const auto& [reason, n] : a.refused_by_reason) w.field(reason, n);
    w.end_object();
    w.key("statuses").begin_object();
    for (const auto& [status, n] : a.statuses) w.field(std::to_string(status), n);
    w.end_object();
    w.field("bytes_up", a.bytes_up)
        .field("bytes_down", a.bytes_down)
        .field("rate_limited", a.rate_limited)
        .field("server_errors", a.server_errors)
        .field("keys_scrubbed", a.keys_scrubbed)
        .field("last_retry_after", a.last_retry_after)
        .field("backoff", policy_.brokers()[i].backoff)
        .field("backoffs", a.backoffs)
        .field("backoff_answered", a.backoff_answered)
        .field("backoff_active", a.backoff_active)
        .end_object();
  }
  w.end_array();
  const auto& s = service_;
  w.key("service")
      .begin_object()
      .field("connections_accepted", s.connections_accepted)
      .field("connections_open", s.connections_open)
      .field("connections_refused_limit", s.connections_refused_limit)
      .field("handshakes_in_progress", s.handshakes_in_progress)
      .field("handshakes_refused_limit", s.handshakes_refused_limit)
      .field("handoff_refused", s.handoff_refused)
      .field("sni_refused", s.sni_refused)
      .field("handshake_failed", s.handshake_failed)
      .field("idle_timeouts", s.idle_timeouts)
      .field("handshake_timeouts", s.handshake_timeouts)
      .field("head_timeouts", s.head_timeouts)
      .field("body_timeouts", s.body_timeouts)
      .field("malformed_requests", s.malformed_requests)
      .field("upstream_failures", s.upstream_failures)
      .field("upstream_connections", s.upstream_connections)
      .field("upstream_reused", s.upstream_reused)
      .field("trailer_fields_dropped", s.trailer_fields_dropped)
      .end_object();
  w.key("leaves").begin_object().field("cached", leaves_cached).field("minted", leaves_minted).end_object();
  w.end_object();
  return out;
}

}  // namespace abox::broker
