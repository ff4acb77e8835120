#include "dns/answer_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "policy/policy_file.h"
#include "tests/support/alloc_counter.h"

namespace abox::dns {
namespace {

using base::MonoTime;
using base::Seconds;
using policy::IpAddress;
using policy::Protocol;

policy::Policy parse_ok(std::string_view text) {
  auto r = policy::parse_policy(text, "test.toml");
  if (!r.ok()) ADD_FAILURE() << r.error().to_string();
  return std::move(r).value();
}

IpAddress ip(std::string_view text) {
  auto a = IpAddress::parse(text);
  if (!a) ADD_FAILURE() << "bad address " << text;
  return a.value_or(IpAddress{});
}

// a.example.com: 443 only; b.example.com: 443 and 8443; grace 30 s.
constexpr std::string_view kPolicy = R"(
[dns]
grace = 30

[[allow]]
names = ["a.example.com"]
ports = [443]

[[allow]]
names = ["b.example.com"]
ports = [443, 8443]
)";

// Deterministic mode: time is a number of seconds from an arbitrary origin.
const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at(int seconds) {
  return kT0 + Seconds(seconds);
}

// "n<i>.example.com", appended piece by piece: "n" + std::to_string(i) made
// GCC 12 at -O3 report a false -Wrestrict overlap (GCC bug 105329).
std::string numbered_name(int i) {
  std::string name("n");
  name.append(std::to_string(i));
  name.append(".example.com");
  return name;
}

// What admission (netstack/stack/admission.cc) reads from the table: the
// first unexpired name, most recently answered first, whose rule allows the
// port and protocol. (Admission refuses reserved addresses before it asks
// the table: tests/netstack/stack/admission_test.cc.)
struct Vouched {
  const policy::AllowRule* rule = nullptr;
  std::string_view name;
  MonoTime expires{};
  bool admitted() const { return rule != nullptr; }
};
Vouched vouches(const AnswerTable& table, const policy::Policy& policy, const IpAddress& address,
                std::uint16_t port, Protocol protocol, MonoTime now) {
  for (const auto& n : table.names_for(address, now)) {
    if (const policy::AllowRule* rule = policy.admits(n.name, port, protocol))
      return {rule, n.name, n.expires};
  }
  return {};
}

class AnswerTableTest : public ::testing::Test {
 protected:
  policy::Policy policy_ = parse_ok(kPolicy);
};

TEST_F(AnswerTableTest, RecordThenAdmit) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("93.184.216.34");
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::tcp, at(0)).admitted());

  table.record(addr, "a.example.com", at(60), at(0));
  auto d = vouches(table, policy_, addr, 443, Protocol::tcp, at(1));
  ASSERT_TRUE(d.admitted());
  EXPECT_EQ(d.name, "a.example.com");
  EXPECT_EQ(d.expires, at(60));
  EXPECT_EQ(d.rule, &policy_.rules()[0]);

  // The rule's port and protocol still apply.
  EXPECT_FALSE(vouches(table, policy_, addr, 80, Protocol::tcp, at(1)).admitted());
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::udp, at(1)).admitted());
  // Another address was never answered.
  EXPECT_FALSE(vouches(table, policy_, ip("93.184.216.35"), 443, Protocol::tcp, at(1)).admitted());
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.counters().recorded, 1u);
}

TEST_F(AnswerTableTest, Ipv6) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("2606:2800:220:1:248:1893:25c8:1946");
  table.record(addr, "a.example.com", at(60), at(0));
  EXPECT_TRUE(vouches(table, policy_, addr, 443, Protocol::tcp, at(1)).admitted());
  // The same bytes read as another family are another address.
  EXPECT_FALSE(vouches(table, policy_, ip("2606:2800::"), 443, Protocol::tcp, at(1)).admitted());
}

