// GuestFrame's IPv6 part (see guest_frame.h for what is checked).
//
// The walk follows the Next Header chain from the fixed header, one
// extension header at a time, never more than kMaxIpv6ExtensionHeaders, each
// read through base::ByteReader from a span that ends at the payload
// length. It costs at most that many header reads and allocates nothing.
//
// Refusals (FrameRefusal) are for headers that do not add up: the frame is
// malformed whatever abox-net would do with it. Oddities are for packets
// that are well formed but that no guest of ours needs and that are the
// classic ways around a filter: a routing header (RFC 5095 deprecated type
// 0, and a guest's flows all end at the gateway, so no type has a use), a
// fragment (abox-net never reassembles, for IPv4 either), a first fragment
// that leaves the upper-layer header to a later fragment (RFC 7112), and a
// next header the filter cannot see past. Inside a first fragment, a chain
// that runs past the packet is that last oddity, not a refusal: the rest is
// in the fragments that follow.
#include <algorithm>
#include <cstring>

#include "base/byte_reader.h"
#include "netstack/stack/guest_frame.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kFragmentHeader = 8;
constexpr std::size_t kIcmpv6Header = 4;
constexpr std::size_t kUdpHeader = 8;
constexpr std::size_t kTcpHeader = 20;

// Next Header values (IANA "Assigned Internet Protocol Numbers", and RFC
// 8200 section 4 / RFC 7045 for which are extension headers).
constexpr std::uint8_t kHopByHop = 0;
constexpr std::uint8_t kRouting = 43;
constexpr std::uint8_t kFragment = 44;
constexpr std::uint8_t kDestinationOptions = 60;

// The smallest header an upper layer must have in a first fragment for the
// chain to count as whole (RFC 7112 section 5; for TCP the fixed header).
std::size_t upper_layer_minimum(std::uint8_t protocol) {
  switch (protocol) {
    case GuestFrame::kProtoTcp:
      return kTcpHeader;
    case GuestFrame::kProtoUdp:
      return kUdpHeader;
    case GuestFrame::kProtoIcmpv6:
      return kIcmpv6Header;
    default:
      return 0;  // No Next Header
  }
}

bool is_upper_layer(std::uint8_t next) {
  return next == GuestFrame::kProtoTcp || next == GuestFrame::kProtoUdp || next == GuestFrame::kProtoIcmpv6 ||
         next == GuestFrame::kProtoNoNextHeader;
}

}  // namespace

