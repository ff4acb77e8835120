// Dhcpv6Server: an Information-Request gets a unicast Reply from fe80::1
// naming the DNS gate's address (read back through GuestFrame, its UDP
// checksum checked); Solicit, Request and what the server must discard get
// nothing (ignored), a bad checksum or a refused parse nothing (malformed);
// answers are bounded by the token bucket.
#include "netstack/gateway/dhcpv6_server.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

#include "netstack/gateway/dhcpv6_message.h"
#include "tests/netstack/gateway/dhcpv6_wire.h"

namespace abox::netstack {
namespace {

using namespace dhcpv6_wire;  // NOLINT(google-build-using-namespace): the builders are this test's vocabulary

constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};
constexpr std::array<std::uint8_t, 6> kGuestMac = {0x02, 0x02, 0x02, 0x02, 0x02, 0x02};  // ipv6_frame's
constexpr Address kGatewayLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kGatewayGlobal = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kGuestUla = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x15};

class Dhcpv6ServerTest : public ::testing::Test {
 protected:
  Dhcpv6ServerTest() : server_({kGatewayMac, kGatewayLinkLocal, kGatewayGlobal}) {}

  Dhcpv6Result handle(const Bytes& f) {
    frame_ = f;
    const auto v = GuestFrame::parse(frame_);
    EXPECT_TRUE(v.ok());
    if (!v.ok()) return {};
    view_.emplace(*v);
    EXPECT_TRUE(Dhcpv6Server::is_for_server(*view_));
    return server_.handle(frame_, *view_, now_);
  }

  Dhcpv6Server server_;
  Bytes frame_;
  std::optional<GuestFrame> view_;
  base::MonoTime now_{std::chrono::seconds(100)};
};

TEST_F(Dhcpv6ServerTest, AnInformationRequestGetsAReplyNamingTheDnsServer) {
  const Dhcpv6Result r = handle(frame(information_request()));
  ASSERT_EQ(r.outcome, Dhcpv6Outcome::reply);
  const Bytes reply(r.reply.begin(), r.reply.end());
  EXPECT_TRUE(std::equal(kGuestMac.begin(), kGuestMac.end(), reply.begin()));
  EXPECT_TRUE(std::equal(kGatewayMac.begin(), kGatewayMac.end(), reply.begin() + 6));
  const auto v = GuestFrame::parse(reply);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->is_ipv6() && v->is_udp());
  EXPECT_EQ(v->ipv6().source, kGatewayLinkLocal);
  EXPECT_EQ(v->ipv6().destination, ipv6_wire::kLinkLocal);
  EXPECT_EQ(v->transport().source_port, 547);
  EXPECT_EQ(v->transport().destination_port, 546);
  // The UDP checksum, over the pseudo-header, sums to 0.
  std::uint32_t sum = sum16(v->ipv6().source);
  sum = sum16(v->ipv6().destination, sum);
  sum += static_cast<std::uint32_t>(v->ipv6().upper_layer.size()) + ipv6_wire::kUdp;
  EXPECT_EQ(fold_checksum(sum16(v->ipv6().upper_layer, sum)), 0);
  Bytes expected;
  const auto duid = dhcpv6_duid_ll(kGatewayMac);
  write_dhcpv6_reply(expected, 0xABCDEF, duid, kClientDuid, kGatewayGlobal);
  const auto payload = v->transport().udp_payload;
  EXPECT_EQ(Bytes(payload.begin(), payload.end()), expected);
  EXPECT_EQ(server_.counters().answered, 1u);
  // Naming this server's DUID is fine too.
  EXPECT_EQ(handle(frame(message(11, {option(2, Bytes(duid.begin(), duid.end()))}))).outcome,
            Dhcpv6Outcome::reply);
}

TEST_F(Dhcpv6ServerTest, EverythingButAnInformationRequestIsIgnored) {
  const Bytes id = option(1, kClientDuid);
  for (const int t : {1, 3, 4, 5, 6, 8, 9})
    EXPECT_EQ(handle(frame(message(static_cast<std::uint8_t>(t), {id}))).outcome, Dhcpv6Outcome::ignored)
        << t;
  // RFC 8415 section 16.12: with an IA, or for another server: discarded.
  EXPECT_EQ(handle(frame(message(11, {id, option(3, Bytes(12, 0))}))).outcome, Dhcpv6Outcome::ignored);
  EXPECT_EQ(handle(frame(message(11, {id, option(2, kClientDuid)}))).outcome, Dhcpv6Outcome::ignored);
  // From the guest's ULA rather than its link-local address.
  EXPECT_EQ(handle(frame(information_request(), kGuestUla)).outcome, Dhcpv6Outcome::ignored);
  EXPECT_EQ(server_.counters().ignored, 10u);
  EXPECT_EQ(server_.counters().answered, 0u);
}

TEST_F(Dhcpv6ServerTest, BadChecksumsAndRefusedParsesAreMalformed) {
  Bytes f = frame(information_request());
  f[ipv6_wire::kIp + 40 + 7] ^= 1;
  EXPECT_EQ(handle(f).outcome, Dhcpv6Outcome::malformed);
  Bytes zero = frame(information_request());
  zero[ipv6_wire::kIp + 40 + 6] = 0;
  zero[ipv6_wire::kIp + 40 + 7] = 0;  // "no checksum": not in IPv6
  EXPECT_EQ(handle(zero).outcome, Dhcpv6Outcome::malformed);
  EXPECT_EQ(handle(frame(message(11, {option(1, {})}))).outcome, Dhcpv6Outcome::malformed);
  EXPECT_EQ(handle(frame(message(7, {}))).outcome, Dhcpv6Outcome::malformed);  // a Reply from the guest
  EXPECT_EQ(handle(frame({11, 0})).outcome, Dhcpv6Outcome::malformed);
  EXPECT_EQ(server_.counters().malformed, 5u);
  EXPECT_EQ(server_.counters().answered, 0u);
  // A link that vouches for the checksum (a tap's guest kernel leaves it
  // partial): not checked.
  Bytes partial = frame(information_request());
  partial[ipv6_wire::kIp + 40 + 7] ^= 1;
  frame_ = partial;
  const auto v = GuestFrame::parse(frame_);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(server_.handle(frame_, *v, now_, true).outcome, Dhcpv6Outcome::reply);
}

TEST_F(Dhcpv6ServerTest, AnswersAreRateLimited) {
  const Bytes f = frame(information_request());
  for (unsigned i = 0; i < Dhcpv6Server::kBurst + 10; ++i) (void)handle(f);
  EXPECT_EQ(server_.counters().answered, Dhcpv6Server::kBurst);
  EXPECT_EQ(server_.counters().rate_limited, 10u);
  now_ += std::chrono::seconds(1);
  EXPECT_EQ(handle(f).outcome, Dhcpv6Outcome::reply);
}

TEST_F(Dhcpv6ServerTest, OnlyUdpFrom546ToTheServersAddressPort547IsForTheServer) {
  const auto is_for = [](const Bytes& f) {
    const auto v = GuestFrame::parse(f);
    return v.ok() && Dhcpv6Server::is_for_server(*v);
  };
  EXPECT_TRUE(is_for(frame(information_request())));
  EXPECT_FALSE(is_for(frame(information_request(), ipv6_wire::kLinkLocal, kGatewayLinkLocal)));
  EXPECT_FALSE(is_for(frame(information_request(), ipv6_wire::kLinkLocal, kAllServers, 5000)));
  EXPECT_FALSE(is_for(frame(information_request(), ipv6_wire::kLinkLocal, kAllServers, 546, 548)));
}

}  // namespace
}  // namespace abox::netstack