TEST_F(AnswerTableTest, PortAllowedOnlyForAnotherName) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  table.record(addr, "b.example.com", at(60), at(0));
  table.record(addr, "a.example.com", at(60), at(0));

  // 8443 is allowed only for b: admitted, and for b.
  auto d = vouches(table, policy_, addr, 8443, Protocol::tcp, at(1));
  ASSERT_TRUE(d.admitted());
  EXPECT_EQ(d.name, "b.example.com");
  EXPECT_EQ(d.rule, &policy_.rules()[1]);

  // 443 is allowed for both: the most recently answered name wins.
  d = vouches(table, policy_, addr, 443, Protocol::tcp, at(1));
  ASSERT_TRUE(d.admitted());
  EXPECT_EQ(d.name, "a.example.com");

  // 22 is allowed for neither.
  EXPECT_FALSE(vouches(table, policy_, addr, 22, Protocol::tcp, at(1)).admitted());
}

TEST_F(AnswerTableTest, NameNotInPolicyAdmitsNothing) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  table.record(addr, "c.example.com", at(60), at(0));
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::tcp, at(1)).admitted());
}

TEST_F(AnswerTableTest, ExpiredNameDoesNotAdmitForAnotherPort) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  table.record(addr, "b.example.com", at(10), at(0));
  table.record(addr, "a.example.com", at(100), at(0));
  EXPECT_TRUE(vouches(table, policy_, addr, 8443, Protocol::tcp, at(9)).admitted());
  // b expired: 8443 is no longer reachable through a, which does not allow it.
  EXPECT_FALSE(vouches(table, policy_, addr, 8443, Protocol::tcp, at(10)).admitted());
  auto d = vouches(table, policy_, addr, 443, Protocol::tcp, at(10));
  ASSERT_TRUE(d.admitted());
  EXPECT_EQ(d.name, "a.example.com");
}

TEST_F(AnswerTableTest, AdmitsUntilExpiryThenLiveUntilGrace) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("93.184.216.34");
  table.record(addr, "a.example.com", at(60), at(0));

  EXPECT_TRUE(vouches(table, policy_, addr, 443, Protocol::tcp, at(59)).admitted());
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::tcp, at(60)).admitted());
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::tcp, at(61)).admitted());

  // Running flows are vouched for until expiry + grace.
  EXPECT_EQ(table.live_until(addr, "a.example.com"), at(60 + 30));
  // An unknown pair is vouched for by nothing: a time before any now.
  EXPECT_LT(table.live_until(addr, "b.example.com"), at(0));
  EXPECT_LT(table.live_until(ip("1.1.1.1"), "a.example.com"), at(0));
}

TEST_F(AnswerTableTest, LaterAnswerExtendsOrShortens) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("93.184.216.34");
  table.record(addr, "a.example.com", at(60), at(0));
  table.record(addr, "a.example.com", at(200), at(50));
  EXPECT_TRUE(vouches(table, policy_, addr, 443, Protocol::tcp, at(100)).admitted());
  EXPECT_EQ(table.live_until(addr, "a.example.com"), at(230));

  table.record(addr, "a.example.com", at(110), at(100));
  EXPECT_FALSE(vouches(table, policy_, addr, 443, Protocol::tcp, at(110)).admitted());
  EXPECT_EQ(table.live_until(addr, "a.example.com"), at(140));
  // Still one name, one entry.
  EXPECT_EQ(table.names_for(addr, at(100)).size(), 1u);
  EXPECT_EQ(table.size(), 1u);
}

