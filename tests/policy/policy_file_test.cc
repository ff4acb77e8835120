#include "policy/policy_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace abox::policy {
namespace {

Policy parse_ok(std::string_view text) {
  auto r = parse_policy(text, "test.toml");
  if (!r.ok()) ADD_FAILURE() << r.error().to_string();
  return std::move(r).value();
}

// The first diagnostic, as "line:column: message".
std::string first_error(std::string_view text) {
  auto r = parse_policy(text, "test.toml");
  if (r.ok()) return "(valid)";
  const auto& d = r.error().diagnostics.front();
  return std::to_string(d.line) + ":" + std::to_string(d.column) + ": " + d.message;
}

constexpr std::string_view kRule = "[[allow]]\nnames = [\"example.com\"]\nports = [443]\n";

TEST(PolicyFile, MinimalDefaults) {
  Policy p = parse_ok(kRule);
  ASSERT_EQ(p.rules().size(), 1u);
  EXPECT_TRUE(p.dns().use_system);
  EXPECT_EQ(p.dns().min_ttl, 5u);
  EXPECT_EQ(p.dns().max_ttl, 3600u);
  EXPECT_EQ(p.dns().grace, 60u);
  EXPECT_EQ(p.limits().flows, 4096u);
  EXPECT_TRUE(p.rules()[0].tcp);
  EXPECT_FALSE(p.rules()[0].udp);
  EXPECT_EQ(p.rules()[0].where.line, 1u);
  EXPECT_EQ(p.source(), "test.toml");
}

// Non-ASCII text is fine in comments (and after a UTF-8 byte order mark):
// only outside strings and comments is it refused (see bad cases).
TEST(PolicyFile, BudgetsArePerRuleWithAWindow) {
  Policy p = parse_ok(std::string(kRule) + "max_bytes_out = 1048576\nmax_flows = 10\nper = \"10m\"\n" +
                      "[[allow]]\nnames = [\"b.example.com\"]\nports = [443]\nmax_flows = 3\n");
  ASSERT_TRUE(p.rules()[0].budget.has_value());
  EXPECT_EQ(p.rules()[0].budget->max_bytes_out, 1048576u);
  EXPECT_EQ(p.rules()[0].budget->max_flows, 10u);
  EXPECT_EQ(p.rules()[0].budget->per_s, 600u);
  ASSERT_TRUE(p.rules()[1].budget.has_value());
  EXPECT_FALSE(p.rules()[1].budget->max_bytes_out.has_value());
  EXPECT_EQ(p.rules()[1].budget->per_s, 3600u) << "an hour unless said";
  EXPECT_FALSE(parse_ok(kRule).rules()[0].budget.has_value());
  EXPECT_EQ(first_error(std::string(kRule) + "per = \"1h\"\n"),
            "1:1: [[allow]]: per needs max_bytes_out or max_flows (the budget it is the window of)");
  EXPECT_EQ(first_error(std::string(kRule) + "max_flows = 1\nper = \"1w\"\n"),
            "5:7: per: expected a duration such as \"30s\", \"10m\", \"1h\" or \"1d\" (1 s to 30 days), "
            "found \"1w\"");
  EXPECT_EQ(first_error(std::string(kRule) + "max_bytes_out = 0\n"),
            "4:17: max_bytes_out: expected an integer from 1 to 1125899906842624, found 0");
}

TEST(PolicyFile, AuditModeIsOffUnlessSaidAndThenWarned) {
  Policy off = parse_ok(kRule);
  EXPECT_FALSE(off.mode().audit);
  EXPECT_TRUE(policy_warnings(off).empty());
  Policy on = parse_ok("[mode]\naudit = true\n" + std::string(kRule));
  EXPECT_TRUE(on.mode().audit);
  EXPECT_EQ(on.mode().where.line, 1u);
  const auto warnings = policy_warnings(on);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].message.find("audit"), std::string::npos) << warnings[0].message;
  EXPECT_FALSE(parse_ok("[mode]\naudit = false\n" + std::string(kRule)).mode().audit);
}

TEST(PolicyFile, NonAsciiCommentsAndByteOrderMark) {
  Policy p = parse_ok(std::string("\xEF\xBB\xBF# R\xc3\xa8gles \xe2\x80\x94 l'\xc3\xa9quipe\n") +
                      std::string(kRule) + "# fin \xe2\x9c\x93\n");
  EXPECT_EQ(p.rules().size(), 1u);
}

