// suggest_policy(): from an event log's text to a policy that allows exactly
// what was observed. The output is parsed back with parse_policy() and
// asked (admits()) about every observed flow and a few that were not.
#include "engine/cli/policy_suggest.h"

#include <gtest/gtest.h>

#include <string>

#include "policy/policy_file.h"

namespace abox::engine {
namespace {

using policy::Protocol;

constexpr std::string_view kLog =
    R"({"time":"2026-12-02T15:00:02.000Z","kind":"start","mode":"run","audit":true}
{"time":"2026-12-02T15:00:03.000Z","kind":"would_deny","reason":"name not allowed","name":"web.example.test","type":"A","audit":true}
{"time":"2026-12-02T15:00:03.100Z","kind":"would_deny","reason":"port not allowed","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp","audit":true}
{"time":"2026-12-02T15:00:04.000Z","kind":"would_deny","reason":"port not allowed","name":"web.example.test","dst":"93.184.215.14:443","proto":"tcp","audit":true}
{"time":"2026-12-02T15:00:01.000Z","kind":"would_deny","reason":"port not allowed","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp","audit":true}
{"time":"2026-12-02T15:00:05.000Z","kind":"admit","reason":"answered name","name":"tools.example.test","dst":"93.184.215.17:9000","proto":"tcp"}
{"time":"2026-12-02T15:00:06.000Z","kind":"admit","reason":"audit mode: would be denied","name":"ntp.example.test","dst":"93.184.215.19:123","proto":"udp"}
{"time":"2026-12-02T15:00:06.000Z","kind":"would_deny","reason":"x","name":"ntp.example.test","dst":"93.184.215.19:123","proto":"udp","audit":true}
{"time":"2026-12-02T15:00:07.000Z","kind":"would_deny","reason":"not answered","name":"","dst":"1.2.3.4:22","proto":"tcp","audit":true}
{"time":"2026-12-02T15:00:08.000Z","kind":"deny","reason":"destination in a reserved range","dst":"169.254.169.254:80","proto":"tcp"}
{"time":"2026-12-02T15:00:09.000Z","kind":"would_deny","reason":"name not allowed","name":"quiet.example.test","type":"AAAA","audit":true}
)";

SuggestOptions with(bool group, const policy::Policy* from = nullptr, std::string_view from_text = {},
                    std::string_view source = {}) {
  SuggestOptions o;
  o.group_wildcards = group;
  o.from = from;
  o.from_text = from_text;
  o.events_source = source;
  return o;
}

policy::Policy parsed(const std::string& text) {
  auto p = policy::parse_policy(text, "suggested.toml");
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().to_string()) << text;
  return std::move(p).value();
}

