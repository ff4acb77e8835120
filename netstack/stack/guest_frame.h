// GuestFrame: one Ethernet frame from the guest, validated once and then
// read through typed fields. It is the only place where the stack reads the
// headers of a guest frame; nothing after it indexes guest bytes.
//
// What parse() checks (everything through base::ByteReader), by ethertype:
//   - every frame: the 14-byte Ethernet header is there;
//   - ARP: the 28-byte ARP header for IPv4 over Ethernet is there (lwIP
//     2.1.3's etharp_input() reads it without checking: a heap over-read the
//     guest_frames fuzzer found);
//   - IPv4: version 4; a header length of at least 20 bytes that the frame
//     holds; a total length that holds the header and lies inside the frame
//     (bytes past it are Ethernet padding, ignored); the header checksum;
//     then, for a packet that is not a fragment, the transport header:
//       UDP: 8 bytes, and a UDP length that holds them and lies inside the
//            packet (the payload is exactly that long);
//       TCP: 20 bytes, and a data offset that holds them and lies inside
//            the packet;
//     other protocols (ICMP) and fragments carry no transport fields (a
//     fragment's offset says where its bytes go, not what they are);
//   - IPv6 (guest_frame_ipv6.cc): version 6; the 40-byte fixed header; a
//     payload length that lies inside the frame (bytes past it are padding);
//     then a walk of the extension headers, at most kMaxIpv6ExtensionHeaders
//     of them, each inside the packet, Hop-by-Hop only first (RFC 8200
//     section 4.1). The walk ends at TCP, UDP, ICMPv6 (4 bytes: type, code,
//     checksum) or No Next Header, and a TCP or UDP header there is checked
//     as for IPv4. What a guest has no business sending is not a refusal
//     but an Ipv6Oddity that the stack drops under its own DropReason: a
//     routing header (type 0 or any other), a fragment (no reassembly, as
//     for IPv4), a first fragment that does not hold the whole header chain
//     (RFC 7112: it hides the upper-layer header), and a next header that is
//     neither a known extension header nor an upper layer abox-net handles
//     (an unknown one, or IPsec, mobility, HIP, shim6). The walk stops at the
//     first oddity;
//   - every other ethertype: nothing past the Ethernet header (the stack
//     drops them, counted).
// A frame that fails one check is refused with the first check it failed
// (FrameRefusal); the stack drops it, counted, and lwIP never sees it.
//
// parse_head() reads the start of a frame the link dropped as over the MTU
// (Link::last_oversize_head()), for the ICMP "packet too big" the stack
// answers it with: the same checks, but the IP lengths are checked against
// the frame's real length, the transport header is not read (is_tcp() and
// is_udp() are false; upper_protocol and protocol say what it is), and an
// IPv6 extension header chain must end inside the head (else
// ipv6_extension_short).
//
// The view refers to the frame's bytes (the UDP payload is a sub-span): the
// bytes must outlive it. It allocates nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/result.h"

namespace abox::netstack {

enum class FrameRefusal : std::uint8_t {
  ethernet_short,
  arp_short,
  ipv4_short,
  ipv4_version,
  ipv4_header_length,
  ipv4_total_length,
  ipv4_checksum,
  udp_short,
  udp_length,
  tcp_short,
  tcp_data_offset,
  ipv6_short,
  ipv6_version,
  ipv6_payload_length,
  ipv6_extension_short,  // an extension header that runs past the packet
  ipv6_extension_chain,  // Hop-by-Hop not first, or more than kMaxIpv6ExtensionHeaders
  icmpv6_short,
  count_,  // not a refusal: the number of them
};
inline constexpr std::size_t kFrameRefusals = static_cast<std::size_t>(FrameRefusal::count_);
// A sentence for the event log ("IPv4 header checksum is wrong").
std::string_view describe(FrameRefusal r);

enum class EtherKind : std::uint8_t { ipv4, arp, ipv6, other };

// Checked fields of an IPv4 header. Addresses in network byte order, as
// lwIP keeps them.
struct Ipv4Fields {
  std::uint32_t source_net = 0;
  std::uint32_t destination_net = 0;
  std::uint8_t protocol = 0;
  bool fragment = false;       // MF set or a non-zero offset
  bool dont_fragment = false;  // DF set
  // The packet (header to the total length's end) and what follows the
  // header in it: an echo request is read from `payload`, and `packet` is
  // what an ICMP error quotes (echo_message.h).
  std::span<const std::uint8_t> packet = {};
  std::span<const std::uint8_t> payload = {};
};

// Extension headers walked before the upper layer; a real guest sends at most
// one or two (Hop-by-Hop for MLD, Destination Options), never eight.
inline constexpr std::size_t kMaxIpv6ExtensionHeaders = 8;

// What an IPv6 packet carries that abox-net drops on sight (see the top of
// this file); `none` for a packet whose header chain ends at an upper layer.
enum class Ipv6Oddity : std::uint8_t {
  none,
  routing_header,              // any routing header (type 0 among them)
  fragment,                    // a fragment header
  fragment_hides_upper_layer,  // a first fragment without the whole header chain
  unhandled_next_header,       // unknown, or IPsec, mobility, HIP, shim6
};

// Checked fields of an IPv6 header and its extension headers. Addresses in
// network byte order.
struct Ipv6Fields {
  std::array<std::uint8_t, 16> source{};
  std::array<std::uint8_t, 16> destination{};
  std::uint8_t hop_limit = 0;
  // The next header that ended the walk: TCP, UDP, ICMPv6 or No Next Header
  // when oddity is none; else the one the walk stopped at.
  std::uint8_t upper_protocol = 0;
  std::uint8_t extension_headers = 0;  // how many were walked
  Ipv6Oddity oddity = Ipv6Oddity::none;
  std::uint8_t routing_type = 0;  // routing_header only: the header's type
  // ICMPv6 only (upper_protocol 58, no oddity): its type and code.
  std::uint8_t icmp_type = 0;
  std::uint8_t icmp_code = 0;
  // The upper-layer bytes (from its header to the payload length's end):
  // ICMPv6 messages are read from here (NDP, echo).
  std::span<const std::uint8_t> upper_layer = {};
  // The whole packet, fixed header to the payload length's end (what an
  // ICMPv6 error quotes).
  std::span<const std::uint8_t> packet = {};
};

// Checked fields of a TCP or UDP header (present only for an unfragmented
// IPv4 packet, or an IPv6 packet without an oddity, of that protocol).
struct TransportFields {
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  std::uint8_t tcp_flags = 0;                      // TCP only: the flag bits (FIN 0x01 .. CWR 0x80)
  std::span<const std::uint8_t> udp_payload = {};  // UDP only: exactly the UDP length's bytes
};

struct OversizeFrame;

class GuestFrame {
 public:
  static constexpr std::uint8_t kProtoIcmp = 1;
  static constexpr std::uint8_t kProtoTcp = 6;
  static constexpr std::uint8_t kProtoUdp = 17;
  static constexpr std::uint8_t kProtoIcmpv6 = 58;
  static constexpr std::uint8_t kProtoNoNextHeader = 59;
  static constexpr std::uint8_t kTcpSyn = 0x02;
  static constexpr std::uint8_t kTcpAck = 0x10;

