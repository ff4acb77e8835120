#include "engine/instance/selftest_plan.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

namespace abox::engine {
namespace {

constexpr std::string_view kDeniedNameCandidates[] = {
    "abox-selftest.invalid",
    "selftest.abox-denied.example",
    "pastebin.com",
};

}  // namespace

bool valid_probe_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = text.substr(0, colon);
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) != 1) return false;
  unsigned port = 0;
  auto digits = std::string_view(text).substr(colon + 1);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  return ec == std::errc() && ptr == digits.data() + digits.size() && port >= 1 && port <= 65535;
}

SelftestPlan plan_selftest(const policy::Policy& policy, const SelftestTargets& targets) {
  SelftestPlan plan;
  std::string denied = targets.denied_name;
  if (denied.empty()) {
    for (auto candidate : kDeniedNameCandidates) {
      if (!policy.allows_name(candidate)) {
        denied = std::string(candidate);
        break;
      }
    }
  }
  if (denied.empty()) {
    plan.skipped.push_back("denied_name: the policy allows every candidate name");
  } else {
    plan.probes.push_back({guest::ProbeKind::kDeniedName, denied});
  }
  plan.probes.push_back({guest::ProbeKind::kDirectAddress, targets.direct_address});
  plan.probes.push_back({guest::ProbeKind::kForeignResolver, targets.foreign_resolver});
  for (const auto& b : policy.brokers()) {
    bool already = std::any_of(plan.probes.begin(), plan.probes.end(), [&](const guest::Probe& p) {
      return p.kind == guest::ProbeKind::kNonceInEnv && p.target == b.nonce_env;
    });
    if (!already) plan.probes.push_back({guest::ProbeKind::kNonceInEnv, b.nonce_env});
  }
  return plan;
}

SelftestVerdict judge_selftest(const SelftestPlan& plan, const guest::SelftestReport& report) {
  SelftestVerdict v;
  for (const auto& probe : plan.probes) {
    auto it = std::find_if(report.results.begin(), report.results.end(), [&](const guest::ProbeResult& r) {
      return r.kind == probe.kind && r.target == probe.target;
    });
    std::string label = std::string(guest::probe_kind_name(probe.kind)) + " " + probe.target;
    if (it == report.results.end()) {
      v.failures.push_back(label + ": box-guest did not report it");
    } else if (it->outcome == guest::ProbeOutcome::kFailed) {
      v.failures.push_back(label + ": got through (" + it->detail + ")");
    } else if (it->outcome == guest::ProbeOutcome::kSkipped) {
      v.failures.push_back(label + ": box-guest skipped it (" + it->detail + ")");
    }
  }
  for (const auto& r : report.results) {
    bool asked = std::any_of(plan.probes.begin(), plan.probes.end(),
                             [&](const guest::Probe& p) { return p.kind == r.kind && p.target == r.target; });
    if (!asked)
      v.failures.push_back(std::string(guest::probe_kind_name(r.kind)) + " " + r.target + ": not asked for");
  }
  v.passed = v.failures.empty();
  return v;
}

}  // namespace abox::engine
