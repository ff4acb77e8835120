// Fuzz target: broker/injection_gate, with the parser in front of it as in
// the broker. The first input byte picks the SNI, the port and the gate's
// state; the rest is the request, in which the tokens "{n0}" "{n1}" "{n2}"
// and "{key}" are replaced by this instance's nonces for bindings 0..2 and
// by the real key, so the fuzzer reaches the allowed paths. Whatever the
// input: no crash, no hang, and when the gate allows:
//   - every condition it promises holds, re-checked here the slow way: the
//     SNI's binding, Host, method, path prefix, upgrade, the nonce exactly
//     once: the binding's header holding this binding's nonce (after
//     "Bearer " only for an authorization header), or, without it and for a
//     binding whose header is not authorization, one "authorization: Bearer
//     NONCE" (the key then in the binding's plain form), never both; the
//     instance running and not revoked;
//   - the head written upstream holds the key exactly once, in the binding's
//     header, and nowhere a nonce marker in any case, nor a guest
//     authorization / proxy-authorization / x-api-key / cookie.
// When it refuses: a binding is named exactly when the SNI has one, and the
// reason has a name and a 403 status.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/http_request.h"
#include "broker/injection_gate.h"
#include "broker/nonce.h"
#include "broker/upstream_head.h"
#include "policy/policy_file.h"

namespace {

using namespace abox::broker;  // NOLINT(google-build-using-namespace): a test driver for this one namespace

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr std::string_view kPolicy = R"(
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
paths = ["/v1/"]

[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
methods = ["POST", "GET", "OPTIONS"]
paths = ["/v1/chat/", "/"]

[[broker]]
name = "ws.example.com"
port = 8443
credential = "ws"
header = "x-token"
nonce_env = "WS_TOKEN"
allow_upgrade = true
)";

constexpr std::string_view kKey = "sk-real-key-0123456789";
constexpr std::string_view kSnis[] = {"api.anthropic.com", "api.openai.com", "ws.example.com", "",
                                      "API.OpenAI.com.",   "evil.example",   "api anthropic",  "a..b"};

struct World {
  abox::policy::Policy policy;
  InstanceSecretBytes secret{};
  NonceTable nonces;

