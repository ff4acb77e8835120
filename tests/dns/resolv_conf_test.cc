#include "dns/resolv_conf.h"

#include <gtest/gtest.h>

namespace abox::dns {
namespace {

TEST(ResolvConf, ReadsNameserversInOrder) {
  auto eps = parse_resolv_conf(
      "# comment\n"
      "search example.org\n"
      "nameserver 127.0.0.53\n"
      "  nameserver\t192.0.2.1   # trailing comment\n"
      "nameserver 2001:db8::1\n"
      "nameserver fe80::1%eth0\n"
      "nameserver 127.0.0.53\n"
      "nameservers 192.0.2.9\n"
      "nameserver not-an-address\n"
      "options edns0\n"
      "nameserver 192.0.2.2");
  ASSERT_EQ(eps.size(), 4u);
  EXPECT_EQ(eps[0].to_string(), "127.0.0.53:53");
  EXPECT_EQ(eps[1].to_string(), "192.0.2.1:53");
  EXPECT_EQ(eps[2].to_string(), "[2001:db8::1]:53");
  EXPECT_EQ(eps[3].to_string(), "192.0.2.2:53");
}

TEST(ResolvConf, EmptyAndMissing) {
  EXPECT_TRUE(parse_resolv_conf("").empty());
  EXPECT_TRUE(parse_resolv_conf("\n\n;\n").empty());
  EXPECT_TRUE(read_resolv_conf("/nonexistent/resolv.conf").empty());
}

}  // namespace
}  // namespace abox::dns
