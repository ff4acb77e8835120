// Fuzz target: policy files. Operators write them, but they also arrive from
// scripts and generators; whatever the bytes, parsing must end in a Policy or
// diagnostics with a position, never a crash or a hang. A parsed policy is
// also exercised, so that what the parser accepts is safe to query.
#include <cstdint>
#include <string_view>

#include "policy/policy_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::policy;
  if (size > 64 * 1024) return 0;  // policies are small; keep each run fast
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = parse_policy(text, "fuzz.toml");
  if (!r.ok()) {
    const PolicyError& e = r.error();
    if (e.diagnostics.empty()) __builtin_trap();  // an error must say what is wrong
    // The list is cut at kMaxPolicyDiagnostics, and the count says by how much.
    if (e.diagnostics.size() > kMaxPolicyDiagnostics || e.total < e.diagnostics.size()) __builtin_trap();
    return 0;
  }
  const Policy& p = *r;
  for (const auto& rule : p.rules()) {
    for (const auto& n : rule.names) {
      std::string probe = n.wildcard ? "x." + n.base : n.base;
      if (!p.allows_name(probe)) __builtin_trap();  // every listed name must match itself
      for (const auto& pr : rule.ports) (void)p.admits(probe, pr.first, Protocol::tcp);
      // A rule that allows icmp admits echo to each of its names (ports do not apply).
      if (rule.icmp && p.admits(probe, 0, Protocol::icmp) == nullptr) __builtin_trap();
    }
  }
  for (const auto& b : p.brokers()) {
    if (p.broker_for(b.name, b.port) == nullptr) __builtin_trap();
  }
  (void)policy_warnings(p);
  return 0;
}