  World() : policy(load()), secret(make_secret()), nonces(secret, policy.brokers()) {}
  static abox::policy::Policy load() {
    auto r = abox::policy::parse_policy(kPolicy, "fuzz.toml");
    check(r.ok());
    return std::move(r).value();
  }
  static InstanceSecretBytes make_secret() {
    InstanceSecretBytes s{};
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return s;
  }
};

const World& world() {
  static const World w;
  return w;
}

std::string expand(std::string_view in, const World& w) {
  std::string out;
  out.reserve(in.size() + 256);
  for (std::size_t i = 0; i < in.size();) {
    std::string_view rest = in.substr(i);
    if (rest.starts_with("{n0}") || rest.starts_with("{n1}") || rest.starts_with("{n2}")) {
      out.append(w.nonces.nonce_for(static_cast<std::size_t>(rest[2] - '0')));
      i += 4;
    } else if (rest.starts_with("{key}")) {
      out.append(kKey);
      i += 5;
    } else {
      out.push_back(in[i++]);
    }
  }
  return out;
}

void check_allowed(const GateDecision& d, const RequestHead& head, std::string_view sni, std::uint16_t port,
                   bool keys_checked, const World& w) {
  const abox::policy::BrokerBinding* b = d.binding;
  check(b != nullptr);
  auto canonical = abox::policy::CanonicalName::from(sni);
  check(canonical.ok() && canonical->view() == b->name && b->port == port);
  std::string host_lower(head.host());
  for (auto& c : host_lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  check(host_lower == b->name || host_lower == b->name + ":" + std::to_string(b->port));
  check(host_lower != b->name || b->port == 443);
  check(std::find(b->methods.begin(), b->methods.end(), head.method()) != b->methods.end());
  check(std::any_of(b->path_prefixes.begin(), b->path_prefixes.end(),
                    [&](const std::string& p) { return head.path().substr(0, p.size()) == p; }));
  check(!head.wants_upgrade() || b->allow_upgrade);
  const std::string nonce(w.nonces.nonce_for(b->index));
  if (head.count(b->header) == 0) {
    // The other place: one "authorization: Bearer NONCE", for a binding
    // whose header is not authorization; the key then in the binding's form.
    check(b->header != "authorization" && head.count("authorization") == 1 && d.key_prefix.empty());
    std::string_view value = head.find("authorization")->value;
    check(value.size() == 7 + nonce.size() && iequals(value.substr(0, 7), "Bearer ") &&
          value.substr(7) == nonce);
  } else {
    check(head.count(b->header) == 1);
    std::string expected = std::string(d.key_prefix) + nonce;
    std::string_view value = head.find(b->header)->value;
    if (d.key_prefix.empty()) {
      check(value == expected);
    } else {
      check(b->header == "authorization" && value.size() == expected.size() &&
            iequals(value.substr(0, 7), "Bearer ") && value.substr(7) == expected.substr(7));
    }
    // Never both places.
    if (b->header != "authorization") {
      for (const auto& f : head.fields())
        check(!iequals(f.name, "authorization") || !looks_like_nonce(f.value));
    }
  }

  std::string upstream;
  write_upstream_head(head, KeyPlacement{b->header, d.key_prefix}, kKey, upstream);
  check(!looks_like_nonce(upstream));
  RequestHead sent;
  HeadLimits roomy;
  roomy.max_head_bytes = upstream.size() + 1;
  roomy.max_fields = kMaxHeaderFields;
  auto r = parse_request_head(abox::base::as_bytes(upstream), roomy, sent);
  if (r.ok()) {
    check(*r == HeadStatus::complete);
    check(sent.count(b->header) == 1);
    check(sent.find(b->header)->value == std::string(d.key_prefix) + std::string(kKey));
    for (auto name : {"authorization", "proxy-authorization", "x-api-key", "cookie"}) {
      if (name != b->header) check(sent.count(name) == 0);
    }
  } else {
    // Only possible when the key header pushes the field count over the cap.
    check(r.error() == HttpError::too_many_fields);
  }
  // With the key check on, exactly one field holds the key: its header.
  if (keys_checked && r.ok()) {
    check(std::count_if(sent.fields().begin(), sent.fields().end(), [&](const HeaderField& f) {
            return f.value == kKey || (f.value.size() > 7 && iequals(f.value.substr(0, 7), "Bearer ") &&
                                       f.value.substr(7) == kKey);
          }) == 1);
  }
  wipe_string(upstream);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 32 * 1024) return 0;
  const World& w = world();
  const std::uint8_t knobs = data[0];
  const std::string_view sni = kSnis[knobs & 7];
  const std::uint16_t port = (knobs & 8) ? 8443 : 443;

  std::string request = expand(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), w);
  RequestHead head;
  auto parsed = parse_request_head(abox::base::as_bytes(request), HeadLimits{}, head);
  if (!parsed.ok() || *parsed != HeadStatus::complete) return 0;

  InjectionGate gate(w.policy, w.nonces);
  if (knobs & 16) gate.set_running(false);
  if (knobs & 32) gate.revoke((knobs >> 6) % w.policy.brokers().size());

  std::string_view keys[] = {kKey};
  GateRequest req;
  req.sni = sni;
  req.port = port;
  req.head = &head;
  if (!(knobs & 128)) req.real_keys = keys;
  GateDecision d = gate.decide(req);

  check(to_string(d.reason) != "unknown");
  if (d.allowed()) {
    check(!(knobs & 16));
    check(!gate.revoked(d.binding->index));
    check_allowed(d, head, sni, port, !req.real_keys.empty(), w);
    // With the key check on, the guest never sent the key itself.
    if (req.real_keys.size() == 1) {
      for (const auto& f : head.fields()) check(f.value != kKey);
    }
  } else {
    check(http_status(d.reason) == 403);
    auto canonical = abox::policy::CanonicalName::from(sni);
    const bool has_binding =
        !sni.empty() && canonical.ok() && w.policy.broker_for(canonical->view(), port) != nullptr;
    check((d.binding != nullptr) == has_binding);
  }
  return 0;
}