TEST_F(AnswerTableTest, FullTableEvictsPurgedFirstThenOldest) {
  AnswerTable table(policy_, 3);
  const IpAddress x1 = ip("1.0.0.1"), x2 = ip("1.0.0.2"), x3 = ip("1.0.0.3");
  const IpAddress x4 = ip("1.0.0.4"), x5 = ip("1.0.0.5"), x6 = ip("1.0.0.6");
  // x1 is the least recently answered but long-lived; x3, the most recent,
  // expires first.
  table.record(x1, "a.example.com", at(1000), at(0));
  table.record(x2, "a.example.com", at(1000), at(1));
  table.record(x3, "a.example.com", at(10), at(2));
  EXPECT_EQ(table.size(), 3u);

  // At 40 = 10 + grace, x3 vouches for nothing: it goes, not x1.
  table.record(x4, "a.example.com", at(1000), at(40));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.counters().evicted_expired, 1u);
  EXPECT_EQ(table.counters().evicted_oldest, 0u);
  EXPECT_LT(table.live_until(x3, "a.example.com"), at(0));
  EXPECT_TRUE(vouches(table, policy_, x1, 443, Protocol::tcp, at(40)).admitted());

  // Answering x1 again makes x2 the least recently answered.
  table.record(x1, "a.example.com", at(1000), at(41));
  EXPECT_EQ(table.size(), 3u);  // a known address takes no new slot
  table.record(x5, "a.example.com", at(1000), at(42));
  EXPECT_EQ(table.counters().evicted_oldest, 1u);
  EXPECT_FALSE(vouches(table, policy_, x2, 443, Protocol::tcp, at(42)).admitted());
  EXPECT_TRUE(vouches(table, policy_, x1, 443, Protocol::tcp, at(42)).admitted());
  EXPECT_TRUE(vouches(table, policy_, x4, 443, Protocol::tcp, at(42)).admitted());
  EXPECT_TRUE(vouches(table, policy_, x5, 443, Protocol::tcp, at(42)).admitted());

  // Expired but within grace is not purgeable: the oldest goes instead.
  table.record(x6, "a.example.com", at(1000), at(1010));
  EXPECT_EQ(table.counters().evicted_expired, 1u);
  EXPECT_EQ(table.counters().evicted_oldest, 2u);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.counters().recorded, 7u);
}

TEST_F(AnswerTableTest, ShortenedAnswerIsPurgedFirst) {
  // The purge bound must follow an expiry that a later answer shortened.
  AnswerTable table(policy_, 2);
  const IpAddress x1 = ip("1.0.0.1"), x2 = ip("1.0.0.2"), x3 = ip("1.0.0.3");
  table.record(x1, "a.example.com", at(1000), at(0));
  table.record(x2, "a.example.com", at(1000), at(1));
  table.record(x2, "a.example.com", at(5), at(2));
  table.record(x3, "a.example.com", at(1000), at(100));
  EXPECT_EQ(table.counters().evicted_expired, 1u);
  EXPECT_EQ(table.counters().evicted_oldest, 0u);
  EXPECT_TRUE(vouches(table, policy_, x1, 443, Protocol::tcp, at(100)).admitted());
  EXPECT_FALSE(vouches(table, policy_, x2, 443, Protocol::tcp, at(100)).admitted());
}

TEST_F(AnswerTableTest, OneScanPurgesEveryPurgeableEntry) {
  AnswerTable table(policy_, 4);
  table.record(ip("1.0.0.1"), "a.example.com", at(2000), at(0));  // stays
  table.record(ip("1.0.0.2"), "a.example.com", at(10), at(0));
  table.record(ip("1.0.0.3"), "a.example.com", at(20), at(0));
  table.record(ip("1.0.0.4"), "a.example.com", at(30), at(0));
  table.record(ip("1.0.0.5"), "a.example.com", at(2000), at(100));
  EXPECT_EQ(table.counters().evicted_expired, 3u);
  EXPECT_EQ(table.size(), 2u);
  // Room is left: the next two new addresses evict nothing.
  table.record(ip("1.0.0.6"), "a.example.com", at(2000), at(101));
  table.record(ip("1.0.0.7"), "a.example.com", at(2000), at(102));
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.counters().evicted_expired, 3u);
  EXPECT_EQ(table.counters().evicted_oldest, 0u);
}

// An idle table holds nothing in proportion to its bound: its storage grows
// with the addresses recorded, so a large answer_entries costs nothing until
// a guest asks for names.
TEST_F(AnswerTableTest, EmptyTableCostsTheSameWhateverItsCapacity) {
  std::size_t small_bytes = 0;
  std::size_t large_bytes = 0;
  {
    abox::testing::AllocationCounter allocs;
    AnswerTable table(policy_, 16);
    small_bytes = allocs.bytes();
  }
  {
    abox::testing::AllocationCounter allocs;
    AnswerTable table(policy_, policy_.limits().answer_entries);
    large_bytes = allocs.bytes();
    EXPECT_EQ(table.capacity(), policy_.limits().answer_entries);
  }
  EXPECT_EQ(large_bytes, small_bytes);
}

