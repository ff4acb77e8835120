// DhcpServer (see dhcp_server.h for how it works).
#include "netstack/gateway/dhcp_server.h"

#include "netstack/stack/guest_frame.h"

namespace abox::netstack {
namespace {

constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint8_t kProtoUdp = GuestFrame::kProtoUdp;
constexpr std::uint16_t kClientPort = 68;
constexpr std::uint32_t kBroadcast = 0xFFFF'FFFF;
constexpr std::size_t kEthernetHeader = 14;
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kUdpHeader = 8;
// RFC 1542: a BOOTP message is at least 300 bytes; some clients insist.
constexpr std::size_t kMinBootp = 300;
constexpr std::size_t kReplyCapacity = kEthernetHeader + kIpv4Header + kUdpHeader + kMinBootp + 64;

constexpr std::uint8_t kOffer = 2;
constexpr std::uint8_t kAck = 5;
constexpr std::uint8_t kNak = 6;

class FrameWriter {
 public:
  explicit FrameWriter(std::vector<std::uint8_t>& out) : out_(out) { out_.clear(); }
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u16(std::uint16_t v) {
    u8(static_cast<std::uint8_t>(v >> 8));
    u8(static_cast<std::uint8_t>(v));
  }
  void u32(std::uint32_t v) {
    u16(static_cast<std::uint16_t>(v >> 16));
    u16(static_cast<std::uint16_t>(v));
  }
  void bytes(std::span<const std::uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void zeros(std::size_t n) { out_.insert(out_.end(), n, 0); }
  void option(std::uint8_t code, std::uint32_t v) {
    u8(code);
    u8(4);
    u32(v);
  }
  std::size_t size() const { return out_.size(); }
  void put16_at(std::size_t at, std::uint16_t v) {
    out_[at] = static_cast<std::uint8_t>(v >> 8);
    out_[at + 1] = static_cast<std::uint8_t>(v);
  }

 private:
  std::vector<std::uint8_t>& out_;
};

DhcpResult malformed(const char* why) {
  return {DhcpOutcome::malformed, {}, why};
}
DhcpResult ignored(const char* why) {
  return {DhcpOutcome::ignored, {}, why};
}

}  // namespace

DhcpServer::DhcpServer(const DhcpServerConfig& config) : config_(config) {
  reply_.reserve(kReplyCapacity);
}

DhcpResult DhcpServer::handle(std::span<const std::uint8_t> bootp) {
  auto parsed = parse_dhcp_client_message(bootp);
  if (!parsed.ok()) return malformed(to_string(parsed.error()));
  const DhcpClientMessage& m = *parsed;
  if (m.giaddr != 0) return ignored("relayed message");

  switch (m.type) {
    case DhcpMessageType::discover:
      return {DhcpOutcome::offer, build_reply(m, kOffer, config_.guest)};
    case DhcpMessageType::request: {
      if (m.server_id && *m.server_id != config_.gateway) return ignored("the client chose another server");
      const std::uint32_t asked = m.requested_address.value_or(m.ciaddr);
      if (asked != config_.guest) return {DhcpOutcome::nak, build_reply(m, kNak, 0)};
      return {DhcpOutcome::ack, build_reply(m, kAck, config_.guest)};
    }
    case DhcpMessageType::inform:
      return {DhcpOutcome::ack, build_reply(m, kAck, 0)};
    case DhcpMessageType::decline:
      return ignored("DECLINE: the lease is fixed");
    case DhcpMessageType::release:
      return ignored("RELEASE: the lease is fixed");
  }
  return malformed("message type is not a client's");
}

std::span<const std::uint8_t> DhcpServer::build_reply(const DhcpClientMessage& m, std::uint8_t type,
                                                      std::uint32_t yiaddr) {
  const bool nak = type == kNak;
  const bool inform = type == kAck && yiaddr == 0;
  // Where the reply goes (RFC 2131 4.1, without relays).
  std::uint32_t dst = kBroadcast;
  if (!nak && !m.wants_broadcast()) {
    if (m.ciaddr == config_.guest) {
      dst = m.ciaddr;
    } else if (yiaddr != 0) {
      dst = yiaddr;
    }
  }
  const std::array<std::uint8_t, 6> all_ones = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

  FrameWriter w(reply_);
  w.bytes(dst == kBroadcast ? all_ones : m.chaddr);
  w.bytes(config_.gateway_mac);
  w.u16(kEtherIpv4);

  const std::size_t ip_at = w.size();
  w.u8(0x45);
  w.u8(0);
  w.u16(0);  // total length, below
  w.u16(0);  // id
  w.u16(0);  // no fragments
  w.u8(64);  // TTL
  w.u8(kProtoUdp);
  w.u16(0);  // header checksum, below
  w.u32(config_.gateway);
  w.u32(dst);

  const std::size_t udp_at = w.size();
  w.u16(kServerPort);
  w.u16(kClientPort);
  w.u16(0);  // length, below
  w.u16(0);  // checksum, below

  const std::size_t bootp_at = w.size();
  w.u8(2);  // BOOTREPLY
  w.u8(1);  // Ethernet
  w.u8(6);
  w.u8(0);  // hops
  w.u32(m.xid);
  w.u16(0);  // secs
  w.u16(m.flags & 0x8000);
  w.u32(type == kAck ? m.ciaddr : 0);
  w.u32(yiaddr);
  w.u32(0);  // siaddr: no boot server
  w.u32(0);  // giaddr
  w.bytes(m.chaddr);
  w.zeros(16 - m.chaddr.size() + 64 + 128);  // rest of chaddr, sname, file
  w.u32(0x6382'5363);

  w.u8(53);
  w.u8(1);
  w.u8(type);
  w.option(54, config_.gateway);
  if (!nak) {
    if (!inform) {
      w.option(51, config_.lease_seconds);
      w.option(58, config_.lease_seconds / 2);
      w.option(59, static_cast<std::uint32_t>(std::uint64_t{config_.lease_seconds} * 7 / 8));
    }
    const std::uint32_t mask = config_.prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - config_.prefix_len);
    w.option(1, mask);
    w.option(3, config_.gateway);
    w.option(6, config_.gateway);
    w.u8(26);
    w.u8(2);
    w.u16(static_cast<std::uint16_t>(config_.mtu));
  }
  w.u8(255);
  if (w.size() - bootp_at < kMinBootp) w.zeros(kMinBootp - (w.size() - bootp_at));

  const std::size_t end = w.size();
  w.put16_at(ip_at + 2, static_cast<std::uint16_t>(end - ip_at));
  w.put16_at(ip_at + 10, fold_checksum(sum16(std::span(reply_).subspan(ip_at, kIpv4Header))));
  const auto udp_length = static_cast<std::uint16_t>(end - udp_at);
  w.put16_at(udp_at + 4, udp_length);
  // Pseudo-header: source, destination, protocol, UDP length.
  std::uint32_t pseudo = sum16(std::span(reply_).subspan(ip_at + 12, 8));
  pseudo += kProtoUdp + udp_length;
  std::uint16_t udp_sum = fold_checksum(sum16(std::span(reply_).subspan(udp_at, udp_length), pseudo));
  if (udp_sum == 0) udp_sum = 0xFFFF;  // 0 would mean "no checksum"
  w.put16_at(udp_at + 6, udp_sum);
  return reply_;
}

}  // namespace abox::netstack
