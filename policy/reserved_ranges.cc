// The table is written as text so that it can be checked against the IANA
// registries by eye, and turned into Cidrs once, on first use, by the same
// strict parser that reads policy files. A typo (host bits set, wrong family)
// is a broken invariant and aborts on that first use, which every unit test
// run reaches. After that, lookup is a scan of the address's own family,
// most specific entry first: a few dozen masked compares, no allocation, no
// locks (the table is immutable once the function-local static is built, and
// its construction is thread-safe).
//
// What counts as reserved is deliberately wider than "not globally
// reachable": abox asks whether a guest may reach the address, and a guest
// has no business with special-purpose infrastructure even where IANA marks
// it globally reachable (AS112, AMT, the PCP and TURN anycast addresses,
// ORCHIDv2, DETs). So the whole of 2001::/23 is reserved, with its
// sub-allocations listed only so that explain output names them precisely.
// Ranges that embed an IPv4 address (IPv4-mapped and -compatible, NAT64,
// 6to4, Teredo) are refused as a whole instead of being judged by the IPv4
// address inside: that address is reached over IPv4, where it gets its own
// check, and a translator in the path must not become a way around it. The
// IPv6 space outside 2000::/3 is covered too, so that nullptr really means
// "global unicast", as the header promises.
#include "policy/reserved_ranges.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace abox::policy {
namespace {

struct Entry {
  std::string_view cidr;
  std::string_view name;
  std::string_view reference;
};

constexpr Entry kV4[] = {
    // IANA IPv4 special-purpose address registry.
    {"0.0.0.0/8", "this network", "RFC 791, section 3.2"},
    {"0.0.0.0/32", "this host on this network", "RFC 1122, section 3.2.1.3"},
    {"10.0.0.0/8", "private-use", "RFC 1918"},
    {"100.64.0.0/10", "shared address space (CGNAT)", "RFC 6598"},
    {"127.0.0.0/8", "loopback", "RFC 1122, section 3.2.1.3"},
    {"169.254.0.0/16", "link-local", "RFC 3927"},
    {"172.16.0.0/12", "private-use", "RFC 1918"},
    {"192.0.0.0/24", "IETF protocol assignments", "RFC 6890, section 2.1"},
    {"192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"},
    {"192.0.0.8/32", "IPv4 dummy address", "RFC 7600"},
    {"192.0.0.9/32", "PCP anycast", "RFC 7723"},
    {"192.0.0.10/32", "TURN anycast", "RFC 8155"},
    {"192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 7050, RFC 8880"},
    {"192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 7050, RFC 8880"},
    {"192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"},
    {"192.31.196.0/24", "AS112-v4", "RFC 7535"},
    {"192.52.193.0/24", "AMT", "RFC 7450"},
    {"192.88.99.0/24", "6to4 relay anycast (deprecated)", "RFC 7526"},
    {"192.88.99.2/32", "6a44 relay anycast", "RFC 6751"},
    {"192.168.0.0/16", "private-use", "RFC 1918"},
    {"192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"},
    {"198.18.0.0/15", "benchmarking", "RFC 2544"},
    {"198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"},
    {"203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"},
    {"240.0.0.0/4", "reserved", "RFC 1112, section 4"},
    {"255.255.255.255/32", "limited broadcast", "RFC 919, section 7; RFC 8190"},
    // Not in the special-purpose registry, but never a unicast destination.
    {"224.0.0.0/4", "multicast", "RFC 5771"},
    // Cloud metadata services hand out instance credentials; each sits inside
    // a range above or in public space, and gets its own entry so that the
    // refusal says what was really being reached.
    {"169.254.169.254/32", "cloud metadata", "AWS, GCP and Azure instance metadata service"},
    {"169.254.170.2/32", "cloud metadata", "AWS ECS task metadata endpoint"},
    {"100.100.100.200/32", "cloud metadata", "Alibaba Cloud ECS metadata service"},
    {"168.63.129.16/32", "cloud metadata", "Azure WireServer"},
};

constexpr Entry kV6[] = {
    // IANA IPv6 special-purpose address registry.
    {"::/128", "unspecified", "RFC 4291"},
    {"::1/128", "loopback", "RFC 4291"},
    {"::ffff:0:0/96", "IPv4-mapped", "RFC 4291"},
    {"64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052"},
    {"64:ff9b:1::/48", "local-use NAT64", "RFC 8215"},
    {"100::/64", "discard-only", "RFC 6666"},
    // All of it, including the sub-allocations IANA marks globally reachable:
    // see the top of this file.
    {"2001::/23", "IETF protocol assignments", "RFC 2928"},
    {"2001::/32", "Teredo", "RFC 4380, RFC 8190"},
    {"2001:1::1/128", "PCP anycast", "RFC 7723"},
    {"2001:1::2/128", "TURN anycast", "RFC 8155"},
    {"2001:2::/48", "benchmarking", "RFC 5180"},
    {"2001:3::/32", "AMT", "RFC 7450"},
    {"2001:4:112::/48", "AS112-v6", "RFC 7535"},
    {"2001:10::/28", "ORCHID (deprecated)", "RFC 4843"},
    {"2001:20::/28", "ORCHIDv2", "RFC 7343"},
    {"2001:30::/28", "drone remote ID entity tags (DET)", "RFC 9374"},
    {"2001:db8::/32", "documentation", "RFC 3849"},
    {"2002::/16", "6to4", "RFC 3056"},
    {"2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"},
    {"3fff::/20", "documentation", "RFC 9637"},
    {"5f00::/16", "SRv6 SIDs", "RFC 9602"},
    {"fc00::/7", "unique local", "RFC 4193, RFC 8190"},
    {"fe80::/10", "link-local", "RFC 4291"},
    // Not in the special-purpose registry, but never a unicast destination
    // for a guest.
    {"::/96", "IPv4-compatible (deprecated)", "RFC 4291, section 2.5.5.1"},
    // Global unicast is only 2000::/3; the rest of the space is unassigned
    // or one of the entries here, and nothing outside it is routed on the
    // Internet. Covering it keeps nullptr meaning "global unicast", and names
    // an address such as 4000::1 instead of letting it through.
    {"::/3", "reserved by IETF (not global unicast)", "RFC 4291, section 2.4"},
    {"4000::/2", "reserved by IETF (not global unicast)", "RFC 4291, section 2.4"},
    {"8000::/1", "reserved by IETF (not global unicast)", "RFC 4291, section 2.4"},
    {"fec0::/10", "site-local (deprecated)", "RFC 3879"},
    {"ff00::/8", "multicast", "RFC 4291"},
    {"fd00:ec2::254/128", "cloud metadata", "AWS instance metadata service (IPv6)"},
};

constexpr std::size_t kV4Count = std::size(kV4);
constexpr std::size_t kCount = kV4Count + std::size(kV6);

// An entry as two 64-bit words and masks: lookup then costs two ANDs and two
// compares per entry instead of a Cidr::contains() call, which keeps a full
// scan well under the data path's 100 ns budget. IPv4 sits in the top 32
// bits of `hi` (IpAddress keeps its unused bytes zero).
struct Key {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  std::uint64_t mask_hi = 0;
  std::uint64_t mask_lo = 0;
  std::size_t index = 0;  // into Table::ranges
};

struct Table {
  std::array<ReservedRange, kCount> ranges;  // in source order, for listing
  // IPv4 keys then IPv6 keys, each part most specific first, so that the
  // first match is the answer.
  std::array<Key, kCount> keys;
};

std::uint64_t load_be64(std::span<const std::uint8_t, 8> b) {
  std::uint64_t v = 0;
  for (std::uint8_t byte : b) v = v << 8 | byte;
  return v;
}

std::uint64_t top_bits_mask(unsigned bits) {
  if (bits == 0) return 0;
  if (bits >= 64) return ~std::uint64_t{0};
  return ~std::uint64_t{0} << (64 - bits);
}

ReservedRange build(const Entry& e, IpAddress::Family family) {
  auto range = Cidr::parse(e.cidr);
  if (!range || range->base().family() != family) {
    std::fprintf(stderr, "abox: reserved range table entry \"%.*s\" is malformed\n",
                 static_cast<int>(e.cidr.size()), e.cidr.data());
    std::abort();
  }
  return ReservedRange{*range, e.name, e.reference, e.name == "cloud metadata"};
}

Key key_of(const Cidr& c, std::size_t index) {
  std::span<const std::uint8_t, 16> b(c.base().bytes());
  unsigned prefix = c.prefix();
  Key k;
  k.hi = load_be64(b.first<8>());
  k.lo = load_be64(b.last<8>());
  k.mask_hi = top_bits_mask(prefix);
  k.mask_lo = top_bits_mask(prefix > 64 ? prefix - 64 : 0);
  k.index = index;
  return k;
}

const Table& table() {
  static const Table built = [] {
    Table t{};
    std::size_t i = 0;
    for (const Entry& e : kV4) t.ranges[i++] = build(e, IpAddress::Family::v4);
    for (const Entry& e : kV6) t.ranges[i++] = build(e, IpAddress::Family::v6);
    for (i = 0; i < kCount; ++i) t.keys[i] = key_of(t.ranges[i].range, i);
    // Ties need no order: two different ranges of one length are disjoint.
    auto more_specific = [&t](const Key& a, const Key& b) {
      return t.ranges[a.index].range.prefix() > t.ranges[b.index].range.prefix();
    };
    std::sort(t.keys.begin(), t.keys.begin() + kV4Count, more_specific);
    std::sort(t.keys.begin() + kV4Count, t.keys.end(), more_specific);
    return t;
  }();
  return built;
}

}  // namespace

std::span<const ReservedRange> reserved_ranges() {
  return table().ranges;
}

const ReservedRange* find_reserved(const IpAddress& a) {
  const Table& t = table();
  std::span<const std::uint8_t, 16> b(a.bytes());
  std::uint64_t hi = load_be64(b.first<8>());
  std::uint64_t lo = load_be64(b.last<8>());
  std::span<const Key> keys(t.keys);
  for (const Key& k : a.is_v4() ? keys.first(kV4Count) : keys.subspan(kV4Count)) {
    if ((hi & k.mask_hi) == k.hi && (lo & k.mask_lo) == k.lo) return &t.ranges[k.index];
  }
  return nullptr;
}

}  // namespace abox::policy
