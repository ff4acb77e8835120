#include "netstack/stack/admission.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string_view>

#include "policy/policy_file.h"

namespace abox::netstack {
namespace {

using policy::IpAddress;
using policy::Protocol;

class AdmissionTest : public testing::Test {
 protected:
  void SetUp() override {
    auto p = policy::parse_policy(R"(
[dns]
grace = 30
[[allow]]
names = ["github.com", "*.github.com"]
ports = [22, 443]
[[allow]]
names = ["cdn.example.net"]
ports = [443]
[[allow]]
names = ["db.example.net"]
ports = [5432]
[[allow]]
names = ["ntp.example.net"]
ports = [123]
protocols = ["udp"]
[[allow]]
names = ["ping.example.net"]
protocols = ["icmp"]
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
[unsafe]
allow_reserved = ["198.18.0.0/15"]
)",
                                  "admission.toml");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    policy_ = std::make_unique<policy::Policy>(std::move(p).value());
    table_ = std::make_unique<dns::AnswerTable>(*policy_, 1024);
  }
  IpAddress ip(const char* s) { return *IpAddress::parse(s); }
  void answer(const char* addr, const char* name, int ttl_s = 60) {
    table_->record(ip(addr), name, now_ + base::Seconds(ttl_s), now_);
  }
  Admission admit(const char* addr, std::uint16_t port, Protocol p = Protocol::tcp) {
    return admit_flow(*policy_, host_, *table_, ip(addr), port, p, now_);
  }

  std::unique_ptr<policy::Policy> policy_;
  policy::HostAddresses host_;
  std::unique_ptr<dns::AnswerTable> table_;
  base::MonoTime now_ = base::MonoTime{} + std::chrono::hours(1);
};

TEST_F(AdmissionTest, AnsweredAllowedNameIsAdmitted) {
  answer("140.82.112.3", "github.com");
  auto a = admit("140.82.112.3", 443);
  ASSERT_TRUE(a.admitted());
  EXPECT_EQ(a.name, "github.com");
  EXPECT_TRUE(a.needs_name);  // 443 checks SNI/Host by default
  auto ssh = admit("140.82.112.3", 22);
  ASSERT_TRUE(ssh.admitted());
  EXPECT_FALSE(ssh.needs_name);  // SSH carries no name
}

// Echo (Protocol::icmp, port 0): only to an answered address whose name's
// rule allows icmp; a name with tcp ports only is refused with its own
// reason; reserved and unanswered as for any flow.
TEST_F(AdmissionTest, EchoNeedsARuleWithIcmp) {
  answer("93.184.215.80", "ping.example.net");
  answer("140.82.112.3", "github.com");
  answer("2606:4700::80", "ping.example.net");
  auto yes = admit("93.184.215.80", 0, Protocol::icmp);
  ASSERT_TRUE(yes.admitted());
  EXPECT_EQ(yes.name, "ping.example.net");
  EXPECT_FALSE(yes.needs_name);
  EXPECT_TRUE(admit("2606:4700::80", 0, Protocol::icmp).admitted());
  EXPECT_EQ(admit("140.82.112.3", 0, Protocol::icmp).refusal, Refusal::icmp_not_allowed);
  EXPECT_EQ(admit("93.184.215.99", 0, Protocol::icmp).refusal, Refusal::not_answered);
  EXPECT_EQ(admit("127.0.0.1", 0, Protocol::icmp).refusal, Refusal::reserved);
  // A reload keeps echo flows only while a rule for the name allows icmp.
  EXPECT_TRUE(recheck_flow(*policy_, host_, ip("93.184.215.80"), 0, Protocol::icmp, "ping.example.net", false)
                  .allowed);
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("140.82.112.3"), 0, Protocol::icmp, "github.com", false).allowed);
}

// Issue 21: admission is the same for an IPv6 destination: only an address
// the gate answered (AAAA) for an allowed name, on a port and protocol that
// name allows, until its answer expires; never by IPv4 answers for the
// "same" host, never reserved.
TEST_F(AdmissionTest, Ipv6IsAdmittedExactlyAsIpv4) {
  answer("2606:50c0:8000::153", "github.com", 60);
  answer("140.82.112.3", "github.com", 60);
  answer("2001:4860:4860::8888", "ntp.example.net", 60);
  auto a = admit("2606:50c0:8000::153", 443);
  ASSERT_TRUE(a.admitted());
  EXPECT_EQ(a.name, "github.com");
  EXPECT_TRUE(a.needs_name);
  EXPECT_TRUE(admit("2606:50c0:8000::153", 22).admitted());
  EXPECT_EQ(admit("2606:50c0:8000::153", 80).refusal, Refusal::port_not_allowed);
  EXPECT_EQ(admit("2606:50c0:8000::153", 443, Protocol::udp).refusal, Refusal::port_not_allowed);
  EXPECT_TRUE(admit("2001:4860:4860::8888", 123, Protocol::udp).admitted());
  EXPECT_EQ(admit("2001:4860:4860::8888", 123, Protocol::tcp).refusal, Refusal::port_not_allowed);
  // A neighbour of the answered address, and the IPv4-mapped form of the
  // answered IPv4 address, were never answered (the mapped one is reserved).
  EXPECT_EQ(admit("2606:50c0:8000::154", 443).refusal, Refusal::not_answered);
  EXPECT_EQ(admit("::ffff:140.82.112.3", 443).refusal, Refusal::reserved);
  EXPECT_EQ(admit("64:ff9b::8c52:7003", 443).refusal, Refusal::reserved);  // NAT64 of it
  // Past the answer's TTL: no new flow.
  now_ += base::Seconds(61);
  EXPECT_EQ(admit("2606:50c0:8000::153", 443).refusal, Refusal::not_answered);
}

