// DHCP client packets (see dhcp_packet.h for what is built and checked).
#include "guest/box_guest/dhcp_packet.h"

#include <cstdio>

#include "base/byte_reader.h"

namespace abox::guest {
namespace {

constexpr std::uint8_t kProtoUdp = 17;
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kUdpHeader = 8;
constexpr std::size_t kBootpFixed = 236;  // op .. file
constexpr std::uint32_t kMagicCookie = 0x6382'5363;
constexpr std::size_t kMinBootp = 300;  // RFC 1542: some servers insist

constexpr std::uint8_t kOptPad = 0, kOptMask = 1, kOptRouter = 3, kOptDns = 6, kOptMtu = 26,
                       kOptRequested = 50, kOptLease = 51, kOptOverload = 52, kOptType = 53,
                       kOptServerId = 54, kOptParams = 55, kOptMaxSize = 57, kOptEnd = 255;
constexpr std::uint8_t kDiscover = 1, kRequest = 3;

// Ones' complement sum of big-endian 16-bit words, not yet folded.
std::uint32_t sum16(std::span<const std::uint8_t> data, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < data.size(); i += 2)
    sum += static_cast<std::uint32_t>((data[i] << 8) | data[i + 1]);
  if (data.size() % 2 != 0) sum += static_cast<std::uint32_t>(data.back() << 8);
  return sum;
}
std::uint16_t fold(std::uint32_t sum) {
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void put16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t v) {
  out[at] = static_cast<std::uint8_t>(v >> 8);
  out[at + 1] = static_cast<std::uint8_t>(v);
}
void append16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}
void append32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  append16(out, static_cast<std::uint16_t>(v >> 16));
  append16(out, static_cast<std::uint16_t>(v));
}

void build_client_packet(const DhcpClientIdentity& id, std::uint8_t type,
                         std::optional<std::uint32_t> requested, std::optional<std::uint32_t> server_id,
                         std::vector<std::uint8_t>& out) {
  const std::size_t ip_at = out.size();
  // IPv4 header: 0.0.0.0 -> 255.255.255.255, UDP, TTL 64; lengths and checksum below.
  const std::uint8_t ip[kIpv4Header] = {0x45, 0, 0, 0, 0, 0, 0,   0,   64,  kProtoUdp,
                                        0,    0, 0, 0, 0, 0, 255, 255, 255, 255};
  out.insert(out.end(), ip, ip + kIpv4Header);
  const std::size_t udp_at = out.size();
  append16(out, kDhcpClientPort);
  append16(out, kDhcpServerPort);
  append32(out, 0);  // length and checksum, below

  const std::size_t bootp_at = out.size();
  out.push_back(1);  // BOOTREQUEST
  out.push_back(1);  // Ethernet
  out.push_back(6);
  out.push_back(0);  // hops
  append32(out, id.xid);
  append32(out, 0);              // secs, flags: unicast replies are fine (AF_PACKET)
  out.insert(out.end(), 16, 0);  // ciaddr, yiaddr, siaddr, giaddr
  out.insert(out.end(), id.mac.begin(), id.mac.end());
  out.insert(out.end(), 10 + 64 + 128, 0);  // rest of chaddr, sname, file
  append32(out, kMagicCookie);
  out.insert(out.end(), {kOptType, 1, type});
  out.insert(out.end(), {kOptParams, 6, kOptMask, kOptRouter, kOptDns, kOptMtu, kOptLease, kOptServerId});
  out.insert(out.end(), {kOptMaxSize, 2, 0x05, 0xDC});  // 1500
  if (requested) {
    out.insert(out.end(), {kOptRequested, 4});
    append32(out, *requested);
  }
  if (server_id) {
    out.insert(out.end(), {kOptServerId, 4});
    append32(out, *server_id);
  }
  out.push_back(kOptEnd);
  if (out.size() - bootp_at < kMinBootp) out.insert(out.end(), kMinBootp - (out.size() - bootp_at), 0);

  const std::size_t end = out.size();
  put16(out, ip_at + 2, static_cast<std::uint16_t>(end - ip_at));
  put16(out, ip_at + 10, fold(sum16(std::span(out).subspan(ip_at, kIpv4Header))));
  const auto udp_length = static_cast<std::uint16_t>(end - udp_at);
  put16(out, udp_at + 4, udp_length);
  // Pseudo-header: source, destination, protocol, UDP length.
  std::uint32_t pseudo = sum16(std::span(out).subspan(ip_at + 12, 8)) + kProtoUdp + udp_length;
  std::uint16_t udp_sum = fold(sum16(std::span(out).subspan(udp_at, udp_length), pseudo));
  put16(out, udp_at + 6, udp_sum == 0 ? 0xFFFF : udp_sum);
}

