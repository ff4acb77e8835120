// Injection gate. How this works: decide() walks the conditions in the order
// the header lists, returning at the first that fails, so the reason is
// always the first broken condition. It reads only the validated head (views
// into the guest's bytes, already bounded by the parser), the policy, the
// nonce table and the revocation bits; it copies nothing and keeps no state
// per request.
//
// Cost per request: the header fields are walked three times (the binding's
// header, nonce markers, real keys), each O(head bytes), and the target once.
#include "broker/injection_gate.h"

#include <openssl/mem.h>

#include <algorithm>
#include <array>
#include <cstdlib>

namespace abox::broker {

namespace {

constexpr std::uint16_t kDefaultHttpsPort = 443;
constexpr std::string_view kBearer = "Bearer ";

bool is_authorization_header(std::string_view name) {
  return iequals(name, "authorization") || iequals(name, "proxy-authorization");
}

// The credential part of an authorization value: after "Bearer " (scheme in
// any case, one space), or the whole value.
std::string_view strip_bearer(std::string_view value, std::string_view& prefix) {
  if (value.size() > kBearer.size() && iequals(value.substr(0, kBearer.size()), kBearer)) {
    prefix = kBearer;
    return value.substr(kBearer.size());
  }
  prefix = {};
  return value;
}

std::string_view port_text(std::uint16_t port, std::array<char, 6>& buf) {
  std::size_t n = buf.size();
  do {
    buf[--n] = static_cast<char>('0' + port % 10);
    port = static_cast<std::uint16_t>(port / 10);
  } while (port != 0);
  return {buf.data() + n, buf.size() - n};
}

// Condition 2: Host is the binding's name, with ":port" optional on 443 and
// required elsewhere. The port is compared as text, so "0443" is no match.
bool host_matches(std::string_view host, const policy::BrokerBinding& binding) {
  if (iequals(host, binding.name)) return binding.port == kDefaultHttpsPort;
  std::size_t colon = host.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::array<char, 6> buf{};
  return iequals(host.substr(0, colon), binding.name) &&
         host.substr(colon + 1) == port_text(binding.port, buf);
}

bool equals_constant_time(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool is_real_key(std::string_view value, std::span<const std::string_view> keys) {
  std::string_view prefix;
  std::string_view bare = strip_bearer(value, prefix);
  bool found = false;
  for (auto key : keys) {
    if (key.empty()) continue;
    found |= equals_constant_time(value, key);
    found |= equals_constant_time(bare, key);
  }
  return found;
}

// Condition 4's first half: which field carries the nonce. The binding's
// header when present (once; an authorization that looks like a nonce too
// is the nonce twice); otherwise, unless the binding's header is
// authorization itself, one authorization field in the Bearer scheme. The
// field's value is checked by the caller. Returns allowed, or the refusal.
GateReason find_nonce_carrier(const RequestHead& head, const policy::BrokerBinding& binding,
                              const HeaderField*& carrier) {
  const bool alternative = !iequals(binding.header, "authorization");
  std::size_t own = 0;
  std::size_t authorizations = 0;
  const HeaderField* authorization = nullptr;
  for (const auto& f : head.fields()) {
    if (iequals(f.name, binding.header)) {
      ++own;
      carrier = &f;
    } else if (alternative && iequals(f.name, "authorization")) {
      ++authorizations;
      authorization = &f;
    }
  }
  if (own > 1) return GateReason::nonce_duplicate;
  if (own == 1) {
    // A guest credential of its own in authorization (Basic ...) is only
    // dropped; a nonce there as well is the nonce given twice.
    if (authorization != nullptr && looks_like_nonce(authorization->value))
      return GateReason::nonce_duplicate;
    return GateReason::allowed;
  }
  if (authorizations == 0) return GateReason::nonce_missing;
  if (authorizations > 1) return GateReason::nonce_duplicate;
  std::string_view bearer;
  strip_bearer(authorization->value, bearer);
  if (bearer.empty()) {
    // Not the Bearer scheme: a nonce there is in the wrong form, anything
    // else is no nonce at all.
    return looks_like_nonce(authorization->value) ? GateReason::nonce_malformed : GateReason::nonce_missing;
  }
  carrier = authorization;
  return GateReason::allowed;
}

GateDecision refuse(GateReason reason, const policy::BrokerBinding* binding = nullptr) {
  GateDecision d;
  d.reason = reason;
  d.binding = binding;
  return d;
}

}  // namespace

InjectionGate::InjectionGate(const policy::Policy& policy, const NonceTable& nonces)
    : policy_(policy),
      nonces_(nonces),
      revoked_(policy.brokers().size(), false),
      removed_(policy.brokers().size(), false) {}

void InjectionGate::revoke(std::size_t binding_index) {
  revoked_.at(binding_index) = true;
}
void InjectionGate::restore(std::size_t binding_index) {
  revoked_.at(binding_index) = false;
}
bool InjectionGate::revoked(std::size_t binding_index) const {
  return revoked_.at(binding_index);
}
void InjectionGate::set_removed(std::size_t binding_index, bool removed) {
  removed_.at(binding_index) = removed;
}
bool InjectionGate::removed(std::size_t binding_index) const {
  return removed_.at(binding_index);
}

GateDecision InjectionGate::decide(const GateRequest& request) const {
  if (request.head == nullptr) std::abort();  // broken invariant: only parsed heads reach the gate
  const RequestHead& head = *request.head;

  // 1. SNI with a binding.
  if (request.sni.empty()) return refuse(GateReason::no_sni);
  auto sni = policy::CanonicalName::from(request.sni);
  if (!sni) return refuse(GateReason::sni_not_brokered);
  const policy::BrokerBinding* binding = policy_.broker_for(sni->view(), request.port);
  if (binding == nullptr) return refuse(GateReason::sni_not_brokered);
  const std::size_t index = binding->index;

  // 8. Running, not revoked.
  if (!running_) return refuse(GateReason::instance_not_running, binding);
  if (index >= revoked_.size() || revoked_[index]) return refuse(GateReason::binding_revoked, binding);
  if (index >= removed_.size() || removed_[index]) return refuse(GateReason::binding_removed, binding);

  // 2. Host.
  if (!host_matches(head.host(), *binding)) return refuse(GateReason::host_mismatch, binding);

  // 3. Method, path, upgrade.
  if (std::find(binding->methods.begin(), binding->methods.end(), head.method()) == binding->methods.end()) {
    return refuse(GateReason::method_not_allowed, binding);
  }
  if (std::none_of(binding->path_prefixes.begin(), binding->path_prefixes.end(),
                   [&](const std::string& prefix) { return head.path().starts_with(prefix); })) {
    return refuse(GateReason::path_not_allowed, binding);
  }
  if (head.wants_upgrade() && !binding->allow_upgrade)
    return refuse(GateReason::upgrade_not_allowed, binding);

  // 4. The nonce, exactly once: in the binding's header, or (for a binding
  // whose header is not authorization) as "authorization: Bearer NONCE",
  // where today's SDKs put a key; never in both.
  const HeaderField* carrier = nullptr;
  auto nonce_at = find_nonce_carrier(head, *binding, carrier);
  if (nonce_at != GateReason::allowed) return refuse(nonce_at, binding);
  std::string_view bearer;
  std::string_view candidate = carrier->value;
  if (is_authorization_header(carrier->name)) candidate = strip_bearer(candidate, bearer);
  if (!is_nonce_shaped(candidate)) return refuse(GateReason::nonce_malformed, binding);
  auto owner = nonces_.binding_of(candidate);
  if (!owner) return refuse(GateReason::nonce_unknown, binding);
  if (*owner != index) return refuse(GateReason::nonce_other_binding, binding);
  // The key goes in the binding's header, in the form its provider expects:
  // after "Bearer " only in an authorization binding whose guest used it.
  std::string_view key_prefix = is_authorization_header(binding->header) ? bearer : std::string_view{};

  // 5. No nonce or key anywhere else.
  for (const auto& f : head.fields()) {
    if (&f == carrier) continue;
    if (looks_like_nonce(f.name) || looks_like_nonce(f.value)) {
      return refuse(GateReason::nonce_in_other_header, binding);
    }
  }
  if (looks_like_nonce(head.target(), true)) return refuse(GateReason::nonce_in_target, binding);
  if (!request.real_keys.empty()) {
    for (const auto& f : head.fields()) {
      if (is_real_key(f.value, request.real_keys)) return refuse(GateReason::real_key_in_request, binding);
    }
  }

  GateDecision d;
  d.reason = GateReason::allowed;
  d.binding = binding;
  d.key_prefix = key_prefix;
  return d;
}

std::string_view to_string(GateReason r) {
  switch (r) {
    case GateReason::allowed:
      return "allowed";
    case GateReason::no_sni:
      return "no_sni";
    case GateReason::sni_not_brokered:
      return "sni_not_brokered";
    case GateReason::instance_not_running:
      return "instance_not_running";
    case GateReason::binding_revoked:
      return "binding_revoked";
    case GateReason::binding_removed:
      return "binding_removed";
    case GateReason::host_mismatch:
      return "host_mismatch";
    case GateReason::method_not_allowed:
      return "method_not_allowed";
    case GateReason::path_not_allowed:
      return "path_not_allowed";
    case GateReason::upgrade_not_allowed:
      return "upgrade_not_allowed";
    case GateReason::nonce_missing:
      return "nonce_missing";
    case GateReason::nonce_duplicate:
      return "nonce_duplicate";
    case GateReason::nonce_malformed:
      return "nonce_malformed";
    case GateReason::nonce_other_binding:
      return "nonce_other_binding";
    case GateReason::nonce_unknown:
      return "nonce_unknown";
    case GateReason::nonce_in_other_header:
      return "nonce_in_other_header";
    case GateReason::nonce_in_target:
      return "nonce_in_target";
    case GateReason::real_key_in_request:
      return "real_key_in_request";
    case GateReason::nonce_in_body:
      return "nonce_in_body";
    case GateReason::upstream_resolve_failed:
      return "upstream_resolve_failed";
    case GateReason::upstream_address_reserved:
      return "upstream_address_reserved";
    case GateReason::upstream_connect_failed:
      return "upstream_connect_failed";
    case GateReason::upstream_tls_unverified:
      return "upstream_tls_unverified";
    case GateReason::upstream_content_encoding:
      return "upstream_content_encoding";
  }
  return "unknown";
}

std::string_view describe(GateReason r) {
  switch (r) {
    case GateReason::allowed:
      return "every condition holds";
    case GateReason::no_sni:
      return "the TLS ClientHello has no server name";
    case GateReason::sni_not_brokered:
      return "the TLS server name has no broker binding on this port";
    case GateReason::instance_not_running:
      return "the instance is not running";
    case GateReason::binding_revoked:
      return "the binding's key was revoked";
    case GateReason::binding_removed:
      return "a policy reload removed the binding";
    case GateReason::host_mismatch:
      return "the Host header differs from the TLS server name";
    case GateReason::method_not_allowed:
      return "the binding does not allow this method";
    case GateReason::path_not_allowed:
      return "the binding does not allow this path";
    case GateReason::upgrade_not_allowed:
      return "the binding does not allow upgrades";
    case GateReason::nonce_missing:
      return "no nonce in the binding's header or in authorization: Bearer";
    case GateReason::nonce_duplicate:
      return "the nonce's header appears more than once, or the nonce is in both the binding's header and "
             "authorization";
    case GateReason::nonce_malformed:
      return "the header carrying the nonce does not hold a nonce in the accepted form";
    case GateReason::nonce_other_binding:
      return "the nonce belongs to another binding";
    case GateReason::nonce_unknown:
      return "the nonce is not this instance's";
    case GateReason::nonce_in_other_header:
      return "a nonce in a header other than the binding's";
    case GateReason::nonce_in_target:
      return "a nonce in the request target";
    case GateReason::real_key_in_request:
      return "a header carries a real key";
    case GateReason::nonce_in_body:
      return "a nonce in the request body";
    case GateReason::upstream_resolve_failed:
      return "the upstream name did not resolve";
    case GateReason::upstream_address_reserved:
      return "the upstream resolved only to reserved addresses";
    case GateReason::upstream_connect_failed:
      return "the upstream could not be reached";
    case GateReason::upstream_tls_unverified:
      return "the upstream certificate did not verify";
    case GateReason::upstream_content_encoding:
      return "the upstream sent a compressed body or tunnel (Content-Encoding, a WebSocket extension), which "
             "the key scrubber cannot read";
  }
  return "unknown reason";
}

int http_status(GateReason r) {
  switch (r) {
    case GateReason::allowed:
      return 200;
    case GateReason::upstream_resolve_failed:
    case GateReason::upstream_address_reserved:
    case GateReason::upstream_connect_failed:
    case GateReason::upstream_tls_unverified:
    case GateReason::upstream_content_encoding:
      return 502;
    default:
      return 403;
  }
}

}  // namespace abox::broker
