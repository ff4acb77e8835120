// Echo messages (echo_message.h): the guest's requests read with every
// nasty case (short, wrong type or code, wrong checksum for either family),
// a ping socket's replies (a reply for an id nobody asked for, truncated,
// odd types), and the frames written to the guest, read back with
// GuestFrame::parse() and their checksums summed again independently.
#include "netstack/stack/echo_message.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "netstack/stack/guest_frame.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;

const policy::IpAddress kGuest4 = policy::IpAddress::v4(0x0A00'020F);
const policy::IpAddress kRemote4 = policy::IpAddress::v4(0x5DB8'D822);  // 93.184.216.34
const policy::IpAddress kGuest6 = *policy::IpAddress::parse("fd00:1::15");
const policy::IpAddress kRemote6 = *policy::IpAddress::parse("2001:db8::1");
const GuestLink kLink{{0x52, 0x55, 0x0a, 0, 2, 2}, {0x02, 0, 0, 0, 0, 0x15}};

// An ICMP(v6) echo message with its checksum right (ICMPv6: over the
// pseudo-header of src → dst).
Bytes echo(std::uint8_t type, std::uint16_t id, std::uint16_t seq, const Bytes& payload,
           const policy::IpAddress& src = kGuest4, const policy::IpAddress& dst = kRemote4) {
  Bytes m = {type,
             0,
             0,
             0,
             static_cast<std::uint8_t>(id >> 8),
             static_cast<std::uint8_t>(id),
             static_cast<std::uint8_t>(seq >> 8),
             static_cast<std::uint8_t>(seq)};
  m.reserve(m.size() + payload.size());  // GCC 12 -O3 warns on the insert's growth otherwise
  m.insert(m.end(), payload.begin(), payload.end());
  std::uint32_t sum = 0;
  if (dst.is_v6()) {
    sum = sum16(src.bytes());
    sum = sum16(dst.bytes(), sum);
    sum += static_cast<std::uint32_t>(m.size());
    sum += 58;
  }
  const std::uint16_t c = fold_checksum(sum16(m, sum));
  m[2] = static_cast<std::uint8_t>(c >> 8);
  m[3] = static_cast<std::uint8_t>(c);
  return m;
}

TEST(EchoMessageTest, ReadsAGuestRequestOfEitherFamily) {
  const Bytes payload = {1, 2, 3, 4, 5};
  const Bytes v4 = echo(8, 0x1234, 7, payload);
  auto r = parse_echo_request(v4, kGuest4, kRemote4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id, 0x1234);
  EXPECT_EQ(r->sequence, 7);
  EXPECT_EQ(Bytes(r->payload.begin(), r->payload.end()), payload);

  const Bytes v6 = echo(128, 9, 65535, payload, kGuest6, kRemote6);
  auto r6 = parse_echo_request(v6, kGuest6, kRemote6);
  ASSERT_TRUE(r6.ok());
  EXPECT_EQ(r6->id, 9);
  EXPECT_EQ(r6->sequence, 65535);
  // An empty payload is an echo too.
  EXPECT_TRUE(parse_echo_request(echo(8, 1, 1, {}), kGuest4, kRemote4).ok());
}

TEST(EchoMessageTest, RefusesNastyRequests) {
  const Bytes good = echo(8, 1, 1, {9, 9});
  for (std::size_t n = 0; n < 8; ++n) {
    const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = parse_echo_request(cut, kGuest4, kRemote4);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.error(), EchoRefusal::short_message) << n;
  }
  Bytes bad_sum = good;
  bad_sum[9] ^= 1;
  EXPECT_EQ(parse_echo_request(bad_sum, kGuest4, kRemote4).error(), EchoRefusal::checksum);
  EXPECT_EQ(parse_echo_request(echo(0, 1, 1, {}), kGuest4, kRemote4).error(), EchoRefusal::wrong_type);
  EXPECT_EQ(parse_echo_request(echo(13, 1, 1, {}), kGuest4, kRemote4).error(), EchoRefusal::wrong_type);
  Bytes code = echo(8, 1, 1, {});
  code[1] = 1;
  EXPECT_EQ(parse_echo_request(code, kGuest4, kRemote4).error(), EchoRefusal::wrong_code);
  // An IPv4 type in an ICMPv6 packet, and the other way round.
  EXPECT_EQ(parse_echo_request(echo(8, 1, 1, {}, kGuest6, kRemote6), kGuest6, kRemote6).error(),
            EchoRefusal::wrong_type);
  EXPECT_EQ(parse_echo_request(echo(128, 1, 1, {}), kGuest4, kRemote4).error(), EchoRefusal::wrong_type);
  // ICMPv6's checksum covers the addresses: the same message from another
  // source does not add up.
  const Bytes v6 = echo(128, 1, 1, {1}, kGuest6, kRemote6);
  EXPECT_EQ(parse_echo_request(v6, *policy::IpAddress::parse("fd00:1::16"), kRemote6).error(),
            EchoRefusal::checksum);
  // An IPv4 checksum in an ICMPv6 message (no pseudo-header) is wrong.
  Bytes no_pseudo = echo(128, 1, 1, {1});
  EXPECT_EQ(parse_echo_request(no_pseudo, kGuest6, kRemote6).error(), EchoRefusal::checksum);
}

TEST(EchoMessageTest, TakesOnlyTheSocketsOwnReplies) {
  const Bytes reply = echo(0, 4242, 3, {7, 7, 7});
  auto r = parse_echo_reply(reply, false, 4242);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sequence, 3);
  EXPECT_EQ(r->payload.size(), 3u);
  // An id nobody asked for.
  EXPECT_EQ(parse_echo_reply(reply, false, 4243).error(), EchoRefusal::wrong_id);
  // The id not known yet: any.
  EXPECT_TRUE(parse_echo_reply(reply, false, 0).ok());
  // Truncated, odd types and codes.
  for (std::size_t n = 0; n < 8; ++n) {
    EXPECT_EQ(
        parse_echo_reply(Bytes(reply.begin(), reply.begin() + static_cast<std::ptrdiff_t>(n)), false, 4242)
            .error(),
        EchoRefusal::short_message);
  }
  EXPECT_EQ(parse_echo_reply(echo(8, 4242, 3, {}), false, 4242).error(), EchoRefusal::wrong_type);
  EXPECT_EQ(parse_echo_reply(echo(3, 4242, 3, {}), false, 4242).error(), EchoRefusal::wrong_type);
  EXPECT_EQ(parse_echo_reply(reply, true, 4242).error(), EchoRefusal::wrong_type);
  EXPECT_TRUE(parse_echo_reply(echo(129, 5, 3, {}, kRemote6, kGuest6), true, 5).ok());
  Bytes code = reply;
  code[1] = 2;
  EXPECT_EQ(parse_echo_reply(code, false, 4242).error(), EchoRefusal::wrong_code);
}