  // Validates `frame` (see the top of this file).
  static base::Result<GuestFrame, FrameRefusal> parse(std::span<const std::uint8_t> frame);
  // Validates `head`, the first bytes of a frame of frame_size bytes that
  // the link dropped as over the MTU (see the top of this file).
  static base::Result<OversizeFrame, FrameRefusal> parse_head(std::span<const std::uint8_t> head,
                                                              std::size_t frame_size);

  EtherKind kind() const { return kind_; }
  // The Ethernet source address (the guest's MAC, as the guest wrote it).
  const std::array<std::uint8_t, 6>& source_mac() const { return source_mac_; }
  bool is_ipv4() const { return kind_ == EtherKind::ipv4; }
  // Meaningful when is_ipv4().
  const Ipv4Fields& ipv4() const { return ipv4_; }
  bool is_ipv6() const { return kind_ == EtherKind::ipv6; }
  // Meaningful when is_ipv6().
  const Ipv6Fields& ipv6() const { return ipv6_; }
  // Either family.
  bool is_tcp() const { return has_transport_ && transport_protocol_ == kProtoTcp; }
  bool is_udp() const { return has_transport_ && transport_protocol_ == kProtoUdp; }
  // Meaningful when is_tcp() or is_udp().
  const TransportFields& transport() const { return transport_; }
  // A TCP segment that opens a connection: SYN without ACK.
  bool is_tcp_syn_only() const { return is_tcp() && (transport_.tcp_flags & (kTcpSyn | kTcpAck)) == kTcpSyn; }

 private:
  GuestFrame() = default;
  // parse() and parse_head(): `missing` is how many bytes of the frame are
  // not in `frame` (0: it is whole).
  static base::Result<GuestFrame, FrameRefusal> parse_checked(std::span<const std::uint8_t> frame,
                                                              std::size_t missing);
  // The IPv6 part of parse(), after the Ethernet header (guest_frame_ipv6.cc).
  static base::Result<GuestFrame, FrameRefusal> parse_ipv6(std::span<const std::uint8_t> after_ethernet,
                                                           std::size_t missing);
  // The TCP or UDP header at the start of `segment` (which runs to the end
  // of the IP packet), into transport_.
  base::Result<void, FrameRefusal> parse_transport(std::uint8_t protocol,
                                                   std::span<const std::uint8_t> segment);

  EtherKind kind_ = EtherKind::other;
  std::array<std::uint8_t, 6> source_mac_{};
  bool has_transport_ = false;
  std::uint8_t transport_protocol_ = 0;
  Ipv4Fields ipv4_;
  Ipv6Fields ipv6_;
  TransportFields transport_;
};

// What GuestFrame::parse_head() found in the head of an oversize frame.
struct OversizeFrame {
  GuestFrame view;
  std::array<std::uint8_t, 6> source_mac{};  // the Ethernet source: the guest's interface
  // The IP packet's first bytes (from its header on, never past its own
  // length), and that length (its header's, which the frame holds).
  std::span<const std::uint8_t> packet_head = {};
  std::size_t packet_size = 0;
  // IPv4 ICMP (protocol 1) only, when the head holds it: the message type.
  std::uint8_t ipv4_icmp_type = 0;
};

// The ones' complement sum of big-endian 16-bit words (an odd last byte
// padded with zero), not folded: IPv4 header, pseudo-header and DHCP reply
// checksums.
std::uint32_t sum16(std::span<const std::uint8_t> data, std::uint32_t sum = 0);
// Folds a sum16() and inverts it: the checksum field's value (0 over a
// header whose field is right).
std::uint16_t fold_checksum(std::uint32_t sum);

}  // namespace abox::netstack
