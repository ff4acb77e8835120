// GuestFrame (see guest_frame.h for what is checked).
#include "netstack/stack/guest_frame.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/byte_reader.h"

namespace abox::netstack {
namespace {

constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint16_t kEtherArp = 0x0806;
constexpr std::uint16_t kEtherIpv6 = 0x86DD;  // parsed in guest_frame_ipv6.cc
constexpr std::size_t kArpHeader = 28;        // IPv4 over Ethernet
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kUdpHeader = 8;
constexpr std::size_t kTcpHeader = 20;

}  // namespace

namespace {
// In the enum's order.
constexpr std::array<std::string_view, kFrameRefusals> kFrameRefusalSentences = {{
    "frame shorter than an Ethernet header",                        // ethernet_short
    "ARP frame shorter than an ARP header",                         // arp_short
    "IPv4 frame shorter than an IPv4 header",                       // ipv4_short
    "IPv4 ethertype with an IP version that is not 4",              // ipv4_version
    "IPv4 header length below 20 bytes or past the frame",          // ipv4_header_length
    "IPv4 total length shorter than its header or past the frame",  // ipv4_total_length
    "IPv4 header checksum is wrong",                                // ipv4_checksum
    "UDP packet shorter than a UDP header",                         // udp_short
    "UDP length shorter than its header or past the packet",        // udp_length
    "TCP packet shorter than a TCP header",                         // tcp_short
    "TCP data offset below 20 bytes or past the packet",            // tcp_data_offset
    "IPv6 frame shorter than an IPv6 header",                       // ipv6_short
    "IPv6 ethertype with an IP version that is not 6",              // ipv6_version
    "IPv6 payload length past the frame",                           // ipv6_payload_length
    "IPv6 extension header past the packet",                        // ipv6_extension_short
    "IPv6 extension headers out of order or too many",              // ipv6_extension_chain
    "ICMPv6 message shorter than its 4-byte header",                // icmpv6_short
}};
static_assert(!kFrameRefusalSentences.back().empty(), "every FrameRefusal has its sentence");
}  // namespace

std::string_view describe(FrameRefusal r) {
  return kFrameRefusalSentences.at(static_cast<std::size_t>(r));
}

std::uint32_t sum16(std::span<const std::uint8_t> data, std::uint32_t sum) {
  base::ByteReader r(data);
  while (auto word = r.u16be()) sum += *word;
  if (auto last = r.u8()) sum += std::uint32_t{*last} << 8;
  return sum;
}

std::uint16_t fold_checksum(std::uint32_t sum) {
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

base::Result<GuestFrame, FrameRefusal> GuestFrame::parse(std::span<const std::uint8_t> frame) {
  return parse_checked(frame, 0);
}

base::Result<OversizeFrame, FrameRefusal> GuestFrame::parse_head(std::span<const std::uint8_t> head,
                                                                 std::size_t frame_size) {
  using base::Err;
  if (frame_size < head.size()) return Err{FrameRefusal::ethernet_short};  // a link's bug: nothing to trust
  auto view = parse_checked(head, frame_size - head.size());
  if (!view.ok()) return Err{view.error()};
  OversizeFrame out{*view};
  base::ByteReader eth(head);
  const bool destination_mac = eth.skip(6);
  const auto source_mac = eth.bytes(6);
  const bool ethertype = eth.skip(2);
  if (!destination_mac || !source_mac || !ethertype) return Err{FrameRefusal::ethernet_short};
  std::memcpy(out.source_mac.data(), source_mac->data(), 6);
  const std::span<const std::uint8_t> ip = eth.rest();
  base::ByteReader fields(ip);
  switch (out.view.kind()) {
    case EtherKind::ipv4: {
      // parse_checked() read these already: the header is in the head.
      const std::uint8_t version_ihl = fields.u8().value_or(0);
      (void)fields.skip(1);
      out.packet_size = fields.u16be().value_or(0);
      const std::size_t header_length = std::size_t{version_ihl & 0x0Fu} * 4;
      if (out.view.ipv4().protocol == kProtoIcmp && !out.view.ipv4().fragment) {
        base::ByteReader icmp(ip.subspan(std::min(header_length, ip.size())));
        out.ipv4_icmp_type = icmp.u8().value_or(0);
      }
      break;
    }
    case EtherKind::ipv6: {
      (void)fields.skip(4);
      out.packet_size = kIpv6Header + fields.u16be().value_or(0);
      break;
    }
    case EtherKind::arp:
    case EtherKind::other:
      out.packet_size = ip.size();
      break;
  }
  out.packet_head = ip.first(std::min(out.packet_size, ip.size()));
  return out;
}

base::Result<GuestFrame, FrameRefusal> GuestFrame::parse_checked(std::span<const std::uint8_t> frame,
                                                                 std::size_t missing) {
  using base::Err;
  GuestFrame view;
  base::ByteReader eth(frame);
  const bool destination_mac = eth.skip(6);
  const auto source_mac = eth.bytes(6);
  const auto ethertype = eth.u16be();
  if (!destination_mac || !source_mac || !ethertype) return Err{FrameRefusal::ethernet_short};
  std::memcpy(view.source_mac_.data(), source_mac->data(), 6);
  switch (*ethertype) {
    case kEtherArp:
      if (eth.remaining() < kArpHeader) return Err{FrameRefusal::arp_short};
      view.kind_ = EtherKind::arp;
      return view;
    case kEtherIpv6: {
      auto v6 = parse_ipv6(eth.rest(), missing);
      if (v6.ok()) std::memcpy(v6->source_mac_.data(), source_mac->data(), 6);
      return v6;
    }
    case kEtherIpv4:
      view.kind_ = EtherKind::ipv4;
      break;
    default:
      view.kind_ = EtherKind::other;
      return view;
  }

  // IPv4: the fixed header, field by field.
  const std::span<const std::uint8_t> after_ethernet = eth.rest();
  if (after_ethernet.size() < kIpv4Header) return Err{FrameRefusal::ipv4_short};
  base::ByteReader ip(after_ethernet);
  const std::uint8_t version_ihl = ip.u8().value_or(0);
  (void)ip.skip(1);  // DSCP/ECN
  const std::uint16_t total_length = ip.u16be().value_or(0);
  (void)ip.skip(2);  // identification
  const std::uint16_t fragment = ip.u16be().value_or(0);
  (void)ip.skip(1);  // TTL
  const std::uint8_t protocol = ip.u8().value_or(0);
  (void)ip.skip(2);  // header checksum: checked over the whole header below
  const auto source = ip.bytes(4);
  const auto destination = ip.bytes(4);
  if (!source || !destination) return Err{FrameRefusal::ipv4_short};  // cannot happen: 20 bytes are there
  if ((version_ihl >> 4) != 4) return Err{FrameRefusal::ipv4_version};
  const std::size_t header_length = std::size_t{version_ihl & 0x0Fu} * 4;
  if (header_length < kIpv4Header || header_length > after_ethernet.size())
    return Err{FrameRefusal::ipv4_header_length};
  if (total_length < header_length || total_length > after_ethernet.size() + missing)
    return Err{FrameRefusal::ipv4_total_length};
  const std::span<const std::uint8_t> packet =
      after_ethernet.first(std::min<std::size_t>(total_length, after_ethernet.size()));
  if (fold_checksum(sum16(packet.first(header_length))) != 0) return Err{FrameRefusal::ipv4_checksum};

  // Network order, as the bytes stand (each a checked 4-byte sub-span).
  std::memcpy(&view.ipv4_.source_net, source->data(), 4);
  std::memcpy(&view.ipv4_.destination_net, destination->data(), 4);
  view.ipv4_.protocol = protocol;
  view.ipv4_.fragment = (fragment & 0x3FFF) != 0;
  view.ipv4_.dont_fragment = (fragment & 0x4000) != 0;
  view.ipv4_.packet = packet;
  view.ipv4_.payload = packet.subspan(header_length);
  if (view.ipv4_.fragment || (protocol != kProtoTcp && protocol != kProtoUdp) || missing != 0) return view;
  if (auto t = view.parse_transport(protocol, packet.subspan(header_length)); !t.ok()) return Err{t.error()};
  return view;
}

// The transport header of an unfragmented TCP or UDP packet.
base::Result<void, FrameRefusal> GuestFrame::parse_transport(std::uint8_t protocol,
                                                             std::span<const std::uint8_t> segment) {
  using base::Err;
  base::ByteReader transport(segment);
  const auto source_port = transport.u16be();
  const auto destination_port = transport.u16be();
  if (protocol == kProtoUdp) {
    const auto udp_length = transport.u16be();
    if (!source_port || !destination_port || !udp_length || !transport.skip(2))
      return Err{FrameRefusal::udp_short};
    if (*udp_length < kUdpHeader) return Err{FrameRefusal::udp_length};
    const auto payload = transport.bytes(*udp_length - kUdpHeader);
    if (!payload) return Err{FrameRefusal::udp_length};
    transport_.udp_payload = *payload;
  } else {
    const bool sequence_numbers = transport.skip(8);
    const auto offset = transport.u8();
    const auto flags = transport.u8();
    if (!source_port || !destination_port || !sequence_numbers || !offset || !flags ||
        segment.size() < kTcpHeader)
      return Err{FrameRefusal::tcp_short};
    const std::size_t data_offset = std::size_t{*offset} / 16 * 4;
    if (data_offset < kTcpHeader || data_offset > segment.size()) return Err{FrameRefusal::tcp_data_offset};
    transport_.tcp_flags = *flags;
  }
  transport_.source_port = *source_port;
  transport_.destination_port = *destination_port;
  transport_protocol_ = protocol;
  has_transport_ = true;
  return {};
}

}  // namespace abox::netstack