TEST(PolicyFile, FullShape) {
  Policy p = parse_ok(R"(
version = 1
[dns]
upstreams = ["127.0.0.53:53", "[2001:db8::53]", "192.0.2.1"]
min_ttl = 1
max_ttl = 600
grace = 30
denied = "nxdomain"
timeout_ms = 500
attempts = 3

[[allow]]
names = ["github.com", "*.github.com"]
ports = [22, 443]

[[allow]]
names = ["ntp.example.org"]
ports = [123]
protocols = ["udp"]

[[allow]]
names = ["db.example.org"]
ports = ["5432-5433"]
verify_name = false

[[broker]]
name = "API.Anthropic.com."
credential = "anthropic"
header = "X-Api-Key"
nonce_env = "ANTHROPIC_API_KEY"
methods = ["GET", "POST"]
paths = ["/v1/"]

[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
backoff = false

[limits]
flows = 100
half_open = 10
flow_buffer_bytes = 65536
dns_in_flight = 32
answer_entries = 1000

[timeouts]
connect_ms = 3000
udp_idle_s = 30
tls_handshake_ms = 4000
http_head_ms = 5000
http_body_ms = 120000

[unsafe]
allow_reserved = ["127.0.0.0/8"]
)");
  EXPECT_FALSE(p.dns().use_system);
  ASSERT_EQ(p.dns().upstreams.size(), 3u);
  EXPECT_EQ(p.dns().upstreams[0].port, 53);
  EXPECT_EQ(p.dns().upstreams[1].to_string(), "[2001:db8::53]:53");
  EXPECT_EQ(p.dns().denied, DeniedAnswer::nxdomain);
  EXPECT_EQ(p.dns().attempts, 3u);
  ASSERT_EQ(p.rules().size(), 3u);
  EXPECT_TRUE(p.rules()[1].udp);
  EXPECT_FALSE(p.rules()[1].tcp);
  EXPECT_EQ(p.rules()[2].ports[0].first, 5432);
  EXPECT_EQ(p.rules()[2].ports[0].last, 5433);
  ASSERT_EQ(p.brokers().size(), 2u);
  EXPECT_EQ(p.brokers()[0].name, "api.anthropic.com");
  EXPECT_EQ(p.brokers()[0].header, "x-api-key");
  EXPECT_EQ(p.brokers()[0].port, 443);
  EXPECT_TRUE(p.brokers()[0].backoff) << "on unless the binding turns it off";
  EXPECT_FALSE(p.brokers()[1].backoff);
  EXPECT_EQ(p.limits().half_open, 10u);
  EXPECT_EQ(p.timeouts().connect_ms, 3000u);
  EXPECT_EQ(p.timeouts().udp_idle_s, 30u);
  EXPECT_EQ(p.timeouts().tls_handshake_ms, 4000u);
  EXPECT_EQ(p.timeouts().http_head_ms, 5000u);
  EXPECT_EQ(p.timeouts().http_body_ms, 120000u);
  ASSERT_EQ(p.unsafe().allow_reserved.size(), 1u);
}

TEST(PolicyFile, Admission) {
  Policy p = parse_ok(R"(
[[allow]]
names = ["github.com", "*.github.com"]
ports = [22, 443]
[[allow]]
names = ["api.github.com"]
ports = [8443]
verify_name = true
[[allow]]
names = ["ntp.example.org"]
ports = [123]
protocols = ["udp"]
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
)");
  EXPECT_TRUE(p.allows_name("github.com"));
  EXPECT_TRUE(p.allows_name("api.github.com"));
  EXPECT_TRUE(p.allows_name("api.anthropic.com"));
  EXPECT_FALSE(p.allows_name("evilgithub.com"));
  EXPECT_FALSE(p.allows_name("anthropic.com"));

  const AllowRule* r = p.admits("api.github.com", 443, Protocol::tcp);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->index, 0u);
  EXPECT_TRUE(r->requires_name(443));
  EXPECT_FALSE(r->requires_name(22));
  r = p.admits("api.github.com", 8443, Protocol::tcp);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->index, 1u);
  EXPECT_TRUE(r->requires_name(8443));
  EXPECT_EQ(p.admits("www.github.com", 8443, Protocol::tcp), nullptr);
  EXPECT_EQ(p.admits("github.com", 443, Protocol::udp), nullptr);
  EXPECT_NE(p.admits("ntp.example.org", 123, Protocol::udp), nullptr);
  EXPECT_EQ(p.admits("ntp.example.org", 123, Protocol::tcp), nullptr);

  EXPECT_EQ(p.admits("api.anthropic.com", 443, Protocol::tcp), nullptr);
  ASSERT_NE(p.broker_for("api.anthropic.com", 443), nullptr);
  EXPECT_EQ(p.broker_for("api.anthropic.com", 80), nullptr);
  EXPECT_EQ(p.broker_for("github.com", 443), nullptr);
}

