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
//   - IPv6 and every other ethertype: nothing past the Ethernet header
//     (the stack drops them, counted).
// A frame that fails one check is refused with the first check it failed
// (FrameRefusal); the stack drops it, counted, and lwIP never sees it.
//
// The view refers to the frame's bytes (the UDP payload is a sub-span): the
// bytes must outlive it. It allocates nothing.
#pragma once

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
  bool fragment = false;  // MF set or a non-zero offset
};

// Checked fields of a TCP or UDP header (present only for an unfragmented
// IPv4 packet of that protocol).
struct TransportFields {
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  std::uint8_t tcp_flags = 0;                      // TCP only: the flag bits (FIN 0x01 .. CWR 0x80)
  std::span<const std::uint8_t> udp_payload = {};  // UDP only: exactly the UDP length's bytes
};

class GuestFrame {
 public:
  static constexpr std::uint8_t kProtoTcp = 6;
  static constexpr std::uint8_t kProtoUdp = 17;
  static constexpr std::uint8_t kTcpSyn = 0x02;
  static constexpr std::uint8_t kTcpAck = 0x10;

  // Validates `frame` (see the top of this file).
  static base::Result<GuestFrame, FrameRefusal> parse(std::span<const std::uint8_t> frame);

  EtherKind kind() const { return kind_; }
  bool is_ipv4() const { return kind_ == EtherKind::ipv4; }
  // Meaningful when is_ipv4().
  const Ipv4Fields& ipv4() const { return ipv4_; }
  bool is_tcp() const { return has_transport_ && ipv4_.protocol == kProtoTcp; }
  bool is_udp() const { return has_transport_ && ipv4_.protocol == kProtoUdp; }
  // Meaningful when is_tcp() or is_udp().
  const TransportFields& transport() const { return transport_; }
  // A TCP segment that opens a connection: SYN without ACK.
  bool is_tcp_syn_only() const { return is_tcp() && (transport_.tcp_flags & (kTcpSyn | kTcpAck)) == kTcpSyn; }

 private:
  GuestFrame() = default;
  EtherKind kind_ = EtherKind::other;
  bool has_transport_ = false;
  Ipv4Fields ipv4_;
  TransportFields transport_;
};

// The ones' complement sum of big-endian 16-bit words (an odd last byte
// padded with zero), not folded: IPv4 header, pseudo-header and DHCP reply
// checksums.
std::uint32_t sum16(std::span<const std::uint8_t> data, std::uint32_t sum = 0);
// Folds a sum16() and inverts it: the checksum field's value (0 over a
// header whose field is right).
std::uint16_t fold_checksum(std::uint32_t sum);

}  // namespace abox::netstack
