// The checks every guest IPv6 packet passes before abox-net does anything
// with it: its shape (GuestFrame's Ipv6Oddity) and its source address.
//
// Sources.
// The guest's own addresses are its link-local ones (fe80::/64: the kernel
// makes one per interface, from the MAC or as a stable-privacy address, so
// any interface identifier is the guest's) and, once the gateway hands out
// the instance's ULA /64 (issue 21, router advertisements), the SLAAC and
// privacy addresses inside that /64. The unspecified address :: is a source
// only for ICMPv6 (duplicate address detection, router solicitation and MLD
// reports are sent from it before an address is ready, RFC 4862 and 3810).
// Everything else (a global address, another ULA, multicast, loopback, an
// IPv4-mapped address) is spoofed: with it a guest could make the gateway
// answer on another host's behalf. So are the gateway's own two addresses
// inside those prefixes (fe80::1 and PREFIX::1): a guest sending from them
// would have abox-net relay its datagrams as if the gateway sent them (the
// IPv4 side drops the gateway's address as a source the same way).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "netstack/stack/drop_reason.h"
#include "netstack/stack/guest_frame.h"

namespace abox::netstack {

// The first 8 bytes of a /64 prefix.
using Ipv6Prefix64 = std::array<std::uint8_t, 8>;

using Ipv6Address = std::array<std::uint8_t, 16>;

// True when `ip` (a parsed IPv6 packet) comes from one of the guest's own
// addresses; `own_prefix` is the instance's /64, when it has one;
// `gateway` the gateway's own addresses, never the guest's.
bool guest_ipv6_source_allowed(const Ipv6Fields& ip, const std::optional<Ipv6Prefix64>& own_prefix,
                               std::span<const Ipv6Address> gateway = {});

// Why `ip` is dropped before anything else looks at it: its oddity (routing
// header, fragment, hidden upper layer, unhandled next header), else a
// source that is not the guest's; nullopt when it passes both.
std::optional<DropReason> ipv6_guest_refusal(const Ipv6Fields& ip,
                                             const std::optional<Ipv6Prefix64>& own_prefix,
                                             std::span<const Ipv6Address> gateway = {});

}  // namespace abox::netstack