// icmp (echo) is never a default, has no ports, and a rule may give it
// alone (no ports) or beside tcp/udp (the ports are theirs).
TEST(PolicyFile, IcmpIsAnOptInWithoutPorts) {
  Policy p = parse_ok(R"(
[[allow]]
names = ["github.com"]
ports = [443]
[[allow]]
names = ["ping.example"]
protocols = ["icmp"]
[[allow]]
names = ["*.example.org"]
ports = [123]
protocols = ["udp", "icmp"]
[timeouts]
icmp_idle_s = 10
)");
  EXPECT_EQ(p.timeouts().icmp_idle_s, 10u);
  EXPECT_FALSE(p.rules()[0].icmp);
  EXPECT_EQ(p.admits("github.com", 0, Protocol::icmp), nullptr);
  const AllowRule* r = p.admits("ping.example", 0, Protocol::icmp);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->ports.empty());
  EXPECT_FALSE(r->tcp);
  // Ports are not looked at for icmp.
  EXPECT_EQ(p.admits("ping.example", 443, Protocol::icmp), r);
  EXPECT_EQ(p.admits("ping.example", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("ntp.example.org", 0, Protocol::icmp), nullptr);
  EXPECT_NE(p.admits("ntp.example.org", 123, Protocol::udp), nullptr);
  EXPECT_EQ(p.admits("ntp.example.org", 123, Protocol::tcp), nullptr);
  EXPECT_EQ(to_string(Protocol::icmp), "icmp");
  EXPECT_EQ(parse_ok("[[allow]]\nnames = [\"a.com\"]\nports = [443]\n").timeouts().icmp_idle_s, 30u);
}

TEST(PolicyFile, ReservedAndUnsafe) {
  Policy strict = parse_ok(kRule);
  EXPECT_TRUE(strict.is_reserved(*IpAddress::parse("127.0.0.1")));
  EXPECT_TRUE(strict.is_reserved(*IpAddress::parse("169.254.169.254")));
  EXPECT_FALSE(strict.is_reserved(*IpAddress::parse("93.184.215.14")));

  Policy rig = parse_ok(std::string(kRule) + "[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n");
  auto v = rig.check_address(*IpAddress::parse("127.0.0.1"));
  ASSERT_NE(v.reserved, nullptr);
  ASSERT_NE(v.lifted_by, nullptr);
  EXPECT_FALSE(v.refused());
  EXPECT_TRUE(rig.is_reserved(*IpAddress::parse("10.0.0.1")));
  auto warnings = policy_warnings(rig);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].message.find("127.0.0.0/8"), std::string::npos);
}

TEST(PolicyFile, ReportsEveryProblem) {
  auto r = parse_policy(R"(
[[allow]]
names = ["a..b"]
ports = [0]
colour = "red"
)",
                        "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().diagnostics.size(), 3u) << r.error().to_string();
  EXPECT_EQ(r.error().diagnostics[0].file, "test.toml");
}

// Each bad input and the message it must produce, at its line and column.
struct BadCase {
  const char* label;
  std::string text;
  std::string expected;  // "line:column: message" prefix
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.label;
}

class BadPolicy : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadPolicy, NamesLineColumnAndExpectation) {
  const auto& c = GetParam();
  std::string got = first_error(c.text);
  EXPECT_TRUE(got.starts_with(c.expected)) << "got:      " << got << "\nexpected: " << c.expected;
}

