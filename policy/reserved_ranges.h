// The reserved ranges: addresses no guest flow may reach and no DNS answer
// may carry, whatever the policy's names say.
//
// The table is the IANA IPv4 and IPv6 special-purpose address registries,
// plus the ranges that embed or translate an IPv4 address (IPv4-mapped,
// IPv4-compatible, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4, Teredo),
// CGNAT, multicast, the cloud metadata addresses and the documentation
// ranges. Each entry names itself and its reference so that `abox policy
// explain` and events can say why an address was refused.
//
// Lookup is allocation-free and takes the most specific entry that contains
// the address. Only a policy's [unsafe] allow_reserved lifts an entry, and
// that is decided in Policy, not here.
#pragma once

#include <span>
#include <string_view>

#include "policy/ip_address.h"

namespace abox::policy {

struct ReservedRange {
  Cidr range;
  std::string_view name;       // e.g. "loopback", "cloud metadata"
  std::string_view reference;  // e.g. "RFC 1122", "IANA IPv6 special-purpose registry"
  // Cloud metadata services hand out instance credentials: no [unsafe]
  // setting may ever lift such an entry.
  bool never_lifted = false;
};

// Every entry, IPv4 first, in no particular order within a family.
std::span<const ReservedRange> reserved_ranges();

// The most specific reserved entry containing a, or nullptr when a is an
// ordinary global unicast address.
const ReservedRange* find_reserved(const IpAddress& a);

}  // namespace abox::policy
