#include "policy/ip_address.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <unordered_set>

namespace abox::policy {
namespace {

IpAddress addr(std::string_view text) {
  auto a = IpAddress::parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress{});
}

Cidr cidr(std::string_view text) {
  auto c = Cidr::parse(text);
  EXPECT_TRUE(c.has_value()) << text;
  return c.value_or(Cidr{});
}

std::string canonical(std::string_view text) {
  return addr(text).to_string();
}

// --- IPv4 ---------------------------------------------------------------

TEST(IpAddressTest, ParsesDottedQuad) {
  auto a = IpAddress::parse("192.0.2.1");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_v4());
  EXPECT_EQ(a->v4_value(), 0xC0000201U);
  EXPECT_EQ(a->byte_length(), 4U);
  EXPECT_EQ(a->to_string(), "192.0.2.1");
  EXPECT_EQ(canonical("0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(canonical("255.255.255.255"), "255.255.255.255");
  EXPECT_EQ(canonical("1.0.10.100"), "1.0.10.100");
}

TEST(IpAddressTest, V4FactoriesAgree) {
  const std::uint8_t bytes[4] = {127, 0, 0, 1};
  EXPECT_EQ(IpAddress::v4(0x7F000001), IpAddress::v4_bytes(bytes));
  EXPECT_EQ(IpAddress::v4(0x7F000001), addr("127.0.0.1"));
  EXPECT_EQ(IpAddress::v4(0x7F000001).v4_value(), 0x7F000001U);
  EXPECT_EQ(IpAddress{}, addr("0.0.0.0"));
  // Unused bytes stay zero so that == and hashing see only the address.
  auto b = addr("10.1.2.3").bytes();
  for (std::size_t i = 4; i < 16; ++i) EXPECT_EQ(b[i], 0) << i;
}

TEST(IpAddressTest, RefusesBadDottedQuads) {
  for (std::string_view bad : {
           "",         "1",         "1.2.3",     "1.2.3.4.5", "1.2.3.",     ".1.2.3",       "1..2.3",
           "1.2.3.4.", "256.0.0.0", "1.2.3.256", "999.1.1.1", "1000.1.1.1", "01.2.3.4",     "1.2.3.04",
           "1.2.3.00", "00.0.0.0",  "0x1.2.3.4", "1.2.3.4a",  "+1.2.3.4",   "-1.2.3.4",     " 1.2.3.4",
           "1.2.3.4 ", "1.2.3.4\n", "1. 2.3.4",  "1.2.3.4/8", "[1.2.3.4]",  "1.2.3.4%eth0", "16909060",
       }) {
    EXPECT_FALSE(IpAddress::parse(bad)) << '"' << bad << '"';
  }
  EXPECT_FALSE(IpAddress::parse(std::string_view("1.2.3.4\0", 8)));  // an embedded NUL is not an end
}

// --- IPv6 parsing -------------------------------------------------------

TEST(IpAddressTest, ParsesIpv6Forms) {
  auto a = IpAddress::parse("2001:db8:0:0:1:0:0:1");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_v6());
  EXPECT_EQ(a->byte_length(), 16U);
  std::array<std::uint8_t, 16> want{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(a->bytes(), want);
  EXPECT_EQ(*a, IpAddress::v6(want));

  EXPECT_EQ(addr("::"), IpAddress::v6({}));
  EXPECT_EQ(addr("::1"), addr("0:0:0:0:0:0:0:1"));
  EXPECT_EQ(addr("1::"), addr("1:0:0:0:0:0:0:0"));
  EXPECT_EQ(addr("1::8"), addr("1:0:0:0:0:0:0:8"));
  EXPECT_EQ(addr("1:2:3:4:5:6:7::"), addr("1:2:3:4:5:6:7:0"));
  EXPECT_EQ(addr("::2:3:4:5:6:7:8"), addr("0:2:3:4:5:6:7:8"));
  EXPECT_EQ(addr("1:2:3::6:7:8"), addr("1:2:3:0:0:6:7:8"));
  EXPECT_EQ(addr("2001:DB8::ABCD"), addr("2001:db8::abcd"));
  EXPECT_EQ(addr("0001:0db8:0000::0001"), addr("1:db8::1"));  // leading hex zeros are fine
  EXPECT_EQ(addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff").bytes()[15], 0xFF);
}

TEST(IpAddressTest, ParsesEmbeddedDottedQuad) {
  EXPECT_EQ(addr("::ffff:192.0.2.1"), addr("::ffff:c000:201"));
  EXPECT_EQ(addr("::192.0.2.1"), addr("::c000:201"));
  EXPECT_EQ(addr("64:ff9b::192.0.2.1"), addr("64:ff9b::c000:201"));
  EXPECT_EQ(addr("1:2:3:4:5:6:1.2.3.4"), addr("1:2:3:4:5:6:102:304"));
  EXPECT_EQ(addr("1::1.2.3.4"), addr("1::102:304"));
  EXPECT_EQ(addr("::0.0.0.0"), addr("::"));
}

TEST(IpAddressTest, RefusesBadIpv6) {
  for (std::string_view bad : {
           ":",
           ":::",
           "::::",
           "1:::2",
           ":1",
           ":1::2",
           "1:",
           "1::2:",
           "1::2::3",
           "::1::",
           "1:2:3:4:5:6:7",          // too few groups without "::"
           "1:2:3:4:5:6:7:8:9",      // too many
           "1:2:3:4:5:6:7:8::",      // "::" must stand for at least one group
           "::1:2:3:4:5:6:7:8",      //
           "1:2:3:4::5:6:7:8",       //
           "12345::",                // five hex digits
           "0000a::",                //
           "g::",                    // bad hex
           "2001:db8::z",            //
           "2001:db8::-1",           //
           "1.2.3.4::",              // quad not at the end
           "::1.2.3.4:5",            //
           "::1.2.3.4.5",            //
           "::1.2.3",                //
           "::256.1.1.1",            //
           "::01.2.3.4",             // leading zero inside the quad too
           "1:2:3:4:5:6:7:1.2.3.4",  // quad makes nine groups
           "::1:2:3:4:5:6:1.2.3.4",  // eight groups and "::"
           "1:2:3:4:5:6:1.2.3.4:8",  //
           "::ffff:1.2.3.4/96",      //
           "fe80::1%eth0",           // zone ids name an interface of this host
           "fe80::1%1",              //
           "[::1]",                  // brackets belong to the endpoint syntax
           " ::1",                   //
           "::1 ",                   //
           ":: 1",                   //
           "::1\t",                  //
       }) {
    EXPECT_FALSE(IpAddress::parse(bad)) << '"' << bad << '"';
  }
}

// --- RFC 5952 output ----------------------------------------------------

TEST(IpAddressTest, FormatsRfc5952) {
  // 4.1: no leading zeros. 4.3: lower case.
  EXPECT_EQ(canonical("2001:0DB8:0000:0000:0000:0000:0000:0001"), "2001:db8::1");
  EXPECT_EQ(canonical("ABCD:EF01:2345:6789:ABCD:EF01:2345:6789"), "abcd:ef01:2345:6789:abcd:ef01:2345:6789");
  // 4.2.1: the longest run is shortened as far as possible.
  EXPECT_EQ(canonical("2001:db8:0:0:0:0:2:1"), "2001:db8::2:1");
  // 4.2.2: a single zero group is not compressed.
  EXPECT_EQ(canonical("2001:db8:0:1:1:1:1:1"), "2001:db8:0:1:1:1:1:1");
  EXPECT_EQ(canonical("2001:db8::1:1:1:1:1"), "2001:db8:0:1:1:1:1:1");
  // 4.2.3: the longest run wins; on a tie the first one does.
  EXPECT_EQ(canonical("2001:0:0:1:0:0:0:1"), "2001:0:0:1::1");
  EXPECT_EQ(canonical("2001:db8:0:0:1:0:0:1"), "2001:db8::1:0:0:1");
  EXPECT_EQ(canonical("1:0:0:2:3:0:0:4"), "1::2:3:0:0:4");
  // Runs at either end.
  EXPECT_EQ(canonical("0:0:0:0:0:0:0:0"), "::");
  EXPECT_EQ(canonical("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(canonical("1:0:0:0:0:0:0:0"), "1::");
  EXPECT_EQ(canonical("0:0:1:0:0:0:0:0"), "0:0:1::");
  EXPECT_EQ(canonical("0:1:0:0:0:0:0:0"), "0:1::");
  EXPECT_EQ(canonical("0:1:1:1:1:1:1:1"), "0:1:1:1:1:1:1:1");
  EXPECT_EQ(canonical("1:1:1:1:1:1:1:0"), "1:1:1:1:1:1:1:0");
  EXPECT_EQ(canonical("fe80::0:1"), "fe80::1");
  EXPECT_EQ(canonical("ff02::1:ff00:1"), "ff02::1:ff00:1");
  // Section 5: IPv4-mapped addresses keep the dotted quad...
  EXPECT_EQ(canonical("::ffff:c000:201"), "::ffff:192.0.2.1");
  EXPECT_EQ(canonical("0:0:0:0:0:ffff:0:0"), "::ffff:0.0.0.0");
  // ...and nothing else does.
  EXPECT_EQ(canonical("::192.0.2.1"), "::c000:201");
  EXPECT_EQ(canonical("64:ff9b::192.0.2.1"), "64:ff9b::c000:201");
  EXPECT_EQ(canonical("::1:ffff:1.2.3.4"), "::1:ffff:102:304");
}

TEST(IpAddressTest, ToStringRoundTrips) {
  for (std::string_view text : {"::", "::1", "1::", "2001:db8::1", "fe80::1:2:3:4", "2001:db8:0:1:1:1:1:1",
                                "::ffff:10.0.0.1", "1:2:3:4:5:6:7:8", "0.0.0.0", "203.0.113.9"}) {
    EXPECT_EQ(canonical(text), text);
    EXPECT_EQ(addr(addr(text).to_string()), addr(text));
  }
}

TEST(IpAddressTest, FamiliesNeverCompareEqual) {
  EXPECT_NE(addr("0.0.0.0"), addr("::"));
  EXPECT_NE(addr("1.2.3.4"), addr("::ffff:1.2.3.4"));
  EXPECT_NE(addr("1.2.3.4"), addr("::1.2.3.4"));
  EXPECT_LT(addr("255.255.255.255"), addr("::"));  // v4 orders before v6
  EXPECT_LT(addr("10.0.0.1"), addr("10.0.0.2"));
  EXPECT_LT(addr("2001:db8::1"), addr("2001:db8::2"));
}

TEST(IpAddressTest, HashIsConsistentAndSpreads) {
  IpAddressHash h;
  EXPECT_EQ(h(addr("2001:db8::1")), h(addr("2001:DB8:0::1")));
  EXPECT_NE(h(addr("0.0.0.0")), h(addr("::")));
  std::unordered_set<std::size_t> seen;
  for (std::uint32_t i = 0; i < 1000; ++i) seen.insert(h(IpAddress::v4(0x0A000000 + i)));
  EXPECT_EQ(seen.size(), 1000U);
  std::unordered_set<IpAddress, IpAddressHash> set{addr("1.2.3.4"), addr("::ffff:1.2.3.4"), addr("1.2.3.4")};
  EXPECT_EQ(set.size(), 2U);
}

TEST(IpAddressDeathTest, V4ValueOfIpv6IsMisuse) {
  EXPECT_DEATH((void)addr("::1").v4_value(), "v4_value");
}

// --- Cidr ---------------------------------------------------------------

TEST(CidrTest, ParsesAndPrints) {
  auto c = Cidr::parse("10.0.0.0/8");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->base(), addr("10.0.0.0"));
  EXPECT_EQ(c->prefix(), 8U);
  EXPECT_EQ(c->to_string(), "10.0.0.0/8");
  EXPECT_EQ(cidr("fc00::/7").to_string(), "fc00::/7");
  EXPECT_EQ(cidr("2001:0DB8::/32").to_string(), "2001:db8::/32");
  EXPECT_EQ(cidr("::ffff:0:0/96").to_string(), "::ffff:0.0.0.0/96");
  EXPECT_EQ(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
  EXPECT_EQ(cidr("::/0").to_string(), "::/0");
}

TEST(CidrTest, BareAddressIsOneHost) {
  EXPECT_EQ(cidr("192.0.2.7"), cidr("192.0.2.7/32"));
  EXPECT_EQ(cidr("192.0.2.7").prefix(), 32U);
  EXPECT_EQ(cidr("2001:db8::7").prefix(), 128U);
  EXPECT_EQ(cidr("2001:db8::7").to_string(), "2001:db8::7/128");
}

TEST(CidrTest, RefusesBadText) {
  for (std::string_view bad : {
           "",
           "/8",
           "10.0.0.0/",
           "10.0.0.0/33",
           "10.0.0.0/-1",
           "10.0.0.0/+8",
           "10.0.0.0/08",  // leading zero
           "10.0.0.0/8/8",
           "10.0.0.0/ 8",
           "10.0.0.0 /8",
           "10.0.0.0/8 ",
           "10.0.0.0/4294967304",  // 2^32 + 8 must not wrap to 8
           "10.0.0.0/1e1",
           "10.0.0.1/8",     // host bits set
           "11.0.0.0/7",     // 11 = 0b00001011: its last bit is a host bit at /7
           "10.0.0.128/24",  //
           "::/129",
           "::ffff:0:0/95",
           "2001:db8::/28",  // 0xdb8: the 8 is past /28
           "2001:db8::1/64",
           "fe80::/8",
           "fe80::1%eth0/64",
           "[::1]/128",
       }) {
    EXPECT_FALSE(Cidr::parse(bad)) << '"' << bad << '"';
  }
}

TEST(CidrTest, MakeChecksPrefixAndHostBits) {
  EXPECT_TRUE(Cidr::make(addr("10.0.0.0"), 8));
  EXPECT_TRUE(Cidr::make(addr("10.0.0.1"), 32));
  EXPECT_TRUE(Cidr::make(addr("0.0.0.0"), 0));
  EXPECT_TRUE(Cidr::make(addr("::"), 0));
  EXPECT_TRUE(Cidr::make(addr("::1"), 128));
  EXPECT_FALSE(Cidr::make(addr("10.0.0.1"), 31));
  EXPECT_FALSE(Cidr::make(addr("1.0.0.0"), 0));
  EXPECT_FALSE(Cidr::make(addr("10.0.0.0"), 33));
  EXPECT_FALSE(Cidr::make(addr("::1"), 127));
  EXPECT_FALSE(Cidr::make(addr("::"), 129));
  EXPECT_FALSE(Cidr::make(addr("8000::"), 0));
  EXPECT_TRUE(Cidr::make(addr("8000::"), 1));
}

TEST(CidrTest, DefaultIsIpv4Everything) {
  Cidr c;
  EXPECT_EQ(c, cidr("0.0.0.0/0"));
  EXPECT_TRUE(c.contains(addr("203.0.113.1")));
  EXPECT_FALSE(c.contains(addr("::1")));
}

TEST(CidrTest, ContainsAtTheEdges) {
  Cidr c = cidr("172.16.0.0/12");
  EXPECT_FALSE(c.contains(addr("172.15.255.255")));
  EXPECT_TRUE(c.contains(addr("172.16.0.0")));
  EXPECT_TRUE(c.contains(addr("172.31.255.255")));
  EXPECT_FALSE(c.contains(addr("172.32.0.0")));

  Cidr v6 = cidr("fe80::/10");
  EXPECT_FALSE(v6.contains(addr("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
  EXPECT_TRUE(v6.contains(addr("fe80::")));
  EXPECT_TRUE(v6.contains(addr("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
  EXPECT_FALSE(v6.contains(addr("fec0::")));
}

TEST(CidrTest, HostAndWholeSpace) {
  Cidr host = cidr("192.0.2.1/32");
  EXPECT_TRUE(host.contains(addr("192.0.2.1")));
  EXPECT_FALSE(host.contains(addr("192.0.2.0")));
  EXPECT_FALSE(host.contains(addr("192.0.2.2")));

  Cidr host6 = cidr("2001:db8::1/128");
  EXPECT_TRUE(host6.contains(addr("2001:db8::1")));
  EXPECT_FALSE(host6.contains(addr("2001:db8::")));
  EXPECT_FALSE(host6.contains(addr("2001:db8::2")));

  Cidr all4 = cidr("0.0.0.0/0");
  EXPECT_TRUE(all4.contains(addr("0.0.0.0")));
  EXPECT_TRUE(all4.contains(addr("255.255.255.255")));
  Cidr all6 = cidr("::/0");
  EXPECT_TRUE(all6.contains(addr("::")));
  EXPECT_TRUE(all6.contains(addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
}

TEST(CidrTest, FamilyMismatchNeverMatches) {
  EXPECT_FALSE(cidr("0.0.0.0/0").contains(addr("::")));
  EXPECT_FALSE(cidr("::/0").contains(addr("0.0.0.0")));
  EXPECT_FALSE(cidr("::ffff:0:0/96").contains(addr("10.0.0.1")));
  EXPECT_FALSE(cidr("10.0.0.0/8").contains(addr("::ffff:10.0.0.1")));
  EXPECT_FALSE(cidr("::/0").covers(cidr("10.0.0.0/8")));
  EXPECT_FALSE(cidr("0.0.0.0/0").covers(cidr("::/128")));
}

TEST(CidrTest, Covers) {
  Cidr ten = cidr("10.0.0.0/8");
  EXPECT_TRUE(ten.covers(ten));
  EXPECT_TRUE(ten.covers(cidr("10.0.0.0/9")));
  EXPECT_TRUE(ten.covers(cidr("10.128.0.0/9")));
  EXPECT_TRUE(ten.covers(cidr("10.255.255.255/32")));
  EXPECT_FALSE(ten.covers(cidr("10.0.0.0/7")));  // wider, though same base
  EXPECT_FALSE(ten.covers(cidr("11.0.0.0/8")));
  EXPECT_FALSE(ten.covers(cidr("0.0.0.0/0")));
  EXPECT_TRUE(cidr("0.0.0.0/0").covers(ten));
  EXPECT_TRUE(cidr("2001::/23").covers(cidr("2001::/32")));
  EXPECT_TRUE(cidr("2001::/23").covers(cidr("2001:1ff::/32")));
  EXPECT_FALSE(cidr("2001::/23").covers(cidr("2001:200::/32")));
  EXPECT_FALSE(cidr("2001::/23").covers(cidr("2001:db8::/32")));
  EXPECT_TRUE(cidr("fc00::/7").covers(cidr("fd00:ec2::254/128")));
}

// --- Endpoint -----------------------------------------------------------

TEST(EndpointTest, ParsesAllForms) {
  auto e = Endpoint::parse("192.0.2.1:53", 853);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->address, addr("192.0.2.1"));
  EXPECT_EQ(e->port, 53);

  EXPECT_EQ(Endpoint::parse("192.0.2.1", 853), (Endpoint{addr("192.0.2.1"), 853}));
  EXPECT_EQ(Endpoint::parse("[2001:db8::1]:53", 853), (Endpoint{addr("2001:db8::1"), 53}));
  EXPECT_EQ(Endpoint::parse("[::1]:53", 853), (Endpoint{addr("::1"), 53}));
  EXPECT_EQ(Endpoint::parse("[::1]", 853), (Endpoint{addr("::1"), 853}));
  EXPECT_EQ(Endpoint::parse("[::ffff:192.0.2.1]:53", 1), (Endpoint{addr("::ffff:192.0.2.1"), 53}));
  EXPECT_EQ(Endpoint::parse("::1", 853), (Endpoint{addr("::1"), 853}));
  // Unbracketed, the last group belongs to the address.
  EXPECT_EQ(Endpoint::parse("2001:db8::1:53", 853), (Endpoint{addr("2001:db8::1:53"), 853}));
  EXPECT_EQ(Endpoint::parse("1.2.3.4:1", 0), (Endpoint{addr("1.2.3.4"), 1}));
  EXPECT_EQ(Endpoint::parse("1.2.3.4:65535", 0), (Endpoint{addr("1.2.3.4"), 65535}));
}

// Where a listener binds: the port is required and 0 lets the kernel pick
// one (abox broker --listen, abox-net dns --listen).
TEST(EndpointTest, AListenerMayAskForPortZero) {
  EXPECT_EQ(Endpoint::parse_listen("127.0.0.1:0"), (Endpoint{addr("127.0.0.1"), 0}));
  EXPECT_EQ(Endpoint::parse_listen("[::1]:0"), (Endpoint{addr("::1"), 0}));
  EXPECT_EQ(Endpoint::parse_listen("0.0.0.0:0"), (Endpoint{addr("0.0.0.0"), 0}));
  EXPECT_EQ(Endpoint::parse_listen("127.0.0.1:443"), (Endpoint{addr("127.0.0.1"), 443}));
  EXPECT_EQ(Endpoint::parse_listen("[2001:db8::1]:8443"), (Endpoint{addr("2001:db8::1"), 8443}));
  for (std::string_view bad : {"127.0.0.1", "[::1]", "::1", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:5:0",
                               "[::1]:", "host:0", ":0", "1.2.3.4:00"}) {
    EXPECT_FALSE(Endpoint::parse_listen(bad)) << bad;
  }
  // A destination still may not.
  EXPECT_FALSE(Endpoint::parse("127.0.0.1:0", 53));
}

TEST(EndpointTest, RefusesBadText) {
  for (std::string_view bad : {
           "",
           ":53",
           "1.2.3.4:",
           "1.2.3.4:0",
           "1.2.3.4:65536",
           "1.2.3.4:99999",
           "1.2.3.4:100000",
           "1.2.3.4:053",
           "1.2.3.4:+53",
           "1.2.3.4:-1",
           "1.2.3.4:5 3",
           "1.2.3.4: 53",
           "1.2.3.4:53 ",
           " 1.2.3.4:53",
           "1.2.3.4:http",
           "1.2.3.4::53",
           "01.2.3.4:53",
           "[1.2.3.4]:53",  // brackets are for IPv6
           "[1.2.3.4]",
           "[::1]:",
           "[::1]53",
           "[::1]:0",
           "[::1]:65536",
           "[::1",
           "::1]:53",
           "[]:53",
           "[[::1]]:53",
           "[::1]:53]",
           "[fe80::1%eth0]:53",
           "[ ::1]:53",
           "example.com:53",
           "localhost",
       }) {
    EXPECT_FALSE(Endpoint::parse(bad, 53)) << '"' << bad << '"';
  }
}

TEST(EndpointTest, ToStringBracketsIpv6) {
  EXPECT_EQ((Endpoint{addr("192.0.2.1"), 53}).to_string(), "192.0.2.1:53");
  EXPECT_EQ((Endpoint{addr("2001:db8::1"), 853}).to_string(), "[2001:db8::1]:853");
  EXPECT_EQ((Endpoint{addr("::ffff:192.0.2.1"), 65535}).to_string(), "[::ffff:192.0.2.1]:65535");
  for (std::string_view text : {"192.0.2.1:53", "[2001:db8::1]:853", "[::]:1"}) {
    auto e = Endpoint::parse(text, 0);
    ASSERT_TRUE(e) << text;
    EXPECT_EQ(e->to_string(), text);
  }
}

}  // namespace
}  // namespace abox::policy
