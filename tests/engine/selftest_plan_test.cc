// Which probes the self-test asks for, and how box-guest's report is judged.
#include "engine/instance/selftest_plan.h"

#include <gtest/gtest.h>

#include "policy/policy_file.h"

namespace abox::engine {
namespace {

policy::Policy load(std::string_view text) {
  auto r = policy::parse_policy(text, "test.toml");
  if (!r.ok()) ADD_FAILURE() << r.error().to_string();
  return std::move(r).value();
}

constexpr std::string_view kWithBinding = R"(
version = 1
[[allow]]
names = ["github.com"]
ports = [443]
[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
)";

TEST(SelftestPlan, EveryProbeWithTheFirstRefusedName) {
  auto policy = load(kWithBinding);
  auto plan = plan_selftest(policy, {});
  ASSERT_EQ(plan.probes.size(), 4u);
  EXPECT_EQ(plan.probes[0].kind, guest::ProbeKind::kDeniedName);
  EXPECT_EQ(plan.probes[0].target, "abox-selftest.invalid");
  EXPECT_EQ(plan.probes[1].target, "1.1.1.1:443");
  EXPECT_EQ(plan.probes[2].target, "8.8.8.8:53");
  EXPECT_EQ(plan.probes[3].kind, guest::ProbeKind::kNonceInEnv);
  EXPECT_EQ(plan.probes[3].target, "OPENAI_API_KEY");
  EXPECT_TRUE(plan.skipped.empty());
}

TEST(SelftestPlan, ANameThePolicyAllowsIsNeverTheDeniedProbe) {
  auto policy = load(R"(
version = 1
[[allow]]
names = ["*.invalid", "*.example"]
ports = [443]
)");
  auto plan = plan_selftest(policy, {});
  ASSERT_FALSE(plan.probes.empty());
  EXPECT_EQ(plan.probes[0].target, "pastebin.com");
  auto everything = load(R"(
version = 1
[[allow]]
names = ["*.invalid", "*.example", "*.com"]
ports = [443]
)");
  auto none = plan_selftest(everything, {});
  EXPECT_EQ(none.probes[0].kind, guest::ProbeKind::kDirectAddress);
  ASSERT_EQ(none.skipped.size(), 1u);
}

TEST(SelftestPlan, JudgeNeedsEveryProbeAndNothingElse) {
  auto policy = load(kWithBinding);
  SelftestTargets t;
  t.denied_name = "secret.test";
  auto plan = plan_selftest(policy, t);
  guest::SelftestReport good;
  for (const auto& p : plan.probes)
    good.results.push_back({p.kind, guest::ProbeOutcome::kPassed, p.target, "ok"});
  EXPECT_TRUE(judge_selftest(plan, good).passed);

  auto failed = good;
  failed.results[1].outcome = guest::ProbeOutcome::kFailed;
  failed.results[1].detail = "connected";
  auto v = judge_selftest(plan, failed);
  EXPECT_FALSE(v.passed);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_NE(v.failures[0].find("direct_address 1.1.1.1:443: got through (connected)"), std::string::npos);

  auto missing = good;
  missing.results.pop_back();
  EXPECT_FALSE(judge_selftest(plan, missing).passed);

  auto skipped = good;
  skipped.results[0].outcome = guest::ProbeOutcome::kSkipped;
  EXPECT_FALSE(judge_selftest(plan, skipped).passed);

  auto extra = good;
  extra.results.push_back({guest::ProbeKind::kDeniedName, guest::ProbeOutcome::kPassed, "other.test", ""});
  EXPECT_FALSE(judge_selftest(plan, extra).passed);
}

TEST(SelftestPlan, ProbeAddresses) {
  EXPECT_TRUE(valid_probe_address("10.0.0.1:53"));
  for (auto bad : {"10.0.0.1", "10.0.0.1:0", "10.0.0.1:65536", "host:53", ":53", "10.0.0.1:5x", "[::1]:53"})
    EXPECT_FALSE(valid_probe_address(bad)) << bad;
}

}  // namespace
}  // namespace abox::engine
