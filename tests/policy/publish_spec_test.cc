#include "policy/publish_spec.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace abox::policy {
namespace {

PublishSpec ok(std::string_view text) {
  auto r = parse_publish_spec(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : describe(r.error()));
  return r.ok() ? *r : PublishSpec{};
}

PublishError err(std::string_view text) {
  auto r = parse_publish_spec(text);
  EXPECT_FALSE(r.ok()) << text << " parsed as " << (r.ok() ? r->to_string() : "");
  return r.ok() ? PublishError::empty : r.error();
}

TEST(PublishSpecTest, PortsAloneListenOnLoopbackOnly) {
  const PublishSpec s = ok("8080:80");
  EXPECT_EQ(s.host_address.to_string(), "127.0.0.1");
  EXPECT_EQ(s.host_port, 8080);
  EXPECT_EQ(s.guest_port, 80);
  EXPECT_EQ(s.protocol, PublishSpec::Protocol::tcp);
  EXPECT_EQ(s.to_string(), "127.0.0.1:8080:80");
}

TEST(PublishSpecTest, AddressesAndProtocols) {
  EXPECT_EQ(ok("192.0.2.7:1:65535").to_string(), "192.0.2.7:1:65535");
  EXPECT_EQ(ok("[::1]:5353:53/udp").to_string(), "[::1]:5353:53/udp");
  EXPECT_EQ(ok("8080:80/tcp").to_string(), "127.0.0.1:8080:80");
  EXPECT_EQ(ok("5353:53/udp").protocol, PublishSpec::Protocol::udp);
  // The wildcard only when spelled out.
  EXPECT_EQ(ok("0.0.0.0:8080:80").host_address, IpAddress{});
  EXPECT_EQ(ok("[::]:8080:80").host_endpoint(), "[::]:8080");
}

TEST(PublishSpecTest, PortZeroAndPastTheRangeAreRefused) {
  EXPECT_EQ(err("0:80"), PublishError::bad_host_port);
  EXPECT_EQ(err("8080:0"), PublishError::bad_guest_port);
  EXPECT_EQ(err("65536:80"), PublishError::bad_host_port);
  EXPECT_EQ(err("8080:65536"), PublishError::bad_guest_port);
  EXPECT_EQ(err("8080:4294967377"), PublishError::bad_guest_port);  // 2^32 + 81 must not wrap to 81
  EXPECT_EQ(err("8080:-1"), PublishError::bad_guest_port);
  EXPECT_EQ(err("+8080:80"), PublishError::bad_host_port);
  EXPECT_EQ(err("08080:80"), PublishError::bad_host_port);
  EXPECT_EQ(err("8080:0x50"), PublishError::bad_guest_port);
  EXPECT_EQ(err(" 8080:80"), PublishError::bad_host_port);
  EXPECT_EQ(err("8080:80 "), PublishError::bad_guest_port);
}

TEST(PublishSpecTest, EmptyPartsAreRefused) {
  EXPECT_EQ(err(""), PublishError::empty);
  EXPECT_EQ(err("8080"), PublishError::empty);
  EXPECT_EQ(err(":80"), PublishError::empty);
  EXPECT_EQ(err("8080:"), PublishError::empty);
  EXPECT_EQ(err(":"), PublishError::empty);
  EXPECT_EQ(err("::"), PublishError::empty);
  EXPECT_EQ(err("127.0.0.1::80"), PublishError::empty);
  EXPECT_EQ(err(":8080:80"), PublishError::empty);
  EXPECT_EQ(err("8080:80/"), PublishError::bad_protocol);
  EXPECT_EQ(err("/udp"), PublishError::empty);
}

TEST(PublishSpecTest, BadAddressesAndShapesAreRefused) {
  EXPECT_EQ(err("localhost:8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("256.0.0.1:8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("127.0.0.01:8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("[127.0.0.1]:8080:80"), PublishError::bad_address);  // brackets are for IPv6
  EXPECT_EQ(err("[::1:8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("[::1]8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("[::1]:"), PublishError::empty);
  EXPECT_EQ(err("[]:8080:80"), PublishError::bad_address);
  EXPECT_EQ(err("::1:8080:80"), PublishError::too_many_parts);  // IPv6 must be bracketed
  EXPECT_EQ(err("1.2.3.4:1:2:3"), PublishError::too_many_parts);
  EXPECT_EQ(err("[::1]:1:2:3"), PublishError::too_many_parts);
  EXPECT_EQ(err("[::1]:1.2.3.4:1:2"), PublishError::too_many_parts);
  EXPECT_EQ(err("8080:80/sctp"), PublishError::bad_protocol);
  EXPECT_EQ(err("8080:80/UDP"), PublishError::bad_protocol);
  EXPECT_EQ(err("8080:80/udp/udp"), PublishError::bad_protocol);
  EXPECT_EQ(err(std::string_view("8080:8\0", 7)), PublishError::bad_guest_port);
}

TEST(PublishSpecTest, ClashesAreFoundInAList) {
  auto list = [](std::initializer_list<std::string_view> texts) {
    std::vector<PublishSpec> v;
    for (auto t : texts) v.push_back(ok(t));
    return v;
  };
  EXPECT_EQ(first_publish_clash(list({"8080:80", "8081:80", "8080:80/udp"})), -1);
  EXPECT_EQ(first_publish_clash(list({"8080:80", "8081:81", "8080:81"})), 2);
  EXPECT_EQ(first_publish_clash(list({"127.0.0.1:8080:80", "127.0.0.2:8080:80"})), -1);
  EXPECT_EQ(first_publish_clash(list({"127.0.0.1:8080:80", "0.0.0.0:8080:81"})), 1);
  EXPECT_EQ(first_publish_clash(list({"[::]:8080:80", "127.0.0.1:8080:81"})), 1);
  EXPECT_EQ(first_publish_clash(list({"5353:53/udp", "5353:54/udp"})), 1);
  EXPECT_EQ(first_publish_clash({}), -1);
}

}  // namespace
}  // namespace abox::policy