std::string rule_with(std::string_view extra) {
  return "[[allow]]\nnames = [\"example.com\"]\nports = [443]\n" + std::string(extra);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadPolicy,
    ::testing::Values(
        BadCase{"syntax", "[[allow]\n", "1:9: TOML syntax: Error while parsing table header: expected ']'"},
        BadCase{"unterminated_string", "[[allow]]\nnames = [\"a.com]\n", "2:"},
        BadCase{"duplicate_key_toml", rule_with("ports = [80]\n"), "4:9: TOML syntax:"},
        // A problem of the file as a whole: no line or column (0:0 here).
        BadCase{"empty_file", "", "0:0: the policy allows nothing"},
        BadCase{"unknown_top_key", rule_with("colour = 1\n"),
                "4:1: unknown key 'colour' in [[allow]] (expected one of: max_bytes_out, max_flows, names, "
                "per, ports, "
                "protocols, verify_name)"},
        BadCase{"unknown_section", "[dnss]\nmin_ttl = 1\n" + rule_with(""),
                "1:2: unknown key 'dnss' in the policy file (expected one of: allow, broker, dns, limits, "
                "mode, timeouts, "
                "unsafe, version)"},
        BadCase{"audit_not_bool", "[mode]\naudit = \"yes\"\n" + rule_with(""),
                "2:9: audit: expected true or false, found a string"},
        BadCase{"unknown_mode_key", "[mode]\naudti = true\n" + rule_with(""),
                "2:1: unknown key 'audti' in [mode] (expected one of: audit)"},
        BadCase{"typo_in_dns", "[dns]\nmax_tll = 5\n" + rule_with(""), "2:1: unknown key 'max_tll' in [dns]"},
        BadCase{"version_2", "version = 2\n" + rule_with(""),
                "1:11: version: expected an integer from 1 to 1"},
        BadCase{"allow_not_array", "allow = 3\n", "1:9: allow: expected [[allow]] tables, found an integer"},
        BadCase{"names_missing", "[[allow]]\nports = [443]\n", "1:1: [[allow]]: missing key 'names'"},
        BadCase{"ports_missing", "[[allow]]\nnames = [\"a.com\"]\n", "1:1: [[allow]]: missing key 'ports'"},
        BadCase{"names_not_array", "[[allow]]\nnames = \"a.com\"\nports = [443]\n",
                "2:9: names: expected an array, found a string"},
        BadCase{"names_empty", "[[allow]]\nnames = []\nports = [443]\n",
                "2:9: names: expected at least one element, found an empty array"},
        BadCase{"name_not_string", "[[allow]]\nnames = [5]\nports = [443]\n",
                "2:10: name: expected a string, found an integer"},
        BadCase{"empty_label", "[[allow]]\nnames = [\"a..com\"]\nports = [443]\n", "2:10: name \"a..com\": "},
        BadCase{"long_label", "[[allow]]\nnames = [\"" + std::string(64, 'a') + ".com\"]\nports = [443]\n",
                "2:10: name \"" + std::string(64, 'a') + ".com\": "},
        BadCase{"long_name",
                "[[allow]]\nnames = [\"" + std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                    std::string(63, 'c') + "." + std::string(63, 'd') + ".com\"]\nports = [443]\n",
                "2:10: name \""},
        BadCase{"u_label",
                "[[allow]]\nnames = [\"b\xc3\xbc"
                "cher.de\"]\nports = [443]\n",
                "2:10: name \"b\xc3\xbc"
                "cher.de\": "},
        BadCase{"non_ascii_first", "\xc8\x8d[[allow]]\nnames = [\"a.com\"]\nports = [443]\n",
                "1:1: a non-ASCII character outside a string or comment"},
        BadCase{"non_ascii_after_value", "[[allow]]\nnames = [\"a.com\"]\xc2\xa5\nports = [443]\n",
                "2:18: a non-ASCII character outside a string or comment"},
        BadCase{"non_ascii_after_strings_and_comments",
                "# \xc3\xa9t\xc3\xa9 \"\n[[allow]] # '\xc3\xa9'\nnames = [\"a.com\", 'b.com', "
                "\"\"\"c\\\"d\"\"\"]\n"
                "x = \"\\\"\"\xc2\xa0= 1\n",
                "4:9: a non-ASCII character outside a string or comment"},
        BadCase{"bad_char", "[[allow]]\nnames = [\"exa mple.com\"]\nports = [443]\n",
                "2:10: name \"exa mple.com\": "},
        BadCase{"mid_wildcard", "[[allow]]\nnames = [\"a.*.com\"]\nports = [443]\n",
                "2:10: name \"a.*.com\": "},
        BadCase{"bare_wildcard", "[[allow]]\nnames = [\"*\"]\nports = [443]\n", "2:10: name \"*\": "},
        BadCase{"dup_name_in_rule", "[[allow]]\nnames = [\"a.com\", \"A.com.\"]\nports = [443]\n",
                "2:19: name \"a.com\" is listed twice in this rule"},
        BadCase{"port_zero", "[[allow]]\nnames = [\"a.com\"]\nports = [0]\n",
                "3:10: port: expected an integer from 1 to 65535, found 0"},
        BadCase{"port_big", "[[allow]]\nnames = [\"a.com\"]\nports = [70000]\n",
                "3:10: port: expected an integer from 1 to 65535, found 70000"},
        BadCase{"port_float", "[[allow]]\nnames = [\"a.com\"]\nports = [44.3]\n",
                "3:10: port: expected an integer or a \"first-last\" string, found a float"},
        BadCase{"port_range_backwards", "[[allow]]\nnames = [\"a.com\"]\nports = [\"9-5\"]\n",
                "3:10: port range: expected \"first-last\" with 1 <= first <= last <= 65535, found \"9-5\""},
        BadCase{"port_range_garbage", "[[allow]]\nnames = [\"a.com\"]\nports = [\"https\"]\n",
                "3:10: port range: expected \"first-last\""},
        BadCase{
            "ip_literal_name", "[[allow]]\nnames = [\"140.82.112.3\"]\nports = [443]\n",
            "2:10: name \"140.82.112.3\": an IP address is not a name: the DNS gate never answers it, so it "
            "would match nothing. Addresses are admitted only through the DNS gate's answers"},
        BadCase{"ipv6_literal_name", "[[allow]]\nnames = [\"2001:db8::1\"]\nports = [443]\n",
                "2:10: name \"2001:db8::1\": an IP address is not a name"},
        BadCase{"bracketed_address_and_port", "[[allow]]\nnames = [\"[2001:db8::1]:443\"]\nports = [443]\n",
                "2:10: name \"[2001:db8::1]:443\": an IP address is not a name"},
        BadCase{"address_and_port", "[[allow]]\nnames = [\"140.82.112.3:443\"]\nports = [443]\n",
                "2:10: name \"140.82.112.3:443\": an IP address is not a name"},
        BadCase{"url_name", "[[allow]]\nnames = [\"https://github.com\"]\nports = [443]\n",
                "2:10: name \"https://github.com\": names hold host names, not URLs: write \"github.com\""},
        BadCase{"url_with_port_and_path",
                "[[allow]]\nnames = [\"http://user@github.com:8080/x?y\"]\nports = [443]\n",
                "2:10: name \"http://user@github.com:8080/x?y\": names hold host names, not URLs: write "
                "\"github.com\" and put 8080 in ports"},
        BadCase{"url_of_an_address", "[[allow]]\nnames = [\"https://1.1.1.1/\"]\nports = [443]\n",
                "2:10: name \"https://1.1.1.1/\": an IP address is not a name"},
        BadCase{
            "host_and_port", "[[allow]]\nnames = [\"github.com:443\"]\nports = [443]\n",
            "2:10: name \"github.com:443\": names hold host names without a port: write \"github.com\" and "
            "put 443 in ports"},
        BadCase{"wildcard_and_port", "[[allow]]\nnames = [\"*.github.com:443\"]\nports = [443]\n",
                "2:10: name \"*.github.com:443\": names hold host names without a port: write "
                "\"*.github.com\""},
        BadCase{"name_with_path", "[[allow]]\nnames = [\"github.com/org\"]\nports = [443]\n",
                "2:10: name \"github.com/org\": names hold host names, not paths: write \"github.com\""},
        BadCase{"broker_ip_literal",
                "[[broker]]\nname = \"192.0.2.7\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
                "\"K\"\n",
                "2:8: name \"192.0.2.7\": an IP address is not a name"},
        BadCase{
            "quoted_port", "[[allow]]\nnames = [\"a.com\"]\nports = [\"8443\"]\n",
            "3:10: port \"8443\": write 8443 as an integer (ports = [8443]); a string is only for a range"},
        BadCase{
            "port_with_protocol", "[[allow]]\nnames = [\"a.com\"]\nports = [\"53/udp\"]\n",
            "3:10: port \"53/udp\": write the port as an integer and the protocol in protocols = [\"udp\"]"},
        BadCase{"quoted_integer_setting", "[limits]\nflows = \"100\"\n" + rule_with(""),
                "2:9: flows: write 100 as an integer, without quotes"},
        BadCase{"broker_quoted_port",
                "[[broker]]\nname = \"a.example.com\"\nport = \"8443\"\ncredential = \"k\"\nheader = "
                "\"x-api-key\"\nnonce_env = \"K\"\n",
                "3:8: port: write 8443 as an integer, without quotes"},
        BadCase{"port_overlap", "[[allow]]\nnames = [\"a.com\"]\nports = [443, \"400-500\"]\n",
                "3:15: port 400-500 overlaps port 443 already listed in this rule"},
        BadCase{"protocol_unknown", rule_with("protocols = [\"sctp\"]\n"),
                "4:14: protocol: expected \"tcp\", \"udp\" or \"icmp\", found \"sctp\""},
        BadCase{"icmp_twice", "[[allow]]\nnames = [\"a.com\"]\nprotocols = [\"icmp\", \"icmp\"]\n",
                "3:22: protocol \"icmp\" is listed twice"},
        BadCase{"icmp_only_with_ports", rule_with("protocols = [\"icmp\"]\n"),
                "1:1: [[allow]]: ports apply to tcp and udp, and this rule allows only icmp"},
        BadCase{"icmp_granted_twice",
                "[[allow]]\nnames = [\"a.com\"]\nprotocols = [\"icmp\"]\n[[allow]]\nnames = [\"a.com\", "
                "\"b.com\"]\nports = [443]\nprotocols = [\"tcp\", \"icmp\"]\n",
                "4:1: [[allow]]: \"a.com\" icmp is already allowed by the rule at test.toml:1:1"},
        BadCase{"icmp_verify_name",
                "[[allow]]\nnames = [\"a.com\"]\nprotocols = [\"icmp\"]\nverify_name = true\n",
                "1:1: [[allow]]: verify_name = true needs tcp"},
        BadCase{"icmp_idle_zero", "[timeouts]\nicmp_idle_s = 0\n" + rule_with(""),
                "2:15: icmp_idle_s: expected an integer from 1 to 3600, found 0"},
        BadCase{"protocol_twice", rule_with("protocols = [\"tcp\", \"tcp\"]\n"),
                "4:21: protocol \"tcp\" is listed twice"},
        BadCase{"verify_name_not_bool", rule_with("verify_name = \"yes\"\n"),
                "4:15: verify_name: expected true or false, found a string"},
        BadCase{"verify_name_udp", rule_with("protocols = [\"udp\"]\nverify_name = true\n"),
                "1:1: [[allow]]: verify_name = true needs tcp"},
        BadCase{"duplicate_grant", rule_with("[[allow]]\nnames = [\"example.com\"]\nports = [\"400-500\"]\n"),
                "4:1: [[allow]]: \"example.com\" on port 400-500 is already allowed by the rule at "
                "test.toml:1:1"},
        BadCase{"min_over_max", "[dns]\nmin_ttl = 100\nmax_ttl = 50\n" + rule_with(""),
                "1:1: [dns]: min_ttl (100) is greater than max_ttl (50)"},
        BadCase{"ttl_negative", "[dns]\nmin_ttl = -1\n" + rule_with(""),
                "2:11: min_ttl: expected an integer from 0 to 86400, found -1"},
        BadCase{"upstream_garbage", "[dns]\nupstreams = [\"dns.google\"]\n" + rule_with(""),
                "2:14: upstream \"dns.google\": expected \"system\" or an address"},
        BadCase{"upstream_mixed", "[dns]\nupstreams = [\"system\", \"192.0.2.1\"]\n" + rule_with(""),
                "2:13: upstreams: \"system\" cannot be mixed with addresses"},
        BadCase{"upstream_twice", "[dns]\nupstreams = [\"192.0.2.1\", \"192.0.2.1:53\"]\n" + rule_with(""),
                "2:27: upstream \"192.0.2.1:53\" is listed twice"},
        BadCase{"denied_unknown", "[dns]\ndenied = \"drop\"\n" + rule_with(""),
                "2:10: denied: expected \"refused\" or \"nxdomain\", found \"drop\""},
        BadCase{"dns_not_table", "dns = 5\n" + rule_with(""),
                "1:7: [dns]: expected a table, found an integer"},
        BadCase{"half_open_over_flows", "[limits]\nflows = 10\nhalf_open = 20\n" + rule_with(""),
                "1:1: [limits]: half_open (20) is greater than flows (10)"},
        BadCase{"limit_zero", "[limits]\nflows = 0\n" + rule_with(""),
                "2:9: flows: expected an integer from 1 to 1000000, found 0"},
        BadCase{"timeout_tiny", "[timeouts]\nconnect_ms = 1\n" + rule_with(""),
                "2:14: connect_ms: expected an integer from 100 to 120000, found 1"},
        BadCase{"head_deadline_zero", "[timeouts]\nhttp_head_ms = 0\n" + rule_with(""),
                "2:16: http_head_ms: expected an integer from 100 to 600000, found 0"},
        BadCase{"body_deadline_huge", "[timeouts]\nhttp_body_ms = 3600001\n" + rule_with(""),
                "2:16: http_body_ms: expected an integer from 100 to 3600000, found 3600001"},
        BadCase{"handshake_deadline_tiny", "[timeouts]\ntls_handshake_ms = 99\n" + rule_with(""),
                "2:20: tls_handshake_ms: expected an integer from 100 to 120000, found 99"},
        BadCase{"unsafe_public", rule_with("[unsafe]\nallow_reserved = [\"8.8.8.0/24\"]\n"),
                "5:19: allow_reserved \"8.8.8.0/24\": expected a range inside one reserved range (it is not "
                "reserved at all)"},
        BadCase{"unsafe_everything", rule_with("[unsafe]\nallow_reserved = [\"0.0.0.0/0\"]\n"),
                "5:19: allow_reserved \"0.0.0.0/0\": expected a range inside one reserved range"},
        BadCase{"unsafe_metadata", rule_with("[unsafe]\nallow_reserved = [\"169.254.0.0/16\"]\n"),
                "5:19: allow_reserved \"169.254.0.0/16\": it would open 169.254.169.254/32"},
        BadCase{"unsafe_host_bits", rule_with("[unsafe]\nallow_reserved = [\"127.0.0.1/8\"]\n"),
                "5:19: allow_reserved \"127.0.0.1/8\": expected a range such as"},
        BadCase{"broker_missing_keys", "[[broker]]\nname = \"api.example.com\"\n",
                "1:1: [[broker]]: missing key 'credential'"},
        BadCase{
            "broker_wildcard",
            "[[broker]]\nname = \"*.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\n",
            "2:8: name \"*.example.com\": a broker binding names one exact host, not a wildcard"},
        BadCase{"broker_framing_header",
                "[[broker]]\nname = \"api.example.com\"\ncredential = \"k\"\nheader = \"Host\"\nnonce_env = "
                "\"K\"\n",
                "4:10: header \"Host\": the key cannot go into a header that frames or routes the request"},
        BadCase{
            "broker_bad_env",
            "[[broker]]\nname = \"api.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"1KEY\"\n",
            "5:13: nonce_env \"1KEY\": expected an environment variable name"},
        BadCase{
            "broker_connect",
            "[[broker]]\nname = \"api.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\nmethods = [\"CONNECT\"]\n",
            "6:12: method \"CONNECT\": expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"},
        BadCase{
            "broker_backoff_not_a_boolean",
            "[[broker]]\nname = \"api.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\nbackoff = \"off\"\n",
            "6:11: backoff: expected true or false, found a string"},
        BadCase{
            "broker_bad_path",
            "[[broker]]\nname = \"api.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\npaths = [\"/v1/../admin\"]\n",
            "6:10: path \"/v1/../admin\": expected a path prefix starting with '/'"},
        BadCase{
            "broker_and_allow",
            rule_with(
                "[[broker]]\nname = \"example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
                "\"K\"\n"),
            "4:1: [[broker]]: \"example.com\" port 443 is also allowed directly by the rule at "
            "test.toml:1:1"},
        BadCase{
            "broker_twice",
            "[[broker]]\nname = \"a.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\n[[broker]]\nname = \"a.example.com\"\ncredential = \"k2\"\nheader = "
            "\"x-api-key\"\nnonce_env = "
            "\"K2\"\n",
            "6:1: [[broker]]: \"a.example.com\" port 443 already has a binding at test.toml:1:1"},
        BadCase{
            "broker_same_env",
            "[[broker]]\nname = \"a.example.com\"\ncredential = \"k\"\nheader = \"x-api-key\"\nnonce_env = "
            "\"K\"\n[[broker]]\nname = \"b.example.com\"\ncredential = \"k2\"\nheader = "
            "\"x-api-key\"\nnonce_env = "
            "\"K\"\n",
            "6:1: [[broker]]: nonce_env \"K\" is already used by the binding at test.toml:1:1"}),
    [](const ::testing::TestParamInfo<BadCase>& p) { return std::string(p.param.label); });