bool usable_unicast(std::uint32_t a) {
  const std::uint32_t first = a >> 24;
  return a != 0 && a != 0xFFFF'FFFF && first != 0 && first != 127 && first < 224;
}

// One option that must come at most once, with a fixed or minimum length.
struct Seen {
  bool type = false, server = false, mask = false, router = false, dns = false, mtu = false, lease = false;
};

base::Result<DhcpReply, DhcpReplyError> parse_bootp(std::span<const std::uint8_t> bootp,
                                                    const DhcpClientIdentity& id) {
  using base::Err;
  base::ByteReader r(bootp);
  auto op = r.u8();
  auto htype = r.u8();
  auto hlen = r.u8();
  auto hops = r.u8();
  auto xid = r.u32be();
  if (!op || !htype || !hlen || !hops || !xid || bootp.size() < kBootpFixed + 4)
    return Err{DhcpReplyError::kTruncatedHeader};
  if (*op != 2) return Err{DhcpReplyError::kNotReply};
  if (*htype != 1 || *hlen != 6) return Err{DhcpReplyError::kNotEthernet};
  if (*xid != id.xid) return Err{DhcpReplyError::kOtherTransaction};
  if (!r.skip(4 + 4)) return Err{DhcpReplyError::kTruncatedHeader};  // secs, flags, ciaddr
  auto yiaddr = r.u32be();
  if (!yiaddr || !r.skip(8)) return Err{DhcpReplyError::kTruncatedHeader};  // siaddr, giaddr
  auto chaddr = r.bytes(16);
  if (!chaddr || !r.skip(64 + 128)) return Err{DhcpReplyError::kTruncatedHeader};
  for (std::size_t i = 0; i < id.mac.size(); ++i)
    if ((*chaddr)[i] != id.mac[i]) return Err{DhcpReplyError::kOtherClient};
  auto cookie = r.u32be();
  if (!cookie) return Err{DhcpReplyError::kTruncatedHeader};
  if (*cookie != kMagicCookie) return Err{DhcpReplyError::kNoMagicCookie};

  DhcpReply reply;
  reply.your_address = *yiaddr;
  Seen seen;
  std::optional<std::uint8_t> type;
  bool ended = false;
  while (!ended) {
    auto code = r.u8();
    if (!code) return Err{DhcpReplyError::kNoEndOption};
    if (*code == kOptPad) continue;
    if (*code == kOptEnd) {
      ended = true;
      break;
    }
    auto len = r.u8();
    if (!len) return Err{DhcpReplyError::kOptionPastEnd};
    auto data = r.bytes(*len);
    if (!data) return Err{DhcpReplyError::kOptionPastEnd};
    base::ByteReader v(*data);
    auto once = [](bool& flag) {
      if (flag) return false;
      flag = true;
      return true;
    };
    switch (*code) {
      case kOptOverload:
        return Err{DhcpReplyError::kOptionOverload};
      case kOptType:
        if (!once(seen.type)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len != 1) return Err{DhcpReplyError::kBadOptionLength};
        type = *v.u8();
        break;
      case kOptServerId:
        if (!once(seen.server)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len != 4) return Err{DhcpReplyError::kBadOptionLength};
        reply.server_id = *v.u32be();
        break;
      case kOptMask: {
        if (!once(seen.mask)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len != 4) return Err{DhcpReplyError::kBadOptionLength};
        const std::uint32_t mask = *v.u32be();
        const std::uint32_t inverted = ~mask;
        // A /0 is no subnet: the kernel takes prefixes of 1-32 only.
        if (mask == 0 || (inverted & (inverted + 1)) != 0) return Err{DhcpReplyError::kBadMask};
        reply.prefix_len = static_cast<std::uint8_t>(__builtin_popcount(mask));
        break;
      }
      case kOptRouter:
        if (!once(seen.router)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len < 4 || *len % 4 != 0) return Err{DhcpReplyError::kBadOptionLength};
        reply.router = *v.u32be();
        break;
      case kOptDns:
        if (!once(seen.dns)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len < 4 || *len % 4 != 0) return Err{DhcpReplyError::kBadOptionLength};
        while (reply.dns_count < reply.dns.size()) {
          auto a = v.u32be();
          if (!a) break;
          reply.dns[reply.dns_count++] = *a;
        }
        break;
      case kOptMtu: {
        if (!once(seen.mtu)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len != 2) return Err{DhcpReplyError::kBadOptionLength};
        const std::uint16_t mtu = *v.u16be();
        if (mtu < 68) return Err{DhcpReplyError::kMtuTooSmall};
        reply.mtu = mtu;
        break;
      }
      case kOptLease:
        if (!once(seen.lease)) return Err{DhcpReplyError::kDuplicateOption};
        if (*len != 4) return Err{DhcpReplyError::kBadOptionLength};
        reply.lease_seconds = *v.u32be();
        break;
      default:
        break;  // not read
    }
  }
  if (!type) return Err{DhcpReplyError::kNoMessageType};
  if (*type != static_cast<std::uint8_t>(DhcpReplyKind::kOffer) &&
      *type != static_cast<std::uint8_t>(DhcpReplyKind::kAck) &&
      *type != static_cast<std::uint8_t>(DhcpReplyKind::kNak))
    return Err{DhcpReplyError::kNotServerMessage};
  reply.kind = static_cast<DhcpReplyKind>(*type);
  if (!seen.server) return Err{DhcpReplyError::kNoServerId};
  if (reply.kind != DhcpReplyKind::kNak && !usable_unicast(reply.your_address))
    return Err{DhcpReplyError::kUnusableAddress};
  return reply;
}

}  // namespace