TEST(EchoMessageTest, RequestsForThePingSocketLeaveIdAndChecksumToTheKernel) {
  const Bytes m = echo_request_message(false, 0x0102, Bytes{5, 6});
  EXPECT_EQ(m, (Bytes{8, 0, 0, 0, 0, 0, 1, 2, 5, 6}));
  EXPECT_EQ(echo_request_message(true, 1, {}).front(), 128);
}

TEST(EchoMessageTest, ReplyFramesCarryTheGuestsIdAndSequenceWithChecksumsRight) {
  const Bytes payload(56, 0xAB);
  const Bytes f4 = echo_reply_frame(kLink, kRemote4, kGuest4, 0x1234, 42, payload);
  auto v4 = GuestFrame::parse(f4);  // checks the IPv4 header checksum
  ASSERT_TRUE(v4.ok());
  ASSERT_TRUE(v4->is_ipv4());
  EXPECT_EQ(Bytes(f4.begin(), f4.begin() + 6), Bytes(kLink.guest_mac.begin(), kLink.guest_mac.end()));
  EXPECT_EQ(v4->ipv4().protocol, 1);
  const auto m4 = v4->ipv4().payload;
  EXPECT_EQ(fold_checksum(sum16(m4)), 0);  // the ICMP checksum adds up
  auto back4 = parse_echo_reply(m4, false, 0x1234);
  ASSERT_TRUE(back4.ok());
  EXPECT_EQ(back4->sequence, 42);
  EXPECT_EQ(Bytes(back4->payload.begin(), back4->payload.end()), payload);

  const Bytes f6 = echo_reply_frame(kLink, kRemote6, kGuest6, 7, 1, payload);
  auto v6 = GuestFrame::parse(f6);
  ASSERT_TRUE(v6.ok());
  ASSERT_TRUE(v6->is_ipv6());
  EXPECT_EQ(v6->ipv6().icmp_type, 129);
  EXPECT_EQ(policy::IpAddress::v6(v6->ipv6().source), kRemote6);
  const auto m6 = v6->ipv6().upper_layer;
  std::uint32_t pseudo = sum16(kRemote6.bytes());
  pseudo = sum16(kGuest6.bytes(), pseudo);
  pseudo += static_cast<std::uint32_t>(m6.size()) + 58;
  EXPECT_EQ(fold_checksum(sum16(m6, pseudo)), 0);
  auto back6 = parse_echo_reply(m6, true, 7);
  ASSERT_TRUE(back6.ok());
  EXPECT_EQ(back6->payload.size(), payload.size());
}

TEST(EchoMessageTest, ProhibitedErrorsQuoteTheRefusedPacket) {
  // An IPv4 packet: a 20-byte header and a 64-byte echo.
  Bytes packet = {0x45, 0, 0, 84, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 2, 15, 93, 184, 216, 34};
  const Bytes request = echo(8, 1, 1, Bytes(56, 1));
  packet.insert(packet.end(), request.begin(), request.end());
  const policy::IpAddress gateway = policy::IpAddress::v4(0x0A00'0202);
  const Bytes f4 = prohibited_frame(kLink, gateway, kGuest4, packet);
  auto v4 = GuestFrame::parse(f4);
  ASSERT_TRUE(v4.ok());
  const auto m4 = v4->ipv4().payload;
  ASSERT_EQ(m4.size(), 8u + 28u);  // header and 8 bytes quoted
  EXPECT_EQ(m4[0], 3);
  EXPECT_EQ(m4[1], 13);
  EXPECT_EQ(fold_checksum(sum16(m4)), 0);
  EXPECT_EQ(Bytes(m4.begin() + 8, m4.end()), Bytes(packet.begin(), packet.begin() + 28));
  // A packet shorter than its header says: quoted as it is, never past it.
  const Bytes cut(packet.begin(), packet.begin() + 10);
  EXPECT_EQ(GuestFrame::parse(prohibited_frame(kLink, gateway, kGuest4, cut))->ipv4().payload.size(), 18u);

  // IPv6: as much as fits in 1280 bytes.
  Bytes big6(2000, 0x60);
  const Bytes f6 = prohibited_frame(kLink, *policy::IpAddress::parse("fd00:1::1"), kGuest6, big6);
  EXPECT_EQ(f6.size(), 14u + 1280u);
  auto v6 = GuestFrame::parse(f6);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->ipv6().icmp_type, 1);
  EXPECT_EQ(v6->ipv6().icmp_code, 1);
}

}  // namespace
}  // namespace abox::netstack