TEST(PolicySuggest, AllowsExactlyWhatWasObservedWithACommentPerRule) {
  auto s = suggest_policy(kLog, with(false, nullptr, {}, "events.jsonl"));
  ASSERT_TRUE(s.ok()) << s.error();
  const policy::Policy p = parsed(s->text);
  EXPECT_NE(p.admits("web.example.test", 80, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("web.example.test", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("tools.example.test", 9000, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("ntp.example.test", 123, Protocol::udp), nullptr);
  // Nothing else.
  EXPECT_EQ(p.admits("web.example.test", 8080, Protocol::tcp), nullptr);
  EXPECT_EQ(p.admits("web.example.test", 80, Protocol::udp), nullptr);
  EXPECT_EQ(p.admits("ntp.example.test", 123, Protocol::tcp), nullptr);
  EXPECT_FALSE(p.allows_name("quiet.example.test"));
  EXPECT_FALSE(p.allows_name("api.example.test"));
  EXPECT_EQ(s->rules, 3u);
  EXPECT_EQ(s->flows, 5u);
  EXPECT_NE(s->text.find("# 3 flows (3 would_deny), first seen 2026-12-02T15:00:01.000Z"), std::string::npos)
      << s->text;
  EXPECT_NE(s->text.find("1.2.3.4:22/tcp: 1 flow(s) to an address no name was answered for"),
            std::string::npos);
  EXPECT_NE(s->text.find("quiet.example.test: asked by DNS, no flow followed"), std::string::npos);
  EXPECT_NE(s->text.find("169.254.169.254:80/tcp: 1 refused as reserved"), std::string::npos);
  EXPECT_EQ(s->text.find("\"169.254.169.254"), std::string::npos);
}

// Echo events (proto "icmp", dst an address alone) become a rule with
// protocols = ["icmp"] and no ports.
TEST(PolicySuggest, EchoBecomesAnIcmpRuleWithoutPorts) {
  const std::string log =
      R"({"kind":"would_deny","reason":"icmp (echo) not allowed","name":"ping.example.test","dst":"93.184.215.14","proto":"icmp","audit":true}
{"kind":"admit","name":"web.example.test","dst":"93.184.215.15:443","proto":"tcp"}
{"kind":"admit","name":"web.example.test","dst":"2001:db8::15","proto":"icmp"}
{"kind":"close","name":"web.example.test","dst":"2001:db8::15","proto":"icmp","bytes_out":112,"bytes_in":112}
)";
  auto s = suggest_policy(log, with(false));
  ASSERT_TRUE(s.ok()) << s.error();
  const policy::Policy p = parsed(s->text);
  EXPECT_NE(p.admits("ping.example.test", 0, Protocol::icmp), nullptr);
  EXPECT_EQ(p.admits("ping.example.test", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("web.example.test", 0, Protocol::icmp), nullptr);
  EXPECT_NE(p.admits("web.example.test", 443, Protocol::tcp), nullptr);
  EXPECT_EQ(s->rules, 3u) << s->text;
  EXPECT_NE(s->text.find("protocols = [\"icmp\"]"), std::string::npos) << s->text;
  EXPECT_NE(s->text.find("112 bytes out and 112 in"), std::string::npos) << s->text;
}

TEST(PolicySuggest, FromAPolicyAddsOnlyWhatItDoesNotAllow) {
  const std::string from_text =
      "[dns]\nupstreams = [\"93.184.215.53:53\"]\n[[allow]]\nnames = [\"tools.example.test\"]\nports = "
      "[9000]\n"
      "[[allow]]\nnames = [\"web.example.test\"]\nports = [80]\n";
  const policy::Policy from = parsed(from_text);
  auto s = suggest_policy(kLog, with(false, &from, from_text, "e"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_TRUE(s->text.find(from_text) != std::string::npos) << "the original comes first, unchanged";
  const policy::Policy p = parsed(s->text);
  EXPECT_NE(p.admits("web.example.test", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("ntp.example.test", 123, Protocol::udp), nullptr);
  EXPECT_EQ(s->rules, 2u) << s->text;  // web:443, ntp/udp; tools and web:80 were allowed already
  ASSERT_EQ(p.dns().upstreams.size(), 1u);
}

TEST(PolicySuggest, GroupWildcardsOnlyWhenAskedAndNeverUnderATopLevelDomain) {
  const std::string log =
      R"({"kind":"admit","name":"a.cdn.example","dst":"1.1.1.1:443","proto":"tcp"}
{"kind":"admit","name":"b.cdn.example","dst":"1.1.1.2:443","proto":"tcp"}
{"kind":"admit","name":"one.com","dst":"1.1.1.3:443","proto":"tcp"}
{"kind":"admit","name":"two.com","dst":"1.1.1.4:443","proto":"tcp"}
)";
  auto plain = suggest_policy(log, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->rules, 4u);
  EXPECT_EQ(plain->text.find("*."), std::string::npos);
  auto grouped = suggest_policy(log, with(true));
  ASSERT_TRUE(grouped.ok()) << grouped.error();
  EXPECT_EQ(grouped->rules, 3u) << grouped->text;
  const policy::Policy p = parsed(grouped->text);
  EXPECT_NE(p.admits("a.cdn.example", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("c.cdn.example", 443, Protocol::tcp), nullptr);
  EXPECT_EQ(grouped->text.find("\"*.com\""), std::string::npos);
}

// What the log says is untrusted: nothing of it but validated names and
// numbers reaches the rules.
TEST(PolicySuggest, NastyLinesAreSkippedAndNeverReachTheOutput) {
  std::string log;
  log += "not json\n";
  log += "[1,2,3]\n";
  log += R"({"kind":"admit"})"
         "\n";
  log += R"({"kind":"admit","name":"x.example\"]\nports = [1-65535]\n#","dst":"1.1.1.1:443","proto":"tcp"})"
         "\n";
  log += R"({"kind":"admit","name":"*.example.com","dst":"1.1.1.1:443","proto":"tcp"})"
         "\n";
  log += R"({"kind":"admit","name":"ok.example","dst":"1.1.1.1:0","proto":"tcp"})"
         "\n";
  log += R"({"kind":"admit","name":"ok.example","dst":"1.1.1.1:65536","proto":"tcp"})"
         "\n";
  log += R"({"kind":"admit","name":"ok.example","dst":"1.1.1.1:443","proto":"sctp"})"
         "\n";
  log += R"({"kind":"admit","name":42,"dst":"1.1.1.1:443","proto":"tcp"})"
         "\n";
  log += R"({"kind":"admit","name":"ok.example","dst":"1.1.1.1:443","proto":"tcp","time":"\u0000\n# evil"})"
         "\n";
  log += "{\"kind\":\"admit\",\"name\":\"" + std::string(kMaxEventLine, 'a') + "\"}\n";
  auto s = suggest_policy(log, {});
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->rules, 1u) << s->text;
  EXPECT_EQ(s->lines_read, 11u);
  EXPECT_EQ(s->lines_skipped, 9u);
  const policy::Policy p = parsed(s->text);
  EXPECT_NE(p.admits("ok.example", 443, Protocol::tcp), nullptr);
  EXPECT_EQ(p.rules().size(), 1u);
  EXPECT_EQ(s->text.find("evil"), std::string::npos) << s->text;
  EXPECT_FALSE(suggest_policy("garbage\n{}\n", {}).ok()) << "nothing to allow";
}

// A real event log: the lines of two flows and the reserved refusal, verbatim
// from an e2e.audit run (tests/e2e/audit_e2e.py, abox-net run --audit, curl
// in the guest namespace to nginx), with each flow's close event and its
// bytes. Below it, close events the real format allows but a hostile or
// broken log could hold.
constexpr std::string_view kRealLog =
    R"({"time":"2026-12-02T19:57:58.331Z","instance":"guest","kind":"would_deny","reason":"port not allowed for the names this destination was answered for","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp","audit":true}
{"time":"2026-12-02T19:57:58.331Z","instance":"guest","kind":"admit","reason":"audit mode: would be denied","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp"}
{"time":"2026-12-02T19:57:58.332Z","instance":"guest","kind":"close","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp","bytes_out":90,"bytes_in":250}
{"time":"2026-12-02T19:57:58.342Z","instance":"guest","kind":"would_deny","reason":"port not allowed for the names this destination was answered for","name":"other.example.test","dst":"93.184.215.14:80","proto":"tcp","audit":true}
{"time":"2026-12-02T19:57:58.342Z","instance":"guest","kind":"admit","reason":"audit mode: would be denied","name":"other.example.test","dst":"93.184.215.14:80","proto":"tcp"}
{"time":"2026-12-02T19:57:58.343Z","instance":"guest","kind":"close","name":"other.example.test","dst":"93.184.215.14:80","proto":"tcp","bytes_out":92,"bytes_in":250}
{"time":"2026-12-02T19:57:58.394Z","instance":"guest","kind":"deny","reason":"destination in a reserved range","dst":"169.254.169.254:80","proto":"tcp"})";

TEST(PolicySuggest, CloseEventsCountEachRulesBytesOutAndIn) {
  auto s = suggest_policy(std::string(kRealLog) + "\n", with(false, nullptr, {}, "audit-events.jsonl"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_NE(
      s->text.find("# 1 flow (1 would_deny), 90 bytes out and 250 in, first seen 2026-12-02T19:57:58.331Z\n"
                   "[[allow]]\nnames = [\"web.example.test\"]"),
      std::string::npos)
      << s->text;
  EXPECT_NE(s->text.find("# 1 flow (1 would_deny), 92 bytes out and 250 in, first seen"), std::string::npos)
      << s->text;
  parsed(s->text);
}

TEST(PolicySuggest, BytesAddUpAcrossFlowsAndSaySoWhenSomeNeverClosed) {
  std::string log(kRealLog);
  log += "\n";
  // A second web flow that closed, and a third still open when the log ends.
  for (int i = 0; i < 2; ++i)
    log +=
        R"({"time":"2026-12-02T19:58:00.000Z","instance":"guest","kind":"admit","reason":"answered name","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp"})"
        "\n";
  log +=
      R"({"time":"2026-12-02T19:58:01.000Z","instance":"guest","kind":"close","name":"web.example.test","dst":"93.184.215.14:80","proto":"tcp","bytes_out":10,"bytes_in":1000})"
      "\n";
  auto s = suggest_policy(log, with(false));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_NE(s->text.find("# 3 flows (1 would_deny), 100 bytes out and 1250 in (of the 2 that closed)"),
            std::string::npos)
      << s->text;
}

TEST(PolicySuggest, NastyCloseEventsAddNothingAndNeverWrap) {
  const std::string admit =
      R"({"kind":"admit","name":"a.example.test","dst":"1.2.3.4:443","proto":"tcp","time":"2026-12-02T10:00:00Z"})"
      "\n";
  std::string log = admit;
  for (
      std::string_view line : {
          // bytes of the wrong type, negative, or a float: 0
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":"999","bytes_in":-5})",
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":1.5e3})",
          // another port, another protocol, another name, no name, a bad name: not this rule's
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:80","proto":"tcp","bytes_out":7})",
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:443","proto":"udp","bytes_out":7})",
          R"({"kind":"close","name":"b.example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":7})",
          R"({"kind":"close","name":"","dst":"1.2.3.4:443","proto":"tcp","bytes_out":7})",
          R"({"kind":"close","name":"a..example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":7})",
          // two huge counts: saturate instead of wrapping to a small number
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":18446744073709551615,"bytes_in":1})",
          R"({"kind":"close","name":"a.example.test","dst":"1.2.3.4:443","proto":"tcp","bytes_out":18446744073709551615,"bytes_in":1})",
      })
    log += std::string(line) + "\n";
  auto s = suggest_policy(log, with(false));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_NE(s->text.find("# 1 flow, 18446744073709551615 bytes out and 2 in, first seen"), std::string::npos)
      << s->text;
  EXPECT_EQ(s->text.find("b.example.test"), std::string::npos) << "a close event alone makes no rule";
  EXPECT_EQ(s->flows, 1u);
}

TEST(PolicySuggest, CloseEventsOfFlowsTheFromPolicyAllowsAreNotCounted) {
  const std::string from_text = "[[allow]]\nnames = [\"web.example.test\"]\nports = [80]\n";
  const policy::Policy from = parsed(from_text);
  auto s = suggest_policy(std::string(kRealLog) + "\n", with(false, &from, from_text, "e"));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->flows, 1u) << s->text;
  EXPECT_NE(s->text.find("92 bytes out and 250 in"), std::string::npos) << s->text;
  EXPECT_EQ(s->text.find("90 bytes out"), std::string::npos) << s->text;
}

}  // namespace
}  // namespace abox::engine
