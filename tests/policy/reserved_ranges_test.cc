#include "policy/reserved_ranges.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/alloc_counter.h"

namespace abox::policy {
namespace {

IpAddress addr(std::string_view text) {
  auto a = IpAddress::parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress{});
}

// The range that wins for `text`, or "" for an ordinary global address.
std::string winner(std::string_view text) {
  const ReservedRange* r = find_reserved(addr(text));
  return r == nullptr ? "" : r->range.to_string();
}

std::string_view name_of(std::string_view text) {
  const ReservedRange* r = find_reserved(addr(text));
  return r == nullptr ? "" : r->name;
}

IpAddress last_address(const Cidr& c) {
  auto bytes = c.base().bytes();
  std::size_t bits = c.base().byte_length() * 8;
  for (std::size_t bit = c.prefix(); bit < bits; ++bit)
    bytes[bit / 8] |= static_cast<std::uint8_t>(0x80 >> (bit % 8));
  if (c.base().is_v4()) return IpAddress::v4_bytes(bytes.data());
  return IpAddress::v6(bytes);
}

struct Case {
  std::string_view address;
  std::string_view range;  // the entry that must win; "" = not reserved
};

void expect_all(std::initializer_list<Case> cases) {
  for (const Case& c : cases) EXPECT_EQ(winner(c.address), c.range) << c.address;
}

// --- the table itself ---------------------------------------------------

TEST(ReservedRangesTest, TableIsWellFormed) {
  auto all = reserved_ranges();
  ASSERT_GT(all.size(), 40U);
  bool seen_v6 = false;
  std::set<std::string> ranges;
  for (const ReservedRange& r : all) {
    SCOPED_TRACE(r.range.to_string());
    if (r.range.base().is_v6()) seen_v6 = true;
    EXPECT_FALSE(seen_v6 && r.range.base().is_v4()) << "IPv4 entries come first";
    EXPECT_TRUE(ranges.insert(r.range.to_string()).second) << "duplicate";
    EXPECT_FALSE(r.name.empty());
    EXPECT_FALSE(r.reference.empty());
  }
  EXPECT_TRUE(seen_v6);
}

TEST(ReservedRangesTest, EveryEntryIsFoundAtBothEnds) {
  auto all = reserved_ranges();
  for (const ReservedRange& r : all) {
    for (const IpAddress& a : {r.range.base(), last_address(r.range)}) {
      SCOPED_TRACE(r.range.to_string() + " at " + a.to_string());
      const ReservedRange* found = find_reserved(a);
      ASSERT_NE(found, nullptr);
      // Points into the table, and is this entry or one inside it.
      EXPECT_GE(found, all.data());
      EXPECT_LT(found, all.data() + all.size());
      EXPECT_TRUE(r.range.covers(found->range));
    }
  }
}

// The slow, obvious answer: the longest containing prefix, by Cidr::contains.
const ReservedRange* reference_lookup(const IpAddress& a) {
  const ReservedRange* best = nullptr;
  for (const ReservedRange& r : reserved_ranges()) {
    if (r.range.contains(a) && (best == nullptr || r.range.prefix() > best->range.prefix())) best = &r;
  }
  return best;
}

// a + delta (delta is +1 or -1), wrapping within the family.
IpAddress step(const IpAddress& a, int delta) {
  auto bytes = a.bytes();
  for (std::size_t k = a.byte_length(); k-- > 0;) {
    bytes[k] = static_cast<std::uint8_t>(bytes[k] + delta);
    if (bytes[k] != (delta > 0 ? 0x00 : 0xFF)) break;
  }
  if (a.is_v4()) return IpAddress::v4_bytes(bytes.data());
  return IpAddress::v6(bytes);
}

TEST(ReservedRangesTest, AgreesWithTheObviousLookup) {
  std::vector<IpAddress> probes;
  for (const ReservedRange& r : reserved_ranges()) {
    IpAddress first = r.range.base();
    IpAddress last = last_address(r.range);
    for (const IpAddress& a :
         {first, last, step(first, -1), step(first, +1), step(last, -1), step(last, +1)}) {
      probes.push_back(a);
    }
  }
  std::mt19937_64 rng(7);  // NOLINT(cert-msc32-c,cert-msc51-cpp): a fixed seed, so failures reproduce
  for (int i = 0; i < 20000; ++i) {
    std::array<std::uint8_t, 16> bytes{};
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    probes.push_back(IpAddress::v6(bytes));
    probes.push_back(IpAddress::v4_bytes(bytes.data()));
  }
  for (const IpAddress& a : probes) EXPECT_EQ(find_reserved(a), reference_lookup(a)) << a.to_string();
}

TEST(ReservedRangesTest, LookupDoesNotAllocate) {
  (void)find_reserved(addr("1.1.1.1"));  // builds the table outside the count
  IpAddress probes[] = {addr("1.1.1.1"), addr("169.254.169.254"), addr("2606:4700::1111"),
                        addr("fd00:ec2::254")};
  abox::testing::AllocationCounter allocations;
  for (const IpAddress& a : probes) (void)find_reserved(a);
  (void)reserved_ranges();
  EXPECT_EQ(allocations.count(), 0);
}

// --- IPv4 edges: first and last inside, neighbours outside ---------------

TEST(ReservedRangesTest, Ipv4RegistryEdges) {
  expect_all({
      {"0.0.0.0", "0.0.0.0/32"},
      {"0.0.0.1", "0.0.0.0/8"},
      {"0.255.255.255", "0.0.0.0/8"},
      {"1.0.0.0", ""},

      {"9.255.255.255", ""},
      {"10.0.0.0", "10.0.0.0/8"},
      {"10.255.255.255", "10.0.0.0/8"},
      {"11.0.0.0", ""},

      {"100.63.255.255", ""},
      {"100.64.0.0", "100.64.0.0/10"},
      {"100.127.255.255", "100.64.0.0/10"},
      {"100.128.0.0", ""},

      {"126.255.255.255", ""},
      {"127.0.0.0", "127.0.0.0/8"},
      {"127.0.0.1", "127.0.0.0/8"},
      {"127.255.255.255", "127.0.0.0/8"},
      {"128.0.0.0", ""},

      {"169.253.255.255", ""},
      {"169.254.0.0", "169.254.0.0/16"},
      {"169.254.255.255", "169.254.0.0/16"},
      {"169.255.0.0", ""},

      {"172.15.255.255", ""},
      {"172.16.0.0", "172.16.0.0/12"},
      {"172.31.255.255", "172.16.0.0/12"},
      {"172.32.0.0", ""},

      {"191.255.255.255", ""},
      {"192.0.0.0", "192.0.0.0/29"},
      {"192.0.0.7", "192.0.0.0/29"},
      {"192.0.0.8", "192.0.0.8/32"},
      {"192.0.0.9", "192.0.0.9/32"},
      {"192.0.0.10", "192.0.0.10/32"},
      {"192.0.0.11", "192.0.0.0/24"},
      {"192.0.0.169", "192.0.0.0/24"},
      {"192.0.0.170", "192.0.0.170/32"},
      {"192.0.0.171", "192.0.0.171/32"},
      {"192.0.0.172", "192.0.0.0/24"},
      {"192.0.0.255", "192.0.0.0/24"},
      {"192.0.1.0", ""},

      {"192.0.1.255", ""},
      {"192.0.2.0", "192.0.2.0/24"},
      {"192.0.2.255", "192.0.2.0/24"},
      {"192.0.3.0", ""},

      {"192.31.195.255", ""},
      {"192.31.196.0", "192.31.196.0/24"},
      {"192.31.196.255", "192.31.196.0/24"},
      {"192.31.197.0", ""},

      {"192.52.192.255", ""},
      {"192.52.193.0", "192.52.193.0/24"},
      {"192.52.193.255", "192.52.193.0/24"},
      {"192.52.194.0", ""},

      {"192.88.98.255", ""},
      {"192.88.99.0", "192.88.99.0/24"},
      {"192.88.99.1", "192.88.99.0/24"},
      {"192.88.99.2", "192.88.99.2/32"},
      {"192.88.99.3", "192.88.99.0/24"},
      {"192.88.99.255", "192.88.99.0/24"},
      {"192.88.100.0", ""},

      {"192.167.255.255", ""},
      {"192.168.0.0", "192.168.0.0/16"},
      {"192.168.255.255", "192.168.0.0/16"},
      {"192.169.0.0", ""},

      {"192.175.47.255", ""},
      {"192.175.48.0", "192.175.48.0/24"},
      {"192.175.48.255", "192.175.48.0/24"},
      {"192.175.49.0", ""},

      {"198.17.255.255", ""},
      {"198.18.0.0", "198.18.0.0/15"},
      {"198.19.255.255", "198.18.0.0/15"},
      {"198.20.0.0", ""},

      {"198.51.99.255", ""},
      {"198.51.100.0", "198.51.100.0/24"},
      {"198.51.100.255", "198.51.100.0/24"},
      {"198.51.101.0", ""},

      {"203.0.112.255", ""},
      {"203.0.113.0", "203.0.113.0/24"},
      {"203.0.113.255", "203.0.113.0/24"},
      {"203.0.114.0", ""},

      {"223.255.255.255", ""},
      {"224.0.0.0", "224.0.0.0/4"},
      {"239.255.255.255", "224.0.0.0/4"},
      {"240.0.0.0", "240.0.0.0/4"},
      {"255.255.255.254", "240.0.0.0/4"},
      {"255.255.255.255", "255.255.255.255/32"},
  });
}

TEST(ReservedRangesTest, CloudMetadataIsMoreSpecific) {
  expect_all({
      {"169.254.169.253", "169.254.0.0/16"},
      {"169.254.169.254", "169.254.169.254/32"},
      {"169.254.169.255", "169.254.0.0/16"},
      {"169.254.170.1", "169.254.0.0/16"},
      {"169.254.170.2", "169.254.170.2/32"},
      {"169.254.170.3", "169.254.0.0/16"},
      {"100.100.100.199", "100.64.0.0/10"},
      {"100.100.100.200", "100.100.100.200/32"},
      {"100.100.100.201", "100.64.0.0/10"},
      {"168.63.129.15", ""},
      {"168.63.129.16", "168.63.129.16/32"},
      {"168.63.129.17", ""},
      {"fd00:ec2::253", "fc00::/7"},
      {"fd00:ec2::254", "fd00:ec2::254/128"},
      {"fd00:ec2::255", "fc00::/7"},
  });
  EXPECT_EQ(name_of("169.254.169.254"), "cloud metadata");
  EXPECT_EQ(name_of("169.254.170.2"), "cloud metadata");
  EXPECT_EQ(name_of("100.100.100.200"), "cloud metadata");
  EXPECT_EQ(name_of("168.63.129.16"), "cloud metadata");
  EXPECT_EQ(name_of("fd00:ec2::254"), "cloud metadata");
  EXPECT_EQ(name_of("169.254.1.1"), "link-local");
  EXPECT_EQ(name_of("100.100.1.1"), "shared address space (CGNAT)");
}

// --- IPv6 edges -----------------------------------------------------------

TEST(ReservedRangesTest, Ipv6LowSpaceEdges) {
  expect_all({
      {"::", "::/128"},
      {"::1", "::1/128"},
      {"::2", "::/96"},
      {"::ffff:ffff", "::/96"},
      {"::1:0:0", "::/3"},  // just past ::/96, still not global unicast
      {"::fffe:ffff:ffff", "::/3"},
      {"::ffff:0.0.0.0", "::ffff:0.0.0.0/96"},
      {"::ffff:255.255.255.255", "::ffff:0.0.0.0/96"},
      {"::1:0:0:0", "::/3"},

      {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "::/3"},
      {"64:ff9b::", "64:ff9b::/96"},
      {"64:ff9b::ffff:ffff", "64:ff9b::/96"},
      {"64:ff9b::1:0:0", "::/3"},
      {"64:ff9b:0:ffff:ffff:ffff:ffff:ffff", "::/3"},
      {"64:ff9b:1::", "64:ff9b:1::/48"},
      {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "64:ff9b:1::/48"},
      {"64:ff9b:2::", "::/3"},

      {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/3"},
      {"100::", "100::/64"},
      {"100::ffff:ffff:ffff:ffff", "100::/64"},
      {"100:0:0:1::", "::/3"},

      {"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/3"},
      {"2000::", ""},
      {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
      {"4000::", "4000::/2"},
      {"7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "4000::/2"},
      {"8000::", "8000::/1"},
  });
}

TEST(ReservedRangesTest, Ipv6IetfProtocolAssignmentsEdges) {
  expect_all({
      {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
      {"2001::", "2001::/32"},
      {"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/32"},
      {"2001:1::", "2001::/23"},
      {"2001:1::1", "2001:1::1/128"},
      {"2001:1::2", "2001:1::2/128"},
      {"2001:1::3", "2001::/23"},
      {"2001:1:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23"},
      {"2001:2::", "2001:2::/48"},
      {"2001:2:0:ffff:ffff:ffff:ffff:ffff", "2001:2::/48"},
      {"2001:2:1::", "2001::/23"},
      {"2001:3::", "2001:3::/32"},
      {"2001:3:ffff:ffff:ffff:ffff:ffff:ffff", "2001:3::/32"},
      {"2001:4:111:ffff:ffff:ffff:ffff:ffff", "2001::/23"},
      {"2001:4:112::", "2001:4:112::/48"},
      {"2001:4:112:ffff:ffff:ffff:ffff:ffff", "2001:4:112::/48"},
      {"2001:4:113::", "2001::/23"},
      {"2001:f:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23"},
      {"2001:10::", "2001:10::/28"},
      {"2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:10::/28"},
      {"2001:20::", "2001:20::/28"},
      {"2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:20::/28"},
      {"2001:30::", "2001:30::/28"},
      {"2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:30::/28"},
      {"2001:40::", "2001::/23"},
      {"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23"},
      {"2001:200::", ""},
  });
}

TEST(ReservedRangesTest, Ipv6RegistryEdges) {
  expect_all({
      {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", ""},
      {"2001:db8::", "2001:db8::/32"},
      {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::/32"},
      {"2001:db9::", ""},

      {"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
      {"2002::", "2002::/16"},
      {"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2002::/16"},
      {"2003::", ""},

      {"2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", ""},
      {"2620:4f:8000::", "2620:4f:8000::/48"},
      {"2620:4f:8000:ffff:ffff:ffff:ffff:ffff", "2620:4f:8000::/48"},
      {"2620:4f:8001::", ""},

      {"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
      {"3fff::", "3fff::/20"},
      {"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff::/20"},
      {"3fff:1000::", ""},

      {"5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "4000::/2"},
      {"5f00::", "5f00::/16"},
      {"5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f00::/16"},
      {"5f01::", "4000::/2"},

      {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::/1"},
      {"fc00::", "fc00::/7"},
      {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7"},
      {"fe00::", "8000::/1"},

      {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::/1"},
      {"fe80::", "fe80::/10"},
      {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::/10"},
      {"fec0::", "fec0::/10"},
      {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::/10"},
      {"ff00::", "ff00::/8"},
      {"ff02::1", "ff00::/8"},
      {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::/8"},
  });
  EXPECT_EQ(name_of("2001::1"), "Teredo");
  EXPECT_EQ(name_of("2001:1::3"), "IETF protocol assignments");
}

// --- IPv4 inside IPv6 -----------------------------------------------------

TEST(ReservedRangesTest, EmbeddedIpv4IsRefusedWhateverItCarries) {
  expect_all({
      // IPv4-mapped: public and private alike.
      {"::ffff:1.1.1.1", "::ffff:0.0.0.0/96"},
      {"::ffff:10.0.0.1", "::ffff:0.0.0.0/96"},
      {"::ffff:127.0.0.1", "::ffff:0.0.0.0/96"},
      {"::ffff:169.254.169.254", "::ffff:0.0.0.0/96"},
      // IPv4-compatible.
      {"::1.1.1.1", "::/96"},
      {"::10.0.0.1", "::/96"},
      // NAT64, well-known and local-use.
      {"64:ff9b::1.1.1.1", "64:ff9b::/96"},
      {"64:ff9b::10.0.0.1", "64:ff9b::/96"},
      {"64:ff9b::169.254.169.254", "64:ff9b::/96"},
      {"64:ff9b:1::a00:1", "64:ff9b:1::/48"},
      // 6to4: 2002:WWXX:YYZZ::/48 for WW.XX.YY.ZZ.
      {"2002:101:101::1", "2002::/16"},    // 1.1.1.1
      {"2002:a00:1::1", "2002::/16"},      // 10.0.0.1
      {"2002:a9fe:a9fe::1", "2002::/16"},  // 169.254.169.254
      // Teredo: server 65.54.227.120, client obfuscated in the low 48 bits.
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32"},
  });
}

TEST(ReservedRangesTest, FamiliesDoNotLeakIntoEachOther) {
  // An IPv4 address is judged by the IPv4 entries only, and the reverse.
  EXPECT_EQ(winner("1.1.1.1"), "");
  EXPECT_EQ(winner("::ffff:1.1.1.1"), "::ffff:0.0.0.0/96");
  EXPECT_EQ(winner("0.0.0.1"), "0.0.0.0/8");
  EXPECT_EQ(winner("::0.0.0.2"), "::/96");
}

TEST(ReservedRangesTest, OrdinaryAddressesAreNotReserved) {
  for (std::string_view a :
       {"1.1.1.1", "1.0.0.1", "9.9.9.9", "149.112.112.112", "93.184.215.14", "100.63.0.1", "100.128.0.1",
        "172.32.1.1", "192.169.0.1", "198.20.0.1", "223.255.255.254", "2606:4700::1111",
        "2606:4700:4700::1001", "2620:fe::fe", "2a00:1450:4001:80b::200e", "2001:4860:4860::8888",
        "2001:200::1", "3fff:1000::1", "2c0f:fb50:4003::1"}) {
    EXPECT_EQ(find_reserved(addr(a)), nullptr) << a;
  }
}

}  // namespace
}  // namespace abox::policy

namespace abox::policy {
namespace {

TEST(ReservedRangesTest, OnlyMetadataEntriesAreNeverLifted) {
  std::size_t never = 0;
  for (const auto& r : reserved_ranges()) {
    EXPECT_EQ(r.never_lifted, r.name == "cloud metadata") << r.range.to_string();
    never += r.never_lifted;
  }
  EXPECT_EQ(never, 5u);  // 169.254.169.254, 169.254.170.2, 100.100.100.200, 168.63.129.16, fd00:ec2::254
}

}  // namespace
}  // namespace abox::policy