TEST_F(AnswerTableTest, FloodStaysBoundedAndFast) {
  constexpr std::uint32_t kFlood = 100'000;
  // 1000, and the policy default: a scan per record would be 1e8 and 1.6e9
  // steps, seconds at least; O(1) per record is well under a second even
  // with sanitizers, so the bound below is generous.
  for (const std::size_t capacity : {std::size_t{1000}, std::size_t{policy_.limits().answer_entries}}) {
    SCOPED_TRACE(capacity);
    AnswerTable table(policy_, capacity);
    const auto started = std::chrono::steady_clock::now();
    for (std::uint32_t i = 0; i < kFlood; ++i) {
      // 11.0.0.0/8 is public; every answer is fresh, so no purge is ever due.
      table.record(IpAddress::v4(0x0B00'0000u + i), "a.example.com", at(600), at(0));
      ASSERT_LE(table.size(), capacity);
    }
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(table.size(), capacity);
    EXPECT_EQ(table.counters().evicted_oldest, kFlood - capacity);
    EXPECT_EQ(table.counters().evicted_expired, 0u);
    // The most recent addresses are the ones kept.
    EXPECT_TRUE(vouches(table, policy_, IpAddress::v4(0x0B00'0000u + kFlood - 1), 443, Protocol::tcp, at(1))
                    .admitted());
    EXPECT_TRUE(
        vouches(table, policy_, IpAddress::v4(0x0B00'0000u + kFlood - capacity), 443, Protocol::tcp, at(1))
            .admitted());
    EXPECT_FALSE(vouches(table, policy_, IpAddress::v4(0x0B00'0000u + kFlood - capacity - 1), 443,
                         Protocol::tcp, at(1))
                     .admitted());
    EXPECT_LT(took, std::chrono::seconds(5));
  }
}

TEST_F(AnswerTableTest, FloodWithTimePassingStaysBounded) {
  // Answers with short TTLs while time moves: purges and evictions mix.
  // Staggered expiries are the costly shape (a purge scan may be due on
  // every record), so this checks bounds and counters, not speed.
  constexpr std::size_t kCapacity = 1000;
  constexpr std::uint32_t kFlood = 20'000;
  AnswerTable table(policy_, kCapacity);
  for (std::uint32_t i = 0; i < kFlood; ++i) {
    // One answer every 40 ms, living 31-80 s with grace: the table fills
    // (oldest evicted) and drains (purged) in turn.
    const MonoTime now = kT0 + std::chrono::milliseconds(std::int64_t{i} * 40);
    table.record(IpAddress::v4(0x0B00'0000u + i), "a.example.com", now + Seconds(1 + i % 50), now);
    ASSERT_LE(table.size(), kCapacity);
  }
  const auto& c = table.counters();
  EXPECT_EQ(c.evicted_expired + c.evicted_oldest + table.size(), kFlood);
  EXPECT_GT(c.evicted_expired, 0u);
  EXPECT_GT(c.evicted_oldest, 0u);
}

TEST_F(AnswerTableTest, SeventeenNamesKeepSixteenMostRecent) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  for (int i = 0; i < 17; ++i) {
    table.record(addr, numbered_name(i), at(600), at(i));
  }
  auto names = table.names_for(addr, at(20));
  ASSERT_EQ(names.size(), AnswerTable::kMaxNamesPerAddress);
  EXPECT_EQ(names.front().name, "n16.example.com");  // most recent first
  EXPECT_EQ(names.back().name, "n1.example.com");
  for (const auto& n : names) EXPECT_NE(n.name, "n0.example.com");
  EXPECT_EQ(table.counters().names_dropped, 1u);
  EXPECT_LT(table.live_until(addr, "n0.example.com"), at(0));

  // Re-answering a name already held drops nothing.
  table.record(addr, "n5.example.com", at(600), at(30));
  EXPECT_EQ(table.counters().names_dropped, 1u);
  EXPECT_EQ(table.names_for(addr, at(30)).front().name, "n5.example.com");
}

TEST_F(AnswerTableTest, DeadNamesMakeWayBeforeLiveOnes) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  table.record(addr, "n0.example.com", at(600), at(0));  // oldest, but alive
  for (int i = 1; i < 16; ++i) {
    table.record(addr, numbered_name(i), at(10), at(0));
  }
  // At 40 = 10 + grace, n1..n15 vouch for nothing; a new name does not push
  // out n0.
  table.record(addr, "new.example.com", at(600), at(40));
  EXPECT_EQ(table.counters().names_dropped, 0u);
  auto names = table.names_for(addr, at(40));
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].name, "new.example.com");
  EXPECT_EQ(names[1].name, "n0.example.com");
}

TEST_F(AnswerTableTest, NamesFor) {
  AnswerTable table(policy_, 16);
  const IpAddress addr = ip("151.101.1.1");
  EXPECT_TRUE(table.names_for(addr, at(0)).empty());
  table.record(addr, "a.example.com", at(100), at(0));
  table.record(addr, "b.example.com", at(10), at(1));
  auto names = table.names_for(addr, at(5));
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].name, "b.example.com");
  EXPECT_EQ(names[1].name, "a.example.com");
  // Expired names are left out, though live_until still knows them.
  names = table.names_for(addr, at(10));
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "a.example.com");
  EXPECT_EQ(table.live_until(addr, "b.example.com"), at(40));
  EXPECT_TRUE(table.names_for(ip("151.101.1.2"), at(5)).empty());
}

TEST_F(AnswerTableTest, GraceZero) {
  const policy::Policy no_grace = parse_ok(R"(
[dns]
grace = 0
[[allow]]
names = ["a.example.com"]
ports = [443]
)");
  AnswerTable table(no_grace, 1);
  table.record(ip("1.0.0.1"), "a.example.com", at(10), at(0));
  EXPECT_EQ(table.live_until(ip("1.0.0.1"), "a.example.com"), at(10));
  table.record(ip("1.0.0.2"), "a.example.com", at(20), at(10));
  EXPECT_EQ(table.counters().evicted_expired, 1u);
  EXPECT_EQ(table.size(), 1u);
}

// A reload forgets the names it revokes: an address answered for a revoked
// name and a kept one keeps only the kept one; an address answered only for
// revoked names goes, and its slot with it.
TEST_F(AnswerTableTest, ForgetNamesDropsRevokedNamesAndAddressesLeftWithNone) {
  AnswerTable table(policy_, 2);
  const IpAddress shared = ip("93.184.216.34");
  const IpAddress only_a = ip("93.184.216.35");
  table.record(shared, "a.example.com", at(60), at(0));
  table.record(shared, "b.example.com", at(30), at(0));
  table.record(only_a, "a.example.com", at(60), at(0));
  ASSERT_EQ(table.size(), 2u);
  const std::size_t forgotten = table.forget_names([](std::string_view n) { return n == "a.example.com"; });
  EXPECT_EQ(forgotten, 2u);
  EXPECT_EQ(table.size(), 1u);
  auto names = table.names_for(shared, at(1));
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "b.example.com");
  EXPECT_TRUE(table.names_for(only_a, at(1)).empty());
  EXPECT_LE(table.live_until(shared, "a.example.com"), at(0)) << "a flow admitted for it is not kept alive";
  EXPECT_EQ(table.live_until(shared, "b.example.com"), at(30 + 30));
  // The freed slot takes a new address without evicting a live one.
  table.record(ip("93.184.216.36"), "b.example.com", at(60), at(2));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.counters().evicted_oldest, 0u);
  EXPECT_EQ(table.names_for(shared, at(3)).size(), 1u);
}

}  // namespace
}  // namespace abox::dns