void build_dhcp_discover(const DhcpClientIdentity& id, std::vector<std::uint8_t>& out) {
  build_client_packet(id, kDiscover, std::nullopt, std::nullopt, out);
}

void build_dhcp_request(const DhcpClientIdentity& id, std::uint32_t requested, std::uint32_t server_id,
                        std::vector<std::uint8_t>& out) {
  build_client_packet(id, kRequest, requested, server_id, out);
}

std::string_view dhcp_reply_error_name(DhcpReplyError e) {
  switch (e) {
    case DhcpReplyError::kNotIpv4:
      return "not IPv4";
    case DhcpReplyError::kBadIpHeader:
      return "bad IPv4 header length or total length";
    case DhcpReplyError::kBadIpChecksum:
      return "bad IPv4 header checksum";
    case DhcpReplyError::kFragment:
      return "IPv4 fragment";
    case DhcpReplyError::kNotUdp:
      return "not UDP";
    case DhcpReplyError::kNotDhcpPorts:
      return "not UDP 67 -> 68";
    case DhcpReplyError::kBadUdpLength:
      return "UDP length outside the packet";
    case DhcpReplyError::kBadUdpChecksum:
      return "bad UDP checksum";
    case DhcpReplyError::kNotReply:
      return "not a BOOTREPLY";
    case DhcpReplyError::kNotEthernet:
      return "hardware type is not Ethernet";
    case DhcpReplyError::kTruncatedHeader:
      return "shorter than the BOOTP header and cookie";
    case DhcpReplyError::kNoMagicCookie:
      return "no DHCP magic cookie";
    case DhcpReplyError::kOtherTransaction:
      return "another transaction's xid";
    case DhcpReplyError::kOtherClient:
      return "another client's chaddr";
    case DhcpReplyError::kOptionPastEnd:
      return "an option runs past the end";
    case DhcpReplyError::kNoEndOption:
      return "no end option";
    case DhcpReplyError::kOptionOverload:
      return "option overload (52) is not supported";
    case DhcpReplyError::kDuplicateOption:
      return "an option given twice";
    case DhcpReplyError::kBadOptionLength:
      return "an option of the wrong length";
    case DhcpReplyError::kNoMessageType:
      return "no message type";
    case DhcpReplyError::kNotServerMessage:
      return "message type is not OFFER, ACK or NAK";
    case DhcpReplyError::kNoServerId:
      return "no server identifier";
    case DhcpReplyError::kBadMask:
      return "subnet mask is 0 or not contiguous";
    case DhcpReplyError::kMtuTooSmall:
      return "MTU under 68";
    case DhcpReplyError::kUnusableAddress:
      return "yiaddr is not a usable unicast address";
  }
  return "DHCP reply error";
}

