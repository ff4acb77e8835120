// policy/explain.h: what `abox policy explain` (and `abox-net explain`)
// says about a target. An address with a port is judged against the ports
// and protocols of the rules, and "needs an answer" is never "allowed".
#include "policy/explain.h"

#include <gtest/gtest.h>

#include "policy/policy_file.h"

namespace abox::policy {
namespace {

Policy parse(std::string_view text) {
  auto r = parse_policy(text, "p.toml");
  if (!r.ok()) ADD_FAILURE() << r.error().to_string();
  return std::move(r).value();
}

Explanation ask(const Policy& p, std::string_view target, Protocol proto = Protocol::tcp) {
  auto t = ExplainTarget::parse(target);
  EXPECT_TRUE(t) << target;
  return explain(p, *t, proto);
}

std::string json(const Explanation& e) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object();
  write_explanation_fields(w, e);
  w.end_object();
  return js;
}

constexpr std::string_view kPolicy = R"([[allow]]
names = ["github.com", "*.github.com"]
ports = [443]

[[allow]]
names = ["ntp.example"]
ports = [123]
protocols = ["udp"]

[[broker]]
name = "api.example.com"
port = 8443
credential = "k"
header = "x-api-key"
nonce_env = "K"
)";

TEST(ExplainTarget, ReadsEveryForm) {
  auto a = ExplainTarget::parse("140.82.112.3:9999");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_address());
  EXPECT_EQ(a->port, 9999);
  auto b = ExplainTarget::parse("[2001:db8::1]:443");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->is_address());
  auto c = ExplainTarget::parse("api.github.com:443");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "api.github.com");
  // An empty name is a mistake in the command line (exit 2), not a name to judge.
  for (auto bad : {"a.com:0", "1.2.3.4:65536", "a.com:x", "[::1]:0", ":80", "", ":"})
    EXPECT_FALSE(ExplainTarget::parse(bad)) << bad;
}

// The issue's first case: a port no rule allows is refused for an address,
// whatever the DNS gate might answer.
TEST(Explain, ANameWithABudgetInAuditModeSaysBoth) {
  Policy p = parse(
      "[mode]\naudit = true\n[[allow]]\nnames = [\"paste.example.com\"]\nports = [443]\n"
      "max_bytes_out = 1048576\nmax_flows = 5\nper = \"10m\"\n");
  auto e = ask(p, "paste.example.com:443");
  ASSERT_TRUE(e.allowed());
  std::string all;
  for (const auto& d : e.details) all += d + "\n";
  EXPECT_NE(all.find("egress budget per 600 s: 1048576 bytes out, 5 new flows"), std::string::npos) << all;
  EXPECT_NE(all.find("[mode] audit = true"), std::string::npos) << all;
}

TEST(Explain, AnAddressOnAPortNoRuleAllowsIsRefused) {
  Policy p = parse(kPolicy);
  auto e = ask(p, "140.82.112.3:9999");
  EXPECT_EQ(e.verdict, Verdict::refused);
  EXPECT_FALSE(e.allowed());
  EXPECT_NE(e.reason.find("no rule allows 9999/tcp for any name"), std::string::npos) << e.reason;
  EXPECT_NE(json(e).find("\"verdict\":\"refused\",\"allowed\":false"), std::string::npos) << json(e);
}

// The issue's second case: --udp to port 53 on a policy whose only rule on
// 53... has none: UDP is judged against the rules' protocols.
TEST(Explain, AnAddressIsJudgedAgainstTheRulesProtocols) {
  Policy p = parse(kPolicy);
  EXPECT_EQ(ask(p, "140.82.112.3:53", Protocol::udp).verdict, Verdict::refused);
  EXPECT_EQ(ask(p, "140.82.112.3:443", Protocol::udp).verdict, Verdict::refused);  // 443 is tcp only
  EXPECT_EQ(ask(p, "192.0.2.200:123", Protocol::tcp).verdict, Verdict::refused);   // 123 is udp only
  auto ntp = ask(p, "140.82.112.3:123", Protocol::udp);
  EXPECT_EQ(ntp.verdict, Verdict::answer_required);
  ASSERT_EQ(ntp.port_rules.size(), 1u);
  EXPECT_EQ(ntp.port_rules[0]->names[0].to_string(), "ntp.example");
}