TEST(PolicyFile, ThirtyOrMoreBadShapes) {
  // The issue asks for at least 30 distinct bad inputs; keep it that way.
  std::size_t n = 0;
  for (auto it = ::testing::UnitTest::GetInstance(); it != nullptr; it = nullptr) {
    for (int i = 0; i < it->total_test_suite_count(); ++i) {
      const auto* suite = it->GetTestSuite(i);
      if (std::string(suite->name()) == "Cases/BadPolicy")
        n = static_cast<std::size_t>(suite->total_test_count());
    }
  }
  EXPECT_GE(n, 30u);
}

TEST(PolicyFile, LoadReportsUnreadableFile) {
  auto r = load_policy("/nonexistent/abox/policy.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().unreadable);
  EXPECT_TRUE(r.error().diagnostics[0].file_level());
  EXPECT_EQ(r.error().diagnostics[0].line, 0u);
  // The errno, in words.
  EXPECT_EQ(r.error().to_string(),
            "/nonexistent/abox/policy.toml: cannot open the policy file: No such file or directory\n");
}

TEST(PolicyFile, LoadSaysAFolderOrAFifoIsNotAPolicyFile) {
  abox::testing::TempDir dir("abox-policy-test");
  auto folder = load_policy(dir.path());
  ASSERT_FALSE(folder.ok());
  EXPECT_TRUE(folder.error().unreadable);
  EXPECT_EQ(folder.error().to_string(),
            dir.path() + ": cannot read the policy file: it is a folder, not a file\n");
  // A FIFO nobody writes to: refused at once, not waited on.
  const std::string fifo = dir.file("policy.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = load_policy(fifo);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.error().unreadable);
  EXPECT_NE(f.error().to_string().find("it is not a regular file"), std::string::npos)
      << f.error().to_string();
}

TEST(PolicyFile, AnInvalidFileIsNotAnUnreadableOne) {
  abox::testing::TempDir dir("abox-policy-test");
  const std::string path = dir.file("p.toml");
  std::ofstream(path) << "[[allow]]\nnames = [\"a.com\"]\nports = [0]\n";
  auto r = load_policy(path);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().unreadable);
  EXPECT_FALSE(r.error().diagnostics[0].file_level());
}

// docs/policy.md promises every problem in one run: a conflict between two
// rules is reported beside a broken field elsewhere, not after it is fixed.
TEST(PolicyFile, ConflictsBetweenRulesComeWithFieldErrors) {
  auto r = parse_policy(R"([dns]
min_ttl = "5"

[[allow]]
names = ["a.example"]
ports = [443]

[[allow]]
names = ["a.example", "bad..name"]
ports = [443]

[[broker]]
name = "b.example"
credential = "k"
header = "x-api-key"
nonce_env = "K"

[[broker]]
name = "b.example"
credential = "k2"
header = "Host"
nonce_env = "K"
)",
                        "test.toml");
  ASSERT_FALSE(r.ok());
  const std::string all = r.error().to_string();
  EXPECT_NE(all.find("test.toml:2:11: min_ttl: write 5 as an integer"), std::string::npos) << all;
  EXPECT_NE(all.find("test.toml:9:23: name \"bad..name\""), std::string::npos) << all;
  EXPECT_NE(all.find("test.toml:8:1: [[allow]]: \"a.example\" on port 443 is already allowed by the rule at "
                     "test.toml:4:1"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("test.toml:21:10: header \"Host\""), std::string::npos) << all;
  EXPECT_NE(all.find("test.toml:18:1: [[broker]]: \"b.example\" port 443 already has a binding"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("test.toml:18:1: [[broker]]: nonce_env \"K\" is already used"), std::string::npos)
      << all;
  EXPECT_EQ(r.error().total, r.error().diagnostics.size());
}

// Past kMaxPolicyDiagnostics the problems are counted, and the output says
// how many were left out.
TEST(PolicyFile, ACutListSaysItWasCut) {
  std::string text = "[[allow]]\nports = [443]\nnames = [";
  for (int i = 0; i < 60; ++i) text += "\"bad..name" + std::to_string(i) + "\", ";
  text += "\"ok.example\"]\n";
  auto r = parse_policy(text, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().diagnostics.size(), kMaxPolicyDiagnostics);
  EXPECT_EQ(r.error().total, 60u);
  EXPECT_EQ(r.error().omitted(), 10u);
  const std::string all = r.error().to_string();
  EXPECT_TRUE(all.ends_with("test.toml: 10 more problems not listed (only the first 50 are)\n")) << all;
  // Under the cap nothing is said.
  auto few = parse_policy("[[allow]]\nports = [443]\nnames = [\"a..b\"]\n", "test.toml");
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.error().omitted(), 0u);
  EXPECT_EQ(few.error().to_string().find("not listed"), std::string::npos);
}

TEST(PolicyFile, BundledExamplesAreValid) {
  std::filesystem::path dir = std::filesystem::path(ABOX_SOURCE_DIR) / "docs" / "examples";
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    auto r = load_policy(entry.path());
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  }
  EXPECT_GE(count, 2u);
}

TEST(PolicyFile, CodingAgentExampleSaysWhatItShould) {
  auto r = load_policy(std::filesystem::path(ABOX_SOURCE_DIR) / "docs/examples/coding-agent.toml");
  ASSERT_TRUE(r.ok());
  const Policy& p = *r;
  EXPECT_NE(p.admits("api.github.com", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("github.com", 22, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("objects.githubusercontent.com", 443, Protocol::tcp), nullptr);
  EXPECT_NE(p.admits("registry.npmjs.org", 443, Protocol::tcp), nullptr);
  EXPECT_EQ(p.admits("registry.npmjs.org", 22, Protocol::tcp), nullptr);
  EXPECT_NE(p.broker_for("api.anthropic.com", 443), nullptr);
  EXPECT_FALSE(p.allows_name("pastebin.com"));
}

}  // namespace
}  // namespace abox::policy
