// DhcpServer and parse_dhcp_client_message: the answers (what each client
// message gets, with which options, to which address) and the nasty cases
// (every malformed shape is dropped and counted, never answered, never read
// past its end: the ASan build checks that).
#include "netstack/gateway/dhcp_server.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "netstack/gateway/dhcp_message.h"
#include "netstack/stack/guest_frame.h"
#include "tests/support/alloc_counter.h"
#include "tests/support/big_endian.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Mac = std::array<std::uint8_t, 6>;

constexpr std::uint32_t kGateway = 0x0A00'0202;  // 10.0.2.2
constexpr std::uint32_t kGuest = 0x0A00'020F;    // 10.0.2.15
constexpr std::uint32_t kBroadcast = 0xFFFF'FFFF;
constexpr Mac kGatewayMac = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
constexpr Mac kGuestMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x15};
constexpr Mac kAllOnes = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

DhcpServerConfig config() {
  DhcpServerConfig c;
  c.gateway = kGateway;
  c.guest = kGuest;
  c.prefix_len = 24;
  c.gateway_mac = kGatewayMac;
  c.mtu = 65520;
  return c;
}

using abox::testing::get16;
using abox::testing::get32;
using abox::testing::put16;
using abox::testing::put32;
std::uint16_t checksum(const Bytes& b, std::size_t from, std::size_t n, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += get16(b, from + i);
  if (n % 2 != 0) sum += static_cast<std::uint32_t>(b.at(from + n - 1) << 8);
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// A BOOTP request, built field by field so that each test can break one.
struct Message {
  std::uint8_t op = 1;
  std::uint8_t htype = 1;
  std::uint8_t hlen = 6;
  std::uint32_t xid = 0x1234'5678;
  std::uint16_t flags = 0;
  std::uint32_t ciaddr = 0;
  std::uint32_t giaddr = 0;
  Mac chaddr = kGuestMac;
  std::uint32_t cookie = 0x6382'5363;
  Bytes options;  // everything after the cookie, as is
};
Bytes options(std::uint8_t type, std::optional<std::uint32_t> requested = std::nullopt,
              std::optional<std::uint32_t> server = std::nullopt) {
  Bytes o = {53, 1, type};
  // What udhcpc sends too: client id, max size, parameter list, vendor class.
  Bytes extra = {61, 7,  1,  2,  0,  0,  0,   0,   0x15, 57,  2,   0x02, 0x40, 55,  7,   1,   3,   6,
                 12, 15, 28, 26, 60, 12, 'u', 'd', 'h',  'c', 'p', ' ',  '1',  '.', '3', '6', '.', '1'};
  o.insert(o.end(), extra.begin(), extra.end());
  if (requested) {
    o.insert(o.end(), {50, 4});
    put32(o, *requested);
  }
  if (server) {
    o.insert(o.end(), {54, 4});
    put32(o, *server);
  }
  o.push_back(255);
  return o;
}
Bytes bootp(const Message& m) {
  Bytes b = {m.op, m.htype, m.hlen, 0};
  put32(b, m.xid);
  put16(b, 0);
  put16(b, m.flags);
  put32(b, m.ciaddr);
  put32(b, 0);
  put32(b, 0);
  put32(b, m.giaddr);
  b.insert(b.end(), m.chaddr.begin(), m.chaddr.end());
  b.resize(b.size() + 10 + 64 + 128, 0);
  put32(b, m.cookie);
  b.insert(b.end(), m.options.begin(), m.options.end());
  return b;
}
// Ethernet + IPv4 + UDP around a payload, checksums right.
Bytes udp_frame(const Bytes& payload, std::uint16_t dport = 67, std::uint32_t src = 0,
                std::uint32_t dst = kBroadcast, std::uint8_t proto = 17) {
  Bytes f(kAllOnes.begin(), kAllOnes.end());
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  put16(f, 0x0800);
  const std::size_t ip = f.size();
  f.insert(f.end(), {0x45, 0});
  put16(f, static_cast<std::uint16_t>(20 + 8 + payload.size()));
  put32(f, 0);
  f.insert(f.end(), {64, proto, 0, 0});
  put32(f, src);
  put32(f, dst);
  const std::uint16_t sum = checksum(f, ip, 20);
  f[ip + 10] = static_cast<std::uint8_t>(sum >> 8);
  f[ip + 11] = static_cast<std::uint8_t>(sum);
  put16(f, 68);
  put16(f, dport);
  put16(f, static_cast<std::uint16_t>(8 + payload.size()));
  put16(f, 0);  // no UDP checksum, as IPv4 allows
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}
Bytes dhcp_frame(const Message& m) {
  return udp_frame(bootp(m));
}
Message msg(std::uint8_t type, std::optional<std::uint32_t> requested = std::nullopt,
            std::optional<std::uint32_t> server = std::nullopt) {
  Message m;
  m.options = options(type, requested, server);
  return m;
}

// What the stack does with a guest frame (guest_stack.cc, take_frame()):
// the one validated view, and a datagram to UDP port 67 goes to the server
// as its payload. nullopt: the view refused the frame, or it is not UDP to
// port 67 (not the server's).
std::optional<std::span<const std::uint8_t>> to_server(std::span<const std::uint8_t> frame) {
  const auto view = GuestFrame::parse(frame);
  if (!view.ok() || !view->is_udp() || view->transport().destination_port != DhcpServer::kServerPort)
    return std::nullopt;
  return view->transport().udp_payload;
}
std::optional<FrameRefusal> refusal(std::span<const std::uint8_t> frame) {
  const auto view = GuestFrame::parse(frame);
  if (view.ok()) return std::nullopt;
  return view.error();
}
// A frame that must reach the server, handled by it.
DhcpResult handle(DhcpServer& server, std::span<const std::uint8_t> frame) {
  const auto payload = to_server(frame);
  EXPECT_TRUE(payload.has_value()) << "the frame does not reach the server";
  return server.handle(payload.value_or(std::span<const std::uint8_t>{}));
}

// A reply frame, checked for its framing and read back.
struct Reply {
  Mac eth_dst{};
  std::uint32_t ip_src = 0;
  std::uint32_t ip_dst = 0;
  std::uint32_t xid = 0;
  std::uint16_t flags = 0;
  std::uint32_t ciaddr = 0;
  std::uint32_t yiaddr = 0;
  Mac chaddr{};
  std::map<std::uint8_t, Bytes> options;
  std::uint32_t option32(std::uint8_t code) const {
    const Bytes& v = options.at(code);
    EXPECT_EQ(v.size(), 4u) << "option " << int{code};
    return v.size() == 4 ? get32(v, 0) : 0;
  }
};
Reply read_reply(std::span<const std::uint8_t> frame) {
  const Bytes f(frame.begin(), frame.end());
  Reply r;
  EXPECT_GE(f.size(), 14u + 20 + 8 + 300) << "a BOOTP reply is at least 300 bytes";
  if (f.size() < 14 + 20 + 8 + 240) return r;
  std::copy_n(f.begin(), 6, r.eth_dst.begin());
  EXPECT_TRUE(std::equal(kGatewayMac.begin(), kGatewayMac.end(), f.begin() + 6));
  EXPECT_EQ(get16(f, 12), 0x0800);
  EXPECT_EQ(f[14], 0x45);
  EXPECT_EQ(get16(f, 16), f.size() - 14);
  EXPECT_EQ(f[23], 17);
  EXPECT_EQ(checksum(f, 14, 20), 0) << "IPv4 header checksum";
  r.ip_src = get32(f, 26);
  r.ip_dst = get32(f, 30);
  EXPECT_EQ(get16(f, 34), 67);
  EXPECT_EQ(get16(f, 36), 68);
  const std::size_t udp_len = get16(f, 38);
  EXPECT_EQ(udp_len, f.size() - 34);
  Bytes pseudo;
  put32(pseudo, r.ip_src);
  put32(pseudo, r.ip_dst);
  put16(pseudo, 17);
  put16(pseudo, static_cast<std::uint16_t>(udp_len));
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < pseudo.size(); i += 2) sum += get16(pseudo, i);
  EXPECT_EQ(checksum(f, 34, udp_len, sum), 0) << "UDP checksum";
  const std::size_t b = 42;
  EXPECT_EQ(f[b], 2);  // BOOTREPLY
  EXPECT_EQ(f[b + 1], 1);
  EXPECT_EQ(f[b + 2], 6);
  r.xid = get32(f, b + 4);
  r.flags = get16(f, b + 10);
  r.ciaddr = get32(f, b + 12);
  r.yiaddr = get32(f, b + 16);
  std::copy_n(f.begin() + b + 28, 6, r.chaddr.begin());
  EXPECT_EQ(get32(f, b + 236), 0x6382'5363u);
  std::size_t at = b + 240;
  bool ended = false;
  while (at < f.size()) {
    const std::uint8_t code = f[at++];
    if (code == 0) continue;
    if (code == 255) {
      ended = true;
      break;
    }
    if (at >= f.size() || at + 1 + f[at] > f.size()) {
      ADD_FAILURE() << "reply option " << int{code} << " runs past the end";
      break;
    }
    const std::size_t len = f[at++];
    EXPECT_FALSE(r.options.contains(code)) << "option " << int{code} << " twice";
    r.options[code] = Bytes(f.begin() + static_cast<long>(at), f.begin() + static_cast<long>(at + len));
    at += len;
  }
  EXPECT_TRUE(ended) << "no end option in the reply";
  return r;
}

// ---------------------------------------------------------------------------
// Answers.

TEST(DhcpServerTest, DiscoverGetsAnOfferOfTheFixedLeaseWithEveryOption) {
  DhcpServer server(config());
  const DhcpResult result = handle(server, dhcp_frame(msg(1)));
  ASSERT_EQ(result.outcome, DhcpOutcome::offer);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.xid, 0x1234'5678u);
  EXPECT_EQ(r.yiaddr, kGuest);
  EXPECT_EQ(r.ciaddr, 0u);
  EXPECT_EQ(r.chaddr, kGuestMac);
  // No broadcast flag: unicast to the offered address and the client's MAC.
  EXPECT_EQ(r.eth_dst, kGuestMac);
  EXPECT_EQ(r.ip_src, kGateway);
  EXPECT_EQ(r.ip_dst, kGuest);
  EXPECT_EQ(r.options.at(53), Bytes{2});
  EXPECT_EQ(r.option32(54), kGateway);
  EXPECT_EQ(r.option32(51), 86400u);
  EXPECT_EQ(r.option32(58), 43200u);
  EXPECT_EQ(r.option32(59), 75600u);
  EXPECT_EQ(r.option32(1), 0xFFFF'FF00u);
  EXPECT_EQ(r.option32(3), kGateway);
  EXPECT_EQ(r.option32(6), kGateway);
  EXPECT_EQ(r.options.at(26), (Bytes{0xFF, 0xF0}));  // 65520
}

TEST(DhcpServerTest, TheBroadcastFlagIsHonoured) {
  DhcpServer server(config());
  Message m = msg(1);
  m.flags = 0x8000;
  const DhcpResult result = handle(server, dhcp_frame(m));
  ASSERT_EQ(result.outcome, DhcpOutcome::offer);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.eth_dst, kAllOnes);
  EXPECT_EQ(r.ip_dst, kBroadcast);
  EXPECT_EQ(r.flags, 0x8000);
}

TEST(DhcpServerTest, RequestForTheGuestAddressGetsAnAck) {
  DhcpServer server(config());
  const DhcpResult result = handle(server, dhcp_frame(msg(3, kGuest, kGateway)));
  ASSERT_EQ(result.outcome, DhcpOutcome::ack);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.yiaddr, kGuest);
  EXPECT_EQ(r.options.at(53), Bytes{5});
  EXPECT_EQ(r.option32(51), 86400u);
  EXPECT_EQ(r.options.at(26), (Bytes{0xFF, 0xF0}));
}