TEST_F(AdmissionTest, DirectAddressIsRefused) {
  auto a = admit("140.82.112.3", 443);
  EXPECT_EQ(a.refusal, Refusal::not_answered);
}

TEST_F(AdmissionTest, ReservedIsRefusedEvenWhenAnswered) {
  answer("10.0.0.1", "github.com");  // a table fed by mistake must not matter
  EXPECT_EQ(admit("10.0.0.1", 443).refusal, Refusal::reserved);
  EXPECT_EQ(admit("169.254.169.254", 80).refusal, Refusal::reserved);
}

// Moved from the AnswerTable's tests when the table stopped deciding: an
// address recorded by mistake admits nothing, in every reserved range.
TEST_F(AdmissionTest, AReservedAddressRecordedByMistakeIsRefused) {
  for (auto text : {"127.0.0.1", "169.254.169.254", "10.0.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0",
                    "224.0.0.1", "::1", "::ffff:93.184.216.34", "64:ff9b::5db8:d822", "fd00::1", "fe80::1"}) {
    answer(text, "github.com");
    EXPECT_EQ(admit(text, 443).refusal, Refusal::reserved) << text;
  }
  // Only what [unsafe] names is lifted; lifted still means answered.
  answer("198.18.0.1", "github.com");
  EXPECT_TRUE(admit("198.18.0.1", 443).admitted());
  EXPECT_EQ(admit("198.18.0.2", 443).refusal, Refusal::not_answered);
}

TEST_F(AdmissionTest, LiftedReservedIsAdmittedAndMarked) {
  answer("198.18.0.10", "github.com");
  auto a = admit("198.18.0.10", 443);
  ASSERT_TRUE(a.admitted());
  ASSERT_NE(a.lifted, nullptr);
  EXPECT_EQ(admit("198.18.0.11", 443).refusal, Refusal::not_answered);  // still needs an answer
}

// Issue 15: an answer naming the host abox-net runs on was admitted as an
// answered name whenever the host's address was not in a reserved range.
TEST_F(AdmissionTest, AnAddressOfThisHostIsNeverAdmitted) {
  answer("140.82.112.3", "github.com");
  answer("198.18.0.10", "github.com");
  answer("2606:50c0:8000::153", "github.com");
  ASSERT_TRUE(host_.add(ip("140.82.112.3")));
  ASSERT_TRUE(host_.add(ip("198.18.0.10")));  // inside the range [unsafe] lifts: still refused
  ASSERT_TRUE(host_.add(ip("2606:50c0:8000::153")));
  EXPECT_EQ(admit("140.82.112.3", 443).refusal, Refusal::host_address);
  EXPECT_EQ(admit("140.82.112.3", 22).refusal, Refusal::host_address);
  EXPECT_EQ(admit("198.18.0.10", 443).refusal, Refusal::host_address);
  EXPECT_EQ(admit("2606:50c0:8000::153", 443).refusal, Refusal::host_address);
  EXPECT_EQ(describe(Refusal::host_address), "destination is an address of this host");
  // Followed as it changes: once it is no longer this host's, the answer admits again.
  host_.remove(ip("140.82.112.3"));
  EXPECT_TRUE(admit("140.82.112.3", 443).admitted());
}

TEST_F(AdmissionTest, PortAllowedOnlyForAnotherName) {
  // The address was answered for cdn (443 only); 5432 is allowed only for db,
  // which was never answered with this address.
  answer("151.101.1.1", "cdn.example.net");
  EXPECT_TRUE(admit("151.101.1.1", 443).admitted());
  EXPECT_EQ(admit("151.101.1.1", 5432).refusal, Refusal::port_not_allowed);
  // Once db is answered with it too, 5432 is admitted for db.
  answer("151.101.1.1", "db.example.net");
  auto a = admit("151.101.1.1", 5432);
  ASSERT_TRUE(a.admitted());
  EXPECT_EQ(a.name, "db.example.net");
}

TEST_F(AdmissionTest, ProtocolMustMatch) {
  answer("162.159.200.1", "ntp.example.net");
  EXPECT_TRUE(admit("162.159.200.1", 123, Protocol::udp).admitted());
  EXPECT_EQ(admit("162.159.200.1", 123, Protocol::tcp).refusal, Refusal::port_not_allowed);
  answer("140.82.112.3", "github.com");
  EXPECT_EQ(admit("140.82.112.3", 443, Protocol::udp).refusal, Refusal::port_not_allowed);
}

