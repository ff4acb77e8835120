// InjectionGate: does this request get the real key? Sans-I/O.
//
// One gate per instance, next to its policy and NonceTable. The broker asks
// it once per request, after parse_request_head() completed (condition 6:
// a malformed request never reaches the gate; it is refused with its
// HttpError) and before a byte goes upstream. A request gets the key only when
// every condition holds; otherwise the guest gets a 403 with
// to_string(reason) in a header, the event log gets the same reason, and the
// upstream sees nothing. Conditions, checked in this order:
//   1. `sni` (the ClientHello's server_name) is present, canonical, and has a
//      [[broker]] binding for `port` (policy.broker_for()).
//   8. the instance is running, that binding is not revoked, and a policy
//      reload has not removed it (binding_reload.h).
//   2. Host equals the binding's name (ASCII case-insensitive, no trailing
//      dot), with ":port" optional when the port is 443 and required
//      otherwise.
//   3. the method is one of the binding's (exact, upper case) and the path
//      starts with one of its prefixes; an upgrade only if allow_upgrade.
//   4. the nonce is given exactly once, and it is this instance's nonce for
//      this binding (compared in constant time). Its place: the binding's
//      header (once), its value the nonce alone or, in an authorization
//      header, after "Bearer " (scheme case-insensitive; the key then goes
//      after "Bearer " too); or, when the binding's header is not
//      authorization and absent, one "authorization: Bearer NONCE" (the
//      official SDKs' form: @anthropic-ai/sdk 1.x sends its key so). Never
//      both: a nonce-like authorization beside the binding's header is
//      nonce_duplicate. Whichever place it came in, the key goes upstream in
//      the binding's header (write_upstream_head drops authorization).
//   5. nowhere else does the request carry a nonce or a real key: no header
//      value but the nonce's own and not the target (percent-decoded) contains
//      "abox-nonce-" in any case; no header value is, alone or after
//      "Bearer ", one of `real_keys` (compared in constant time). The guest's
//      authorization / proxy-authorization / x-api-key / cookie are dropped
//      by write_upstream_head() (upstream_head.h) whatever their content.
//   7. (upstream: resolved by the broker, not in a reserved range, TLS
//      verified with hostname checking) is checked by the upstream client,
//      which reports failures with the upstream_* reasons below.
// The body is not read by the gate: see NonceMarkerScanner (nonce.h).
//
// Invariants: decide() is pure apart from reading the revocation state; it
// never allocates, never logs, and never returns a view into a key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "broker/http_request.h"
#include "broker/nonce.h"
#include "policy/policy.h"

namespace abox::broker {

enum class GateReason : std::uint8_t {
  allowed,
  // 1
  no_sni,            // the ClientHello had no server_name
  sni_not_brokered,  // the SNI has no broker binding on this port (or is not a valid name)
  // 8
  instance_not_running,  // the instance is stopping or stopped
  binding_revoked,       // the binding's key was revoked
  binding_removed,       // a policy reload removed the binding (binding_reload.h)
  // 2
  host_mismatch,  // Host differs from the SNI (port included)
  // 3
  method_not_allowed,   // the binding does not list the method
  path_not_allowed,     // the path starts with none of the binding's prefixes
  upgrade_not_allowed,  // an Upgrade request on a binding without allow_upgrade
  // 4
  nonce_missing,        // neither the binding's header nor an authorization: Bearer
  nonce_duplicate,      // the nonce's header twice, or the nonce both there and in authorization
  nonce_malformed,      // the carrying header is not a nonce (or "Bearer " nonce)
  nonce_other_binding,  // the nonce of another binding of this instance
  nonce_unknown,        // nonce-shaped but not this instance's: another instance's, or forged
  // 5
  nonce_in_other_header,  // a nonce marker in a header other than the binding's
  nonce_in_target,        // a nonce marker in the request target
  real_key_in_request,    // a header carries a real key
  // body (NonceMarkerScanner; the broker stops the request)
  nonce_in_body,
  // 7 (reported by the upstream client)
  upstream_resolve_failed,    // the binding's name did not resolve
  upstream_address_reserved,  // it resolved only to reserved addresses
  upstream_connect_failed,    // no connection to any address
  upstream_tls_unverified,    // the certificate did not verify (chain or hostname)
  // the response (reported by the broker's response path)
  upstream_content_encoding,  // a coded body (gzip ...) or tunnel (permessage-deflate): unreadable to the
                              // scrubber
};

std::string_view to_string(GateReason r);  // "host_mismatch"
std::string_view describe(GateReason r);   // "the Host header differs from the TLS SNI"
// The status the guest gets: 403 for the gate's refusals, 502 for upstream_*.
int http_status(GateReason r);

struct GateDecision {
  GateReason reason = GateReason::allowed;
  // The binding the SNI maps to (null only for no_sni / sni_not_brokered).
  const policy::BrokerBinding* binding = nullptr;
  // When allowed: "" or "Bearer ", to write before the key (KeyPlacement).
  std::string_view key_prefix;

  bool allowed() const { return reason == GateReason::allowed; }
};

struct GateRequest {
  std::string_view sni;               // as in the ClientHello; empty when absent
  std::uint16_t port = 443;           // the port the guest connected to
  const RequestHead* head = nullptr;  // required: a complete, validated head
  // The instance's real keys, for condition 5 (may be empty: not checked).
  std::span<const std::string_view> real_keys;
};

class InjectionGate {
 public:
  // `policy` and `nonces` outlive the gate; `nonces` is indexed like
  // policy.brokers().
  InjectionGate(const policy::Policy& policy, const NonceTable& nonces);

  [[nodiscard]] GateDecision decide(const GateRequest& request) const;

  // Condition 8's state, set by the daemon.
  void set_running(bool running) { running_ = running; }
  void revoke(std::size_t binding_index);
  void restore(std::size_t binding_index);
  bool revoked(std::size_t binding_index) const;
  // A policy reload's verdict on a binding the broker started with: a
  // removed one is refused (binding_removed) until a reload brings it back.
  void set_removed(std::size_t binding_index, bool removed);
  bool removed(std::size_t binding_index) const;

 private:
  const policy::Policy& policy_;
  const NonceTable& nonces_;
  std::vector<bool> revoked_;
  std::vector<bool> removed_;
  bool running_ = true;
};

}  // namespace abox::broker