TEST(Explain, IcmpIsAskedWithoutAPort) {
  Policy p = parse(R"([[allow]]
names = ["github.com"]
ports = [443]

[[allow]]
names = ["ping.example"]
protocols = ["icmp"]
)");
  auto yes = ask(p, "ping.example", Protocol::icmp);
  EXPECT_EQ(yes.verdict, Verdict::allowed);
  EXPECT_NE(yes.reason.find("allows icmp echo"), std::string::npos) << yes.reason;
  auto no = ask(p, "github.com", Protocol::icmp);
  EXPECT_EQ(no.verdict, Verdict::refused);
  EXPECT_NE(no.reason.find("no rule for this name allows icmp"), std::string::npos) << no.reason;
  auto address = ask(p, "140.82.112.3", Protocol::icmp);
  EXPECT_EQ(address.verdict, Verdict::answer_required);
  ASSERT_EQ(address.port_rules.size(), 1u);
  EXPECT_EQ(address.port_rules[0]->names[0].to_string(), "ping.example");
  EXPECT_EQ(ask(p, "127.0.0.1", Protocol::icmp).verdict, Verdict::refused);  // reserved
  // Without icmp anywhere: no answer can admit echo.
  Policy none = parse("[[allow]]\nnames = [\"a.com\"]\nports = [443]\n");
  auto refused = ask(none, "140.82.112.3", Protocol::icmp);
  EXPECT_EQ(refused.verdict, Verdict::refused);
  EXPECT_NE(refused.reason.find("no rule allows icmp echo for any name"), std::string::npos)
      << refused.reason;
}

TEST(Explain, AnswerRequiredIsNotAllowedAndNamesTheNamesItNeeds) {
  Policy p = parse(kPolicy);
  auto e = ask(p, "140.82.112.3:443");
  EXPECT_EQ(e.verdict, Verdict::answer_required);
  EXPECT_FALSE(e.allowed());
  ASSERT_EQ(e.port_rules.size(), 1u);
  const std::string js = json(e);
  EXPECT_NE(js.find("\"verdict\":\"answer-required\",\"allowed\":false"), std::string::npos) << js;
  EXPECT_NE(
      js.find("\"needs_answer_for\":[{\"name\":\"github.com\",\"line\":1,\"column\":1,\"broker\":false},"
              "{\"name\":\"*.github.com\""),
      std::string::npos)
      << js;
  // A binding's port counts too (TCP): a flow to it goes to the broker.
  auto b = ask(p, "140.82.112.3:8443");
  EXPECT_EQ(b.verdict, Verdict::answer_required);
  ASSERT_EQ(b.port_brokers.size(), 1u);
  EXPECT_NE(json(b).find("{\"name\":\"api.example.com\",\"line\":10,\"column\":1,\"broker\":true}"),
            std::string::npos)
      << json(b);
  // An address alone: still only through an answer.
  auto bare = ask(p, "140.82.112.3");
  EXPECT_EQ(bare.verdict, Verdict::answer_required);
  EXPECT_FALSE(bare.allowed());
}

TEST(Explain, AReservedAddressIsRefusedOnAnyPort) {
  Policy p = parse(kPolicy);
  for (auto t : {"169.254.169.254", "169.254.169.254:443", "127.0.0.1:443", "[::1]:443"}) {
    auto e = ask(p, t);
    EXPECT_EQ(e.verdict, Verdict::refused) << t;
    ASSERT_NE(e.reserved, nullptr) << t;
  }
}

TEST(Explain, NamesAreJudgedAsBefore) {
  Policy p = parse(kPolicy);
  auto ok = ask(p, "api.github.com:443");
  EXPECT_EQ(ok.verdict, Verdict::allowed);
  EXPECT_TRUE(ok.allowed());
  EXPECT_EQ(ok.rule_pattern, "*.github.com");
  EXPECT_EQ(ask(p, "api.github.com:80").verdict, Verdict::refused);
  EXPECT_EQ(ask(p, "api.github.com").verdict, Verdict::resolvable);
  EXPECT_TRUE(ask(p, "api.github.com").allowed());
  EXPECT_EQ(ask(p, "api.example.com:8443").verdict, Verdict::brokered);
  EXPECT_EQ(ask(p, "pastebin.com:443").verdict, Verdict::refused);
  EXPECT_EQ(ask(p, "ntp.example:123", Protocol::udp).verdict, Verdict::allowed);
}

}  // namespace
}  // namespace abox::policy