TEST_F(AdmissionTest, ExpiredAnswerAdmitsNothingNew) {
  answer("140.82.112.3", "github.com", 10);
  EXPECT_TRUE(admit("140.82.112.3", 443).admitted());
  now_ += base::Seconds(11);
  EXPECT_EQ(admit("140.82.112.3", 443).refusal, Refusal::not_answered);
  // ... but a flow admitted before keeps its grace.
  EXPECT_GT(table_->live_until(ip("140.82.112.3"), "github.com"), now_);
}

TEST_F(AdmissionTest, BrokeredNameGoesToTheBroker) {
  answer("160.79.104.10", "api.anthropic.com");
  auto a = admit("160.79.104.10", 443);
  ASSERT_TRUE(a.admitted());
  ASSERT_NE(a.broker, nullptr);
  EXPECT_EQ(a.rule, nullptr);
  EXPECT_EQ(admit("160.79.104.10", 80).refusal, Refusal::port_not_allowed);
}

TEST_F(AdmissionTest, PeekedNameMustBeAnsweredForTheAddress) {
  answer("151.101.1.1", "cdn.example.net");
  EXPECT_EQ(check_peeked_name(*policy_, *table_, ip("151.101.1.1"), 443, "cdn.example.net", now_),
            NameCheck::ok);
  // The shared-CDN hole: same address, another host in the SNI.
  EXPECT_EQ(check_peeked_name(*policy_, *table_, ip("151.101.1.1"), 443, "evil.example.org", now_),
            NameCheck::not_answered_for_address);
  // A host also answered for this address, but not allowed on this port.
  answer("151.101.1.1", "db.example.net");
  EXPECT_EQ(check_peeked_name(*policy_, *table_, ip("151.101.1.1"), 443, "db.example.net", now_),
            NameCheck::not_allowed_on_port);
}

TEST(NameCheckTest, EveryResultReadsAsItsOwnSentence) {
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < kNameChecks; ++i) {
    EXPECT_FALSE(describe(static_cast<NameCheck>(i)).empty()) << i;
    EXPECT_TRUE(seen.insert(describe(static_cast<NameCheck>(i))).second) << i;
  }
}

// ---- recheck_flow: a live flow under a reloaded policy --------------------

TEST_F(AdmissionTest, RecheckKeepsAFlowItsRuleStillAllows) {
  const Recheck r =
      recheck_flow(*policy_, host_, ip("140.82.112.3"), 443, Protocol::tcp, "github.com", false);
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.broker, nullptr);
}

TEST_F(AdmissionTest, RecheckCutsANameNoRuleAllowsOrAPortOrProtocolItsRuleDropped) {
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("1.2.3.4"), 443, Protocol::tcp, "gone.example", false).allowed);
  EXPECT_FALSE(recheck_flow(*policy_, host_, ip("1.2.3.4"), 80, Protocol::tcp, "github.com", false).allowed);
  EXPECT_FALSE(recheck_flow(*policy_, host_, ip("1.2.3.4"), 443, Protocol::udp, "github.com", false).allowed);
  EXPECT_TRUE(
      recheck_flow(*policy_, host_, ip("1.2.3.4"), 123, Protocol::udp, "ntp.example.net", false).allowed);
}

TEST_F(AdmissionTest, RecheckCutsAReservedDestinationAndAnAddressOfThisHost) {
  // 198.18.0.0/15 is lifted by [unsafe]: allowed; loopback never is.
  EXPECT_TRUE(
      recheck_flow(*policy_, host_, ip("198.18.0.9"), 443, Protocol::tcp, "github.com", false).allowed);
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("127.0.0.1"), 443, Protocol::tcp, "github.com", false).allowed);
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("169.254.169.254"), 443, Protocol::tcp, "github.com", false).allowed);
  ASSERT_TRUE(host_.add(ip("140.82.112.3")));
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("140.82.112.3"), 443, Protocol::tcp, "github.com", false).allowed);
}

TEST_F(AdmissionTest, RecheckFollowsABrokeredFlowsBindingAndCutsADirectFlowToABrokeredName) {
  const Recheck b =
      recheck_flow(*policy_, host_, ip("160.79.104.10"), 443, Protocol::tcp, "api.anthropic.com", true);
  EXPECT_TRUE(b.allowed);
  ASSERT_NE(b.broker, nullptr);
  EXPECT_EQ(b.broker, policy_->broker_for("api.anthropic.com", 443));
  // A direct flow to a name that is (now) brokered: never without the broker's gate.
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("160.79.104.10"), 443, Protocol::tcp, "api.anthropic.com", false)
          .allowed);
  // A brokered flow whose binding is gone.
  EXPECT_FALSE(
      recheck_flow(*policy_, host_, ip("140.82.112.3"), 443, Protocol::tcp, "github.com", true).allowed);
}

}  // namespace
}  // namespace abox::netstack
