// The self-test's targets: ADDR:PORT and the nonce's shape.
#include "guest/box_guest/probe_target.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

namespace abox::guest {
namespace {

TEST(ProbeTarget, Ipv4AndIpv6AddressesWithPorts) {
  auto v4 = parse_address_port("93.184.215.18:80");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->family, AF_INET);
  const auto* sin = reinterpret_cast<const sockaddr_in*>(&v4->storage);
  EXPECT_EQ(ntohs(sin->sin_port), 80);
  EXPECT_EQ(ntohl(sin->sin_addr.s_addr), 0x5DB8'D712u);
  auto v6 = parse_address_port("[2001:db8::1]:53");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->family, AF_INET6);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in6*>(&v6->storage)->sin6_port), 53);
  EXPECT_TRUE(parse_address_port("1.2.3.4:65535"));
}

TEST(ProbeTarget, AnythingElseIsRefused) {
  for (std::string_view bad : std::initializer_list<std::string_view>{
           "", ":", "1.2.3.4", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4:+80", "1.2.3.4:8 0",
           "1.2.3.4:080000", "host.test:80", "1.2.3:80", "2001:db8::1:53", "[2001:db8::1]53",
           "[2001:db8::1]:", "[1.2.3.4]:80", "[2001:db8::1", " 1.2.3.4:80",
           std::string_view("1.2.3.4\0:80", 11)})
    EXPECT_FALSE(parse_address_port(bad)) << std::string(bad);
}

TEST(ProbeTarget, NonceShape) {
  const std::string hex(64, 'a');
  EXPECT_TRUE(is_abox_nonce("abox-nonce-" + hex));
  EXPECT_TRUE(is_abox_nonce("abox-nonce-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(is_abox_nonce("abox-nonce-" + std::string(63, 'a')));
  EXPECT_FALSE(is_abox_nonce("abox-nonce-" + hex + "0"));
  EXPECT_FALSE(is_abox_nonce("abox-nonce-" + std::string(64, 'A'))) << "the broker's nonces are lower-case";
  EXPECT_FALSE(is_abox_nonce("ABOX-NONCE-" + hex));
  EXPECT_FALSE(is_abox_nonce("abox-nonce-" + std::string(63, 'a') + "g"));
  EXPECT_FALSE(is_abox_nonce("sk-" + hex));
  EXPECT_FALSE(is_abox_nonce(""));
}

}  // namespace
}  // namespace abox::guest