TEST(DhcpServerTest, RenewingFromTheGuestAddressGetsAnAckUnicastToIt) {
  DhcpServer server(config());
  Message m = msg(3);  // RENEWING: ciaddr set, no option 50 or 54
  m.ciaddr = kGuest;
  const DhcpResult result = handle(server, udp_frame(bootp(m), 67, kGuest, kGateway));
  ASSERT_EQ(result.outcome, DhcpOutcome::ack);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.ciaddr, kGuest);
  EXPECT_EQ(r.ip_dst, kGuest);
  EXPECT_EQ(r.eth_dst, kGuestMac);
}

TEST(DhcpServerTest, RequestForAnotherAddressGetsABroadcastNak) {
  DhcpServer server(config());
  const DhcpResult result = handle(server, dhcp_frame(msg(3, 0x0A00'0263)));
  ASSERT_EQ(result.outcome, DhcpOutcome::nak);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.options.at(53), Bytes{6});
  EXPECT_EQ(r.option32(54), kGateway);
  EXPECT_EQ(r.yiaddr, 0u);
  EXPECT_EQ(r.ip_dst, kBroadcast);
  EXPECT_EQ(r.eth_dst, kAllOnes);
  EXPECT_FALSE(r.options.contains(51)) << "a NAK carries no lease";
  EXPECT_FALSE(r.options.contains(3));
}

TEST(DhcpServerTest, RequestWithNoAddressAtAllGetsANak) {
  DhcpServer server(config());
  EXPECT_EQ(handle(server, dhcp_frame(msg(3))).outcome, DhcpOutcome::nak);
}

TEST(DhcpServerTest, RequestToAnotherServerIsIgnored) {
  DhcpServer server(config());
  const DhcpResult result = handle(server, dhcp_frame(msg(3, kGuest, 0x0A00'0203)));
  EXPECT_EQ(result.outcome, DhcpOutcome::ignored);
  EXPECT_TRUE(result.reply.empty());
}

TEST(DhcpServerTest, InformGetsAnAckWithoutALease) {
  DhcpServer server(config());
  Message m = msg(8);
  m.ciaddr = kGuest;
  const DhcpResult result = handle(server, udp_frame(bootp(m), 67, kGuest, kGateway));
  ASSERT_EQ(result.outcome, DhcpOutcome::ack);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.yiaddr, 0u);
  EXPECT_EQ(r.ciaddr, kGuest);
  EXPECT_EQ(r.ip_dst, kGuest);
  EXPECT_FALSE(r.options.contains(51));
  EXPECT_FALSE(r.options.contains(58));
  EXPECT_EQ(r.option32(6), kGateway);
}

TEST(DhcpServerTest, ReleaseAndDeclineAreIgnored) {
  DhcpServer server(config());
  EXPECT_EQ(handle(server, dhcp_frame(msg(7, std::nullopt, kGateway))).outcome, DhcpOutcome::ignored);
  EXPECT_EQ(handle(server, dhcp_frame(msg(4, kGuest, kGateway))).outcome, DhcpOutcome::ignored);
}

TEST(DhcpServerTest, RelayedMessagesAreIgnored) {
  DhcpServer server(config());
  Message m = msg(1);
  m.giaddr = 0x0A00'0001;
  EXPECT_EQ(handle(server, dhcp_frame(m)).outcome, DhcpOutcome::ignored);
}

TEST(DhcpServerTest, TheMtuAndPrefixComeFromTheConfig) {
  DhcpServerConfig c = config();
  c.mtu = 1500;
  c.prefix_len = 16;
  c.lease_seconds = 600;
  DhcpServer server(c);
  const DhcpResult result = handle(server, dhcp_frame(msg(1)));
  ASSERT_EQ(result.outcome, DhcpOutcome::offer);
  const Reply r = read_reply(result.reply);
  EXPECT_EQ(r.options.at(26), (Bytes{0x05, 0xDC}));
  EXPECT_EQ(r.option32(1), 0xFFFF'0000u);
  EXPECT_EQ(r.option32(51), 600u);
  EXPECT_EQ(r.option32(58), 300u);
  EXPECT_EQ(r.option32(59), 525u);
}

// ---------------------------------------------------------------------------
// Not the server's.

TEST(DhcpServerTest, WhatIsNotUdpToPort67IsNotTheServers) {
  const Bytes discover = bootp(msg(1));
  EXPECT_FALSE(to_server(udp_frame(discover, 53)));
  EXPECT_FALSE(to_server(udp_frame(discover, 67, 0, kBroadcast, 6)));
  Bytes arp = dhcp_frame(msg(1));
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_FALSE(to_server(arp));
  Bytes fragment = dhcp_frame(msg(1));
  fragment[14 + 6] = 0x20;  // more fragments (the checksum is then wrong too)
  EXPECT_FALSE(to_server(fragment));
  Bytes v6 = dhcp_frame(msg(1));
  v6[14] = 0x65;
  EXPECT_FALSE(to_server(v6));
  // Cut before the UDP ports: refused, so not the server's.
  const Bytes whole = dhcp_frame(msg(1));
  for (std::size_t n = 0; n < 14 + 20 + 4; ++n) {
    EXPECT_FALSE(to_server(std::span(whole).first(n))) << n;
  }
}

// ---------------------------------------------------------------------------
// Malformed: dropped and counted, never answered.

void expect_malformed(const Bytes& frame, const char* what) {
  DhcpServer server(config());
  const DhcpResult result = handle(server, frame);
  EXPECT_EQ(result.outcome, DhcpOutcome::malformed) << what;
  EXPECT_TRUE(result.reply.empty()) << what;
  EXPECT_STRNE(result.reason, "") << what;
}

TEST(DhcpServerTest, EveryCutOfAValidMessageIsMalformedNotOverRead) {
  const Bytes whole = dhcp_frame(msg(1));
  // Cut after the IPv4 header: the IPv4 length now runs past the frame, and
  // the frame never reaches the server.
  for (std::size_t n = 14 + 20; n < whole.size(); ++n) {
    EXPECT_EQ(refusal(std::span(whole).first(n)), FrameRefusal::ipv4_total_length) << n;
  }
  // Cut consistently (IPv4 and UDP lengths agree): the message itself is short.
  const Bytes message = bootp(msg(1));
  for (std::size_t n = 0; n < message.size(); ++n) {
    expect_malformed(udp_frame(Bytes(message.begin(), message.begin() + static_cast<long>(n))),
                     "cut message");
  }
}

TEST(DhcpServerTest, BadHeadersAreMalformed) {
  Message m = msg(1);
  m.hlen = 17;
  expect_malformed(dhcp_frame(m), "hlen 17");
  m.hlen = 255;
  expect_malformed(dhcp_frame(m), "hlen 255");
  m.hlen = 0;
  expect_malformed(dhcp_frame(m), "hlen 0");
  m = msg(1);
  m.htype = 6;  // IEEE 802
  expect_malformed(dhcp_frame(m), "htype 6");
  m = msg(1);
  m.op = 2;
  expect_malformed(dhcp_frame(m), "a BOOTREPLY");
  m = msg(1);
  m.cookie = 0x6382'5364;
  expect_malformed(dhcp_frame(m), "no magic cookie");
}

// Bad framing never reaches the server: the view refuses it (more cases in
// tests/netstack/stack/guest_frame_test.cc).
TEST(DhcpServerTest, BadIpAndUdpFramingIsRefusedBeforeTheServer) {
  Bytes f = dhcp_frame(msg(1));
  f[14 + 10] ^= 0x01;
  EXPECT_EQ(refusal(f), FrameRefusal::ipv4_checksum);
  f = dhcp_frame(msg(1));
  f[14 + 2] = 0xFF;  // total length past the frame (checksum redone)
  f[14 + 10] = f[14 + 11] = 0;
  std::uint16_t sum = checksum(f, 14, 20);
  f[14 + 10] = static_cast<std::uint8_t>(sum >> 8);
  f[14 + 11] = static_cast<std::uint8_t>(sum);
  EXPECT_EQ(refusal(f), FrameRefusal::ipv4_total_length);
  f = dhcp_frame(msg(1));
  f[14 + 20 + 4] = 0xFF;
  EXPECT_EQ(refusal(f), FrameRefusal::udp_length) << "UDP length past the packet";
  f = dhcp_frame(msg(1));
  f[14 + 20 + 4] = 0;
  f[14 + 20 + 5] = 7;
  EXPECT_EQ(refusal(f), FrameRefusal::udp_length) << "UDP length below its header";
}

TEST(DhcpServerTest, BadOptionsAreMalformed) {
  auto with = [](Bytes opts) {
    Message m;
    m.options = std::move(opts);
    return dhcp_frame(m);
  };
  expect_malformed(with({53, 1, 1}), "no end option");
  expect_malformed(with({53, 1, 1, 12}), "an option code with no length");
  expect_malformed(with({53, 1, 1, 12, 200, 'x', 'y', 255}), "an option running past the end");
  expect_malformed(with({53, 1, 1, 52, 1, 3, 255}), "option overload");
  expect_malformed(with({53, 1, 1, 53, 1, 1, 255}), "duplicate message type");
  expect_malformed(with({53, 1, 3, 50, 4, 10, 0, 2, 15, 50, 4, 10, 0, 2, 15, 255}), "duplicate option 50");
  expect_malformed(with({53, 2, 1, 1, 255}), "message type of 2 bytes");
  expect_malformed(with({53, 0, 255}), "message type of 0 bytes");
  expect_malformed(with({53, 1, 3, 54, 3, 10, 0, 2, 255}), "server id of 3 bytes");
  expect_malformed(with({53, 1, 2, 255}), "an OFFER from the guest");
  expect_malformed(with({53, 1, 5, 255}), "an ACK from the guest");
  expect_malformed(with({53, 1, 200, 255}), "an unknown type");
  expect_malformed(with({12, 3, 'a', 'b', 'c', 255}), "no message type");
  expect_malformed(with({255}), "no options at all");
  expect_malformed(with({}), "nothing after the cookie");
}

TEST(DhcpServerTest, PadRunsAndTrailingBytesAreFine) {
  Bytes opts(1000, 0);  // a long run of pads
  for (std::uint8_t b : {53, 1, 1}) opts.push_back(b);
  opts.insert(opts.end(), 500, 0);
  opts.push_back(255);
  opts.insert(opts.end(), {53, 1, 7, 0xde, 0xad});  // after the end: padding, not read
  Message m;
  m.options = opts;
  DhcpServer server(config());
  EXPECT_EQ(handle(server, dhcp_frame(m)).outcome, DhcpOutcome::offer);
}

TEST(DhcpServerTest, AGiantMessageIsParsedWithinItsBounds) {
  // 60000 bytes of options: many long unknown options, then the type.
  Bytes opts;
  while (opts.size() < 60000) {
    opts.push_back(224);
    opts.push_back(255);
    opts.insert(opts.end(), 255, 'g');
  }
  for (std::uint8_t b : {53, 1, 1, 255}) opts.push_back(b);
  Message m;
  m.options = opts;
  DhcpServer server(config());
  EXPECT_EQ(handle(server, dhcp_frame(m)).outcome, DhcpOutcome::offer);
  opts.pop_back();  // the same without its end option
  m.options = opts;
  EXPECT_EQ(handle(server, dhcp_frame(m)).outcome, DhcpOutcome::malformed);
}

TEST(DhcpServerTest, AnswersAllocateNothing) {
  DhcpServer server(config());
  const Bytes discover = dhcp_frame(msg(1));
  const Bytes request = dhcp_frame(msg(3, kGuest, kGateway));
  abox::testing::AllocationCounter allocations;
  EXPECT_EQ(handle(server, discover).outcome, DhcpOutcome::offer);
  EXPECT_EQ(handle(server, request).outcome, DhcpOutcome::ack);
  EXPECT_EQ(allocations.count(), 0);
}

TEST(DhcpMessageTest, ErrorsReadAsMessages) {
  for (int e = 0; e <= static_cast<int>(DhcpParseError::not_a_client_type); ++e) {
    EXPECT_STRNE(to_string(static_cast<DhcpParseError>(e)), "unknown DHCP parse error") << e;
  }
  auto r = parse_dhcp_client_message(bootp(msg(3, kGuest, kGateway)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, DhcpMessageType::request);
  EXPECT_EQ(r->requested_address, kGuest);
  EXPECT_EQ(r->server_id, kGateway);
  EXPECT_EQ(r->chaddr, kGuestMac);
  EXPECT_FALSE(r->wants_broadcast());
}

}  // namespace
}  // namespace abox::netstack