bool dhcp_reply_is_someone_elses(DhcpReplyError e) {
  switch (e) {
    case DhcpReplyError::kNotUdp:
    case DhcpReplyError::kNotDhcpPorts:
    case DhcpReplyError::kNotReply:
    case DhcpReplyError::kOtherTransaction:
    case DhcpReplyError::kOtherClient:
      return true;
    default:
      return false;
  }
}

base::Result<DhcpReply, DhcpReplyError> parse_dhcp_reply(std::span<const std::uint8_t> packet,
                                                         const DhcpClientIdentity& id) {
  using base::Err;
  base::ByteReader ip(packet);
  auto version_ihl = ip.u8();
  if (!version_ihl || (*version_ihl >> 4) != 4) return Err{DhcpReplyError::kNotIpv4};
  const std::size_t ihl = std::size_t{*version_ihl & 0x0Fu} * 4;
  auto tos = ip.u8();
  auto total_length = ip.u16be();
  auto ident = ip.u16be();
  auto fragment = ip.u16be();
  auto ttl = ip.u8();
  auto protocol = ip.u8();
  if (!tos || !total_length || !ident || !fragment || !ttl || !protocol)
    return Err{DhcpReplyError::kBadIpHeader};
  if (ihl < kIpv4Header || *total_length < ihl + kUdpHeader || *total_length > packet.size())
    return Err{DhcpReplyError::kBadIpHeader};
  const auto datagram = packet.first(*total_length);  // bytes past total length are link padding
  if (fold(sum16(datagram.first(ihl))) != 0) return Err{DhcpReplyError::kBadIpChecksum};
  if ((*fragment & 0x3FFF) != 0) return Err{DhcpReplyError::kFragment};
  if (*protocol != kProtoUdp) return Err{DhcpReplyError::kNotUdp};

  base::ByteReader udp(datagram.subspan(ihl));
  auto source_port = udp.u16be();
  auto dest_port = udp.u16be();
  auto udp_length = udp.u16be();
  auto udp_checksum = udp.u16be();
  if (!source_port || !dest_port || !udp_length || !udp_checksum) return Err{DhcpReplyError::kBadUdpLength};
  if (*source_port != kDhcpServerPort || *dest_port != kDhcpClientPort)
    return Err{DhcpReplyError::kNotDhcpPorts};
  if (*udp_length < kUdpHeader || *udp_length > datagram.size() - ihl)
    return Err{DhcpReplyError::kBadUdpLength};
  const auto segment = datagram.subspan(ihl, *udp_length);
  if (*udp_checksum != 0) {
    std::uint32_t pseudo = sum16(datagram.subspan(12, 8)) + kProtoUdp + *udp_length;
    if (fold(sum16(segment, pseudo)) != 0) return Err{DhcpReplyError::kBadUdpChecksum};
  }
  return parse_bootp(segment.subspan(kUdpHeader), id);
}

std::string ipv4_text(std::uint32_t a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
  return buf;
}

}  // namespace abox::guest
