// SelftestPlan: which refusals box-guest proves from inside the guest before
// the command starts (docs/control-protocol.md, "The self-test"), and how its
// report is judged.
//
// The probes: a name the policy refuses (the first candidate the policy does
// not allow; skipped when it allows them all), a TCP connect straight to an
// address no allowed name was answered with, a UDP DNS query straight to a
// resolver that is not the gateway, and for each [[broker]] binding that its
// nonce is in the environment. The defaults are public addresses: behind
// abox-net nothing reaches them, which is what the probe proves; a test points
// them at its own fake internet.
//
// judge() passes only when every probe asked for came back, none failed, and
// nothing came back that was not asked (a report is box-guest's MAC'd word,
// but a hostile guest kernel could still lie: the self-test is a canary, not
// the enforcement, which stays in abox-net).
#pragma once

#include <string>
#include <vector>

#include "guest/protocol/messages.h"
#include "policy/policy.h"

namespace abox::engine {

struct SelftestTargets {
  std::string denied_name;  // "" = the first of kDeniedNameCandidates the policy refuses
  std::string direct_address = "1.1.1.1:443";
  std::string foreign_resolver = "8.8.8.8:53";
};

struct SelftestPlan {
  std::vector<guest::Probe> probes;
  std::vector<std::string> skipped;  // probes not asked for, and why
};

SelftestPlan plan_selftest(const policy::Policy& policy, const SelftestTargets& targets);

struct SelftestVerdict {
  bool passed = false;
  std::vector<std::string> failures;  // one line per failed, missing or unasked probe
};

SelftestVerdict judge_selftest(const SelftestPlan& plan, const guest::SelftestReport& report);

// Checks ADDR:PORT (IPv4); the message says what is wrong.
bool valid_probe_address(const std::string& text);

}  // namespace abox::engine
