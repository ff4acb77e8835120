// The guest's IPv6 checks (see ipv6_guest_checks.h).
#include "netstack/stack/ipv6_guest_checks.h"

#include <algorithm>

namespace abox::netstack {

bool guest_ipv6_source_allowed(const Ipv6Fields& ip, const std::optional<Ipv6Prefix64>& own_prefix,
                               std::span<const Ipv6Address> gateway) {
  const auto& s = ip.source;
  if (std::find(gateway.begin(), gateway.end(), s) != gateway.end()) return false;
  // fe80::/64 exactly: fe80:0:0:0 in the top 64 bits (fe80::/10 beyond /64
  // is reserved by RFC 4291 and no guest uses it).
  constexpr Ipv6Prefix64 kLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0};
  if (std::equal(kLinkLocal.begin(), kLinkLocal.end(), s.begin())) return true;
  if (own_prefix && std::equal(own_prefix->begin(), own_prefix->end(), s.begin())) return true;
  const bool unspecified = std::all_of(s.begin(), s.end(), [](std::uint8_t b) { return b == 0; });
  return unspecified && ip.oddity == Ipv6Oddity::none && ip.upper_protocol == GuestFrame::kProtoIcmpv6;
}

std::optional<DropReason> ipv6_guest_refusal(const Ipv6Fields& ip,
                                             const std::optional<Ipv6Prefix64>& own_prefix,
                                             std::span<const Ipv6Address> gateway) {
  switch (ip.oddity) {
    case Ipv6Oddity::none:
      break;
    case Ipv6Oddity::routing_header:
      return DropReason::frame_ipv6_routing_header;
    case Ipv6Oddity::fragment:
      return DropReason::frame_ipv6_fragment;
    case Ipv6Oddity::fragment_hides_upper_layer:
      return DropReason::frame_ipv6_hidden_upper_layer;
    case Ipv6Oddity::unhandled_next_header:
      return DropReason::frame_ipv6_next_header;
  }
  if (!guest_ipv6_source_allowed(ip, own_prefix, gateway)) return DropReason::frame_ipv6_spoofed;
  return std::nullopt;
}

}  // namespace abox::netstack
