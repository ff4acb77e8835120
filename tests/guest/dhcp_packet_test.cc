// box-guest's DHCP client packets: what it sends is what the gateway's
// server (netstack/gateway/dhcp_server.cc, used here as the oracle) answers, and the
// server's OFFER, ACK and NAK parse back; then the nasty cases of a reply,
// each refused with its own reason: every truncation, lying lengths, bad
// checksums, fragments, someone else's reply, broken options.
#include "guest/box_guest/dhcp_packet.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "netstack/gateway/dhcp_server.h"
#include "netstack/stack/guest_frame.h"
#include "tests/support/big_endian.h"

namespace abox::guest {
namespace {

using abox::testing::get16;
using abox::testing::put16;
using abox::testing::put32;

const DhcpClientIdentity kId{0x1234'5678, {0x52, 0x54, 0x00, 0x12, 0x34, 0x56}};

std::uint16_t checksum(const std::vector<std::uint8_t>& b, std::size_t at, std::size_t n,
                       std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2)
    sum += static_cast<std::uint32_t>((b[at + i] << 8) | b[at + i + 1]);
  if (n % 2) sum += static_cast<std::uint32_t>(b[at + n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// A server reply, built by hand so each field can be broken on its own.
struct Reply {
  std::uint8_t op = 2, htype = 1, hlen = 6;
  std::uint32_t xid = kId.xid;
  std::array<std::uint8_t, 6> mac = kId.mac;
  std::uint32_t yiaddr = 0x0A00'020F;
  bool cookie = true;
  std::vector<std::uint8_t> options;
  std::uint16_t source_port = 67, dest_port = 68;
  bool udp_checksum = true;

  Reply& opt(std::uint8_t code, std::vector<std::uint8_t> data) {
    options.push_back(code);
    options.push_back(static_cast<std::uint8_t>(data.size()));
    options.insert(options.end(), data.begin(), data.end());
    return *this;
  }
  Reply& opt32(std::uint8_t code, std::uint32_t v) {
    std::vector<std::uint8_t> d;
    put32(d, v);
    return opt(code, d);
  }
  // A complete OFFER (type 2) or ACK (5) with the usual options.
  static Reply standard(std::uint8_t type) {
    Reply r;
    r.opt(53, {type}).opt32(54, 0x0A00'0202).opt32(51, 86400).opt32(1, 0xFFFF'FF00).opt32(3, 0x0A00'0202);
    r.opt32(6, 0x0A00'0202).opt(26, {0xFF, 0xF0});
    return r;
  }

  std::vector<std::uint8_t> bootp(bool end = true) const {
    std::vector<std::uint8_t> b = {op, htype, hlen, 0};
    put32(b, xid);
    put32(b, 0);       // secs, flags
    put32(b, 0);       // ciaddr
    put32(b, yiaddr);  // yiaddr
    put32(b, 0);       // siaddr
    put32(b, 0);       // giaddr
    b.insert(b.end(), mac.begin(), mac.end());
    b.insert(b.end(), 10 + 64 + 128, 0);
    if (cookie) put32(b, 0x6382'5363);
    b.insert(b.end(), options.begin(), options.end());
    if (end) b.push_back(255);
    return b;
  }

  std::vector<std::uint8_t> packet(bool end = true) const { return wrap(bootp(end)); }

  std::vector<std::uint8_t> wrap(const std::vector<std::uint8_t>& payload) const {
    std::vector<std::uint8_t> p = {0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0};
    put32(p, 0x0A00'0202);
    put32(p, 0xFFFF'FFFF);
    put16(p, source_port);
    put16(p, dest_port);
    put16(p, static_cast<std::uint16_t>(8 + payload.size()));
    put16(p, 0);
    p.insert(p.end(), payload.begin(), payload.end());
    const auto total = static_cast<std::uint16_t>(p.size());
    p[2] = static_cast<std::uint8_t>(total >> 8);
    p[3] = static_cast<std::uint8_t>(total);
    const auto ip_sum = checksum(p, 0, 20);
    p[10] = static_cast<std::uint8_t>(ip_sum >> 8);
    p[11] = static_cast<std::uint8_t>(ip_sum);
    if (udp_checksum) {
      const std::uint32_t pseudo = 0x0A00 + 0x0202 + 0xFFFF + 0xFFFF + 17 + get16(p, 24);
      auto s = checksum(p, 20, p.size() - 20, pseudo);
      if (s == 0) s = 0xFFFF;
      p[26] = static_cast<std::uint8_t>(s >> 8);
      p[27] = static_cast<std::uint8_t>(s);
    }
    return p;
  }
};

DhcpReplyError error_of(const std::vector<std::uint8_t>& packet) {
  auto r = parse_dhcp_reply(packet, kId);
  EXPECT_FALSE(r.ok());
  return r.ok() ? DhcpReplyError::kNotIpv4 : r.error();
}

// ---- against the gateway's server ----

std::vector<std::uint8_t> ethernet(const std::vector<std::uint8_t>& ip) {
  std::vector<std::uint8_t> f(6, 0xFF);
  f.insert(f.end(), kId.mac.begin(), kId.mac.end());
  f.insert(f.end(), {0x08, 0x00});
  f.insert(f.end(), ip.begin(), ip.end());
  return f;
}

// What abox-net hands its DHCP server: the UDP payload of the frame's one
// validated view (netstack/stack/guest_frame.h), which must be a datagram to
// port 67. The frame must outlive the span.
std::span<const std::uint8_t> to_server(const std::vector<std::uint8_t>& frame) {
  const auto view = netstack::GuestFrame::parse(frame);
  EXPECT_TRUE(view.ok() && view->is_udp() && view->transport().destination_port == 67);
  return view.ok() ? view->transport().udp_payload : std::span<const std::uint8_t>{};
}

TEST(DhcpPacket, DiscoverRequestAckWithTheGatewaysServer) {
  netstack::DhcpServerConfig config;
  config.gateway_mac = {0x52, 0x55, 0x0A, 0x00, 0x02, 0x02};
  config.mtu = 65520;
  netstack::DhcpServer server(config);

  std::vector<std::uint8_t> discover;
  build_dhcp_discover(kId, discover);
  auto offered = server.handle(to_server(ethernet(discover)));
  ASSERT_EQ(offered.outcome, netstack::DhcpOutcome::offer) << offered.reason;
  std::vector<std::uint8_t> offer_ip(offered.reply.begin() + 14, offered.reply.end());
  auto offer = parse_dhcp_reply(offer_ip, kId);
  ASSERT_TRUE(offer.ok()) << dhcp_reply_error_name(offer.error());
  EXPECT_EQ(offer->kind, DhcpReplyKind::kOffer);
  EXPECT_EQ(offer->your_address, 0x0A00'020Fu);
  EXPECT_EQ(offer->server_id, 0x0A00'0202u);

  std::vector<std::uint8_t> request;
  build_dhcp_request(kId, offer->your_address, offer->server_id, request);
  auto acked = server.handle(to_server(ethernet(request)));
  ASSERT_EQ(acked.outcome, netstack::DhcpOutcome::ack) << acked.reason;
  std::vector<std::uint8_t> ack_ip(acked.reply.begin() + 14, acked.reply.end());
  auto ack = parse_dhcp_reply(ack_ip, kId);
  ASSERT_TRUE(ack.ok()) << dhcp_reply_error_name(ack.error());
  EXPECT_EQ(ack->kind, DhcpReplyKind::kAck);
  EXPECT_EQ(ack->prefix_len, 24);
  EXPECT_EQ(ack->router, 0x0A00'0202u);
  ASSERT_EQ(ack->dns_count, 1u);
  EXPECT_EQ(ack->dns[0], 0x0A00'0202u);
  EXPECT_EQ(ack->mtu, 65520);
  EXPECT_EQ(ack->lease_seconds, 24u * 3600);

  // Another address asked for: the server says NAK, and the client reads it.
  std::vector<std::uint8_t> wrong;
  build_dhcp_request(kId, 0x0A00'0263, 0x0A00'0202, wrong);
  auto naked = server.handle(to_server(ethernet(wrong)));
  ASSERT_EQ(naked.outcome, netstack::DhcpOutcome::nak);
  auto nak = parse_dhcp_reply(std::vector<std::uint8_t>(naked.reply.begin() + 14, naked.reply.end()), kId);
  ASSERT_TRUE(nak.ok());
  EXPECT_EQ(nak->kind, DhcpReplyKind::kNak);
}

TEST(DhcpPacket, WhatTheClientSendsIsWellFormed) {
  std::vector<std::uint8_t> p;
  build_dhcp_request(kId, 0x0A00'020F, 0x0A00'0202, p);
  ASSERT_GE(p.size(), 20u + 8 + 300);
  EXPECT_EQ(get16(p, 2), p.size());
  EXPECT_EQ(checksum(p, 0, 20), 0) << "IPv4 header checksum";
  EXPECT_EQ(get16(p, 20), 68);
  EXPECT_EQ(get16(p, 22), 67);
  EXPECT_EQ(get16(p, 24), p.size() - 20);
  const std::uint32_t pseudo = 0 + 0 + 0xFFFF + 0xFFFF + 17 + get16(p, 24);
  EXPECT_EQ(checksum(p, 20, p.size() - 20, pseudo), 0) << "UDP checksum";
  EXPECT_EQ(p[28], 1) << "BOOTREQUEST";
  EXPECT_TRUE(std::equal(kId.mac.begin(), kId.mac.end(), p.begin() + 28 + 28));
  // Option 50 (the offered address) and 54 (the server) are in the options.
  const std::vector<std::uint8_t> requested = {50, 4, 10, 0, 2, 15}, server = {54, 4, 10, 0, 2, 2};
  EXPECT_NE(std::search(p.begin() + 28 + 240, p.end(), requested.begin(), requested.end()), p.end());
  EXPECT_NE(std::search(p.begin() + 28 + 240, p.end(), server.begin(), server.end()), p.end());
}

// ---- replies ----

TEST(DhcpPacket, StandardReplyParses) {
  auto r = parse_dhcp_reply(Reply::standard(5).packet(), kId);
  ASSERT_TRUE(r.ok()) << dhcp_reply_error_name(r.error());
  EXPECT_EQ(r->kind, DhcpReplyKind::kAck);
  EXPECT_EQ(r->mtu, 65520);
  EXPECT_EQ(r->prefix_len, 24);
}

TEST(DhcpPacket, EveryTruncationIsRefusedNeverRead) {
  auto full = Reply::standard(2).packet();
  for (std::size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<std::uint8_t> part(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_FALSE(parse_dhcp_reply(part, kId).ok()) << "cut at " << cut;
  }
}

TEST(DhcpPacket, LinkPaddingPastTheTotalLengthIsIgnored) {
  auto p = Reply::standard(2).packet();
  p.insert(p.end(), 18, 0xAA);
  EXPECT_TRUE(parse_dhcp_reply(p, kId).ok());
}

TEST(DhcpPacket, IpAndUdpNastyCases) {
  auto base = Reply::standard(2).packet();
  auto with = [&](auto edit) {
    auto p = base;
    edit(p);
    return error_of(p);
  };
  EXPECT_EQ(with([](auto& p) { p[0] = 0x65; }), DhcpReplyError::kNotIpv4);
  EXPECT_EQ(with([](auto& p) { p[0] = 0x44; }), DhcpReplyError::kBadIpHeader);  // IHL 16 bytes
  EXPECT_EQ(with([](auto& p) { p[2] = 0xFF; }),
            DhcpReplyError::kBadIpHeader);  // total length past the packet
  EXPECT_EQ(with([](auto& p) {
              p[3] = 20;
              p[2] = 0;
            }),
            DhcpReplyError::kBadIpHeader);
  EXPECT_EQ(with([](auto& p) { p[12] ^= 1; }), DhcpReplyError::kBadIpChecksum);
  EXPECT_EQ(with([](auto& p) { p[24] = 0xFF; }), DhcpReplyError::kBadUdpLength);
  EXPECT_EQ(with([](auto& p) {
              p[25] = 4;
              p[24] = 0;
            }),
            DhcpReplyError::kBadUdpLength);
  EXPECT_EQ(with([](auto& p) { p.back() ^= 0x55; }), DhcpReplyError::kBadUdpChecksum);

  auto f = Reply::standard(2).packet();
  f[6] = 0x20;  // more fragments, with the header checksum made right again
  f[10] = f[11] = 0;
  const auto s = checksum(f, 0, 20);
  f[10] = static_cast<std::uint8_t>(s >> 8);
  f[11] = static_cast<std::uint8_t>(s);
  EXPECT_EQ(error_of(f), DhcpReplyError::kFragment);

  Reply other_ports = Reply::standard(2);
  other_ports.source_port = 53;
  EXPECT_EQ(error_of(other_ports.packet()), DhcpReplyError::kNotDhcpPorts);
  EXPECT_TRUE(dhcp_reply_is_someone_elses(DhcpReplyError::kNotDhcpPorts));

  Reply no_sum = Reply::standard(2);
  no_sum.udp_checksum = false;
  EXPECT_TRUE(parse_dhcp_reply(no_sum.packet(), kId).ok()) << "UDP checksum 0 means none";
}

TEST(DhcpPacket, SomeoneElsesReplyIsToldApart) {
  Reply other_xid = Reply::standard(2);
  other_xid.xid ^= 1;
  EXPECT_EQ(error_of(other_xid.packet()), DhcpReplyError::kOtherTransaction);
  Reply other_mac = Reply::standard(2);
  other_mac.mac[5] ^= 1;
  EXPECT_EQ(error_of(other_mac.packet()), DhcpReplyError::kOtherClient);
  Reply request = Reply::standard(2);
  request.op = 1;
  EXPECT_EQ(error_of(request.packet()), DhcpReplyError::kNotReply);
  for (auto e : {DhcpReplyError::kOtherTransaction, DhcpReplyError::kOtherClient, DhcpReplyError::kNotReply})
    EXPECT_TRUE(dhcp_reply_is_someone_elses(e));
  EXPECT_FALSE(dhcp_reply_is_someone_elses(DhcpReplyError::kBadUdpChecksum));
}

TEST(DhcpPacket, BootpAndOptionNastyCases) {
  Reply r = Reply::standard(2);
  r.htype = 6;
  EXPECT_EQ(error_of(r.packet()), DhcpReplyError::kNotEthernet);
  r = Reply::standard(2);
  r.hlen = 16;
  EXPECT_EQ(error_of(r.packet()), DhcpReplyError::kNotEthernet);
  r = Reply::standard(2);
  r.cookie = false;
  r.options.insert(r.options.begin(), {0, 0, 0, 0});  // still long enough, but no cookie
  EXPECT_EQ(error_of(r.packet()), DhcpReplyError::kNoMagicCookie);
  EXPECT_EQ(error_of(Reply::standard(2).packet(false)), DhcpReplyError::kNoEndOption);

  r = Reply::standard(2);
  r.options.insert(r.options.end(), {12, 40, 'a'});  // a host name that runs past the end
  EXPECT_EQ(error_of(r.packet(false)), DhcpReplyError::kOptionPastEnd);
  r = Reply::standard(2);
  r.options.push_back(12);  // a code with no length byte
  EXPECT_EQ(error_of(r.packet(false)), DhcpReplyError::kOptionPastEnd);

  EXPECT_EQ(error_of(Reply::standard(2).opt(52, {3}).packet()), DhcpReplyError::kOptionOverload);
  EXPECT_EQ(error_of(Reply::standard(2).opt(53, {2}).packet()), DhcpReplyError::kDuplicateOption);
  EXPECT_EQ(error_of(Reply::standard(2).opt32(54, 1).packet()), DhcpReplyError::kDuplicateOption);
  EXPECT_EQ(error_of(Reply::standard(2).opt32(1, 0xFFFF'0000).packet()), DhcpReplyError::kDuplicateOption);
  EXPECT_EQ(error_of(Reply::standard(2).opt(26, {0x05, 0xDC}).packet()), DhcpReplyError::kDuplicateOption);

  auto only = [](std::vector<std::pair<std::uint8_t, std::vector<std::uint8_t>>> opts) {
    Reply x;
    for (auto& [code, data] : opts) x.opt(code, data);
    return error_of(x.packet());
  };
  const std::vector<std::uint8_t> server = {10, 0, 2, 2};
  EXPECT_EQ(only({{54, server}}), DhcpReplyError::kNoMessageType);
  EXPECT_EQ(only({{53, {2, 2}}, {54, server}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {1}}, {54, server}}), DhcpReplyError::kNotServerMessage);  // a DISCOVER
  EXPECT_EQ(only({{53, {2}}}), DhcpReplyError::kNoServerId);
  EXPECT_EQ(only({{53, {2}}, {54, {10, 0, 2}}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {1, {255, 0, 255, 0}}}), DhcpReplyError::kBadMask);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {1, {0, 0, 0, 0}}}), DhcpReplyError::kBadMask)
      << "a /0 (found by fuzzing)";
  EXPECT_EQ(only({{53, {2}}, {54, server}, {1, {255, 255}}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {3, {10, 0, 2, 2, 10}}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {6, {}}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {26, {0, 67}}}), DhcpReplyError::kMtuTooSmall);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {26, {0, 68, 0}}}), DhcpReplyError::kBadOptionLength);
  EXPECT_EQ(only({{53, {2}}, {54, server}, {51, {0, 1}}}), DhcpReplyError::kBadOptionLength);
}

TEST(DhcpPacket, OfferOfAnUnusableAddressIsRefusedButANakNeedsNone) {
  for (std::uint32_t bad : {0u, 0xFFFF'FFFFu, 0x7F00'0001u, 0xE000'0001u, 0x00FF'0001u}) {
    Reply r = Reply::standard(2);
    r.yiaddr = bad;
    EXPECT_EQ(error_of(r.packet()), DhcpReplyError::kUnusableAddress) << std::hex << bad;
  }
  Reply nak;
  nak.yiaddr = 0;
  nak.opt(53, {6}).opt32(54, 0x0A00'0202);
  auto r = parse_dhcp_reply(nak.packet(), kId);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, DhcpReplyKind::kNak);
}

TEST(DhcpPacket, PadsUnknownOptionsAndManyDnsServers) {
  Reply r;
  r.options = {0, 0, 0, 0, 0};
  r.opt(53, {5}).opt32(54, 0x0A00'0202).opt(12, std::vector<std::uint8_t>(255, 'x')).opt(250, {});
  r.opt(6, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4});
  auto p = parse_dhcp_reply(r.packet(), kId);
  ASSERT_TRUE(p.ok()) << dhcp_reply_error_name(p.error());
  ASSERT_EQ(p->dns_count, 3u) << "at most 3 kept";
  EXPECT_EQ(p->dns[2], 0x0303'0303u);
  EXPECT_FALSE(p->prefix_len.has_value());
  EXPECT_FALSE(p->router.has_value());
  EXPECT_FALSE(p->mtu.has_value());
}

TEST(DhcpPacket, Ipv4HeaderOptionsAreSkipped) {
  auto p = Reply::standard(2).packet();
  // Grow the header to 24 bytes with a NOP-padded option, fixing lengths and the checksum.
  p.insert(p.begin() + 20, {1, 1, 1, 0});
  p[0] = 0x46;
  const auto total = static_cast<std::uint16_t>(p.size());
  p[2] = static_cast<std::uint8_t>(total >> 8);
  p[3] = static_cast<std::uint8_t>(total);
  p[10] = p[11] = 0;
  const auto s = checksum(p, 0, 24);
  p[10] = static_cast<std::uint8_t>(s >> 8);
  p[11] = static_cast<std::uint8_t>(s);
  auto r = parse_dhcp_reply(p, kId);
  EXPECT_TRUE(r.ok()) << dhcp_reply_error_name(r.error());
}

}  // namespace
}  // namespace abox::guest