base::Result<GuestFrame, FrameRefusal> GuestFrame::parse_ipv6(std::span<const std::uint8_t> after_ethernet,
                                                              std::size_t missing) {
  using base::Err;
  GuestFrame view;
  view.kind_ = EtherKind::ipv6;
  Ipv6Fields& ip = view.ipv6_;

  base::ByteReader fixed(after_ethernet);
  const auto version_class_flow = fixed.u32be();
  const auto payload_length = fixed.u16be();
  const auto next_header = fixed.u8();
  const auto hop_limit = fixed.u8();
  const auto source = fixed.bytes(16);
  const auto destination = fixed.bytes(16);
  if (!version_class_flow || !payload_length || !next_header || !hop_limit || !source || !destination)
    return Err{FrameRefusal::ipv6_short};
  if ((*version_class_flow >> 28) != 6) return Err{FrameRefusal::ipv6_version};
  // A payload length of 0 with a Hop-by-Hop jumbo option means a jumbogram
  // (RFC 2675); on a link of at most 64 KiB frames there is none, and the
  // walk below finds its chain past the 40 bytes and refuses it.
  if (*payload_length > fixed.remaining() + missing) return Err{FrameRefusal::ipv6_payload_length};
  std::memcpy(ip.source.data(), source->data(), 16);
  std::memcpy(ip.destination.data(), destination->data(), 16);
  ip.hop_limit = *hop_limit;

  // A head (missing != 0) is walked as far as it goes: a chain that runs
  // past it is short, as one that runs past a whole packet.
  const std::span<const std::uint8_t> packet =
      after_ethernet.first(std::min(kIpv6Header + *payload_length, after_ethernet.size()));
  ip.packet = packet;
  std::size_t at = kIpv6Header;  // where the header named by `next` starts
  std::uint8_t next = *next_header;
  bool first_fragment = false;  // inside a fragment whose offset is 0
  // A first fragment whose chain does not fit stops here (the oddity); any
  // other packet whose chain does not fit is malformed.
  auto short_chain = [&](FrameRefusal refusal) -> base::Result<GuestFrame, FrameRefusal> {
    if (!first_fragment) return Err{refusal};
    ip.oddity = Ipv6Oddity::fragment_hides_upper_layer;
    ip.upper_protocol = next;
    return view;
  };

  while (!is_upper_layer(next)) {
    if (ip.extension_headers == kMaxIpv6ExtensionHeaders)
      return short_chain(FrameRefusal::ipv6_extension_chain);
    base::ByteReader header(packet.subspan(at));
    switch (next) {
      case kHopByHop:
        if (ip.extension_headers != 0) return Err{FrameRefusal::ipv6_extension_chain};
        [[fallthrough]];
      case kDestinationOptions:
      case kRouting: {
        const auto following = header.u8();
        const auto length_units = header.u8();
        if (!following || !length_units) return short_chain(FrameRefusal::ipv6_extension_short);
        const std::size_t length = (std::size_t{*length_units} + 1) * 8;
        if (length > packet.size() - at) return short_chain(FrameRefusal::ipv6_extension_short);
        if (next == kRouting) {
          // Read the type only once the whole header is known to be there.
          ip.routing_type = header.u8().value_or(0);
          ip.oddity = Ipv6Oddity::routing_header;
          ip.upper_protocol = next;
          ++ip.extension_headers;
          return view;
        }
        next = *following;
        at += length;
        break;
      }
      case kFragment: {
        const auto following = header.u8();
        const bool reserved = header.skip(1);
        const auto offset_flags = header.u16be();
        if (!following || !reserved || !offset_flags || !header.skip(4))
          return short_chain(FrameRefusal::ipv6_extension_short);
        if (first_fragment) return Err{FrameRefusal::ipv6_extension_chain};  // two fragment headers
        ++ip.extension_headers;
        if ((*offset_flags & 0xFFF8) != 0) {
          // A later fragment: what it carries is not a header at all.
          ip.oddity = Ipv6Oddity::fragment;
          ip.upper_protocol = next;
          return view;
        }
        first_fragment = true;
        next = *following;
        at += kFragmentHeader;
        continue;  // counted already
      }
      default:
        // Unknown, or one abox-net does not handle (ESP 50, AH 51, mobility
        // 135, HIP 139, shim6 140, experimental 253/254): nothing past it
        // can be read, so nothing past it could be judged.
        ip.oddity = Ipv6Oddity::unhandled_next_header;
        ip.upper_protocol = next;
        return view;
    }
    ++ip.extension_headers;
  }

  ip.upper_protocol = next;
  const std::span<const std::uint8_t> upper = packet.subspan(at);
  if (first_fragment) {
    if (upper.size() < upper_layer_minimum(next)) return short_chain(FrameRefusal::ipv6_extension_short);
    ip.oddity = Ipv6Oddity::fragment;
    return view;
  }
  ip.upper_layer = upper;
  if (next == kProtoIcmpv6) {
    base::ByteReader icmp(upper);
    const auto type = icmp.u8();
    const auto code = icmp.u8();
    if (!type || !code || !icmp.skip(2)) return Err{FrameRefusal::icmpv6_short};
    ip.icmp_type = *type;
    ip.icmp_code = *code;
    return view;
  }
  if ((next == kProtoTcp || next == kProtoUdp) && missing == 0) {
    if (auto t = view.parse_transport(next, upper); !t.ok()) return Err{t.error()};
  }
  return view;
}

}  // namespace abox::netstack
