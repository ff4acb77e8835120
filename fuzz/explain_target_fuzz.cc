// Fuzz target: policy/explain's targets. `abox policy explain` and
// `abox-net explain` read TARGET from the command line, and a running
// abox-net reads it again from the "explain ARGS" line its stats socket
// received; whatever the text, no crash, no hang, and:
//   - a target that parses has a port of 1-65535 or none, and names an
//     address or a name, never both;
//   - its explanation, for TCP and UDP, against a policy with rules,
//     a binding and a lifted reserved range, is consistent: allowed() is
//     true exactly for allowed, brokered and resolvable; an address is
//     never "allowed", "brokered" or "resolvable" (it is reached only
//     through an answer), and a name is never answer-required; a reason
//     is always given; the JSON fields can be written.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/json.h"
#include "policy/explain.h"
#include "policy/policy_file.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const abox::policy::Policy& fixed_policy() {
  static const std::optional<abox::policy::Policy> policy = [] {
    auto r = abox::policy::parse_policy(R"([[allow]]
names = ["example.com", "*.example.org"]
ports = [443, "8000-8080"]

[[allow]]
names = ["dns.example.net"]
ports = [53]
protocols = ["udp"]

[[allow]]
names = ["ping.example.net"]
protocols = ["icmp"]

[[broker]]
name = "api.example.com"
credential = "k"
header = "x-api-key"
nonce_env = "K"

[unsafe]
allow_reserved = ["10.9.0.0/16"]
)",
                                        "fuzz.toml");
    return r.ok() ? std::optional(std::move(r).value()) : std::nullopt;
  }();
  check(policy.has_value());
  return *policy;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::policy;  // NOLINT(google-build-using-namespace): a test driver for this namespace
  if (size > 4096) return 0;     // a target is a name or an address; keep each run fast
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto target = ExplainTarget::parse(text);
  if (!target) return 0;
  check(target->text == text);
  check(!target->port || *target->port != 0);
  check(!(target->is_address() && !target->name.empty()));
  for (Protocol proto : {Protocol::tcp, Protocol::udp, Protocol::icmp}) {
    Explanation e = explain(fixed_policy(), *target, proto);
    const bool yes =
        e.verdict == Verdict::allowed || e.verdict == Verdict::brokered || e.verdict == Verdict::resolvable;
    check(e.allowed() == yes);
    check(!e.reason.empty());
    if (target->is_address()) {
      check(e.verdict == Verdict::answer_required || e.verdict == Verdict::refused);
    } else {
      check(e.verdict != Verdict::answer_required);
    }
    std::string json;
    abox::base::JsonWriter w(json);
    w.begin_object();
    write_explanation_fields(w, e);
    w.end_object();
    check(!json.empty());
  }
  return 0;
}
