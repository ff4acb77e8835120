// NdpResponder: the gateway's side of IPv6 neighbour discovery (RFC 4861)
// and SLAAC (RFC 4862), sans-I/O, as DhcpServer is for IPv4 (issue 21).
//
// The gateway has two IPv6 addresses: fe80::1, its link-local one (what a
// router advertisement comes from, and what the guest's default route
// names), and PREFIX::1 in the instance's own /64, a ULA fixed per instance
// (instance_ula_prefix(): it never leaves abox-net, every flow is terminated
// there, as slirp and pasta give their guests one). Both answer to the
// gateway's MAC.
//
// What it answers (every message first checked: hop limit 255, code 0, the
// ICMPv6 checksum, the body's fixed size, options each of a non-zero length
// inside the message, RFC 4861 sections 6.1.1 and 7.1.1):
//   router solicitation     → a router advertisement, to the soliciting
//                             address (ff02::1 when it came from ::);
//   neighbour solicitation  → a neighbour advertisement, when its target is
//     for a gateway address     one of the gateway's two addresses (to the
//                             solicitor, or to ff02::1 for duplicate address
//                             detection from ::); any other target is the
//                             guest's own business (ignored, counted);
//   router advertisement    → ignored and counted: the guest is no router;
//   neighbour advertisement → ignored (the gateway learns the guest's MAC
//                             from the frames it sends, and keeps no cache
//                             a guest could poison), counted;
//   redirect                → ignored and counted.
// A router advertisement carries: current hop limit 64, no M flag, the O
// flag when other_configuration (the DNS server comes in RDNSS, and from the
// stateless DHCPv6 server for a guest that asks), router lifetime (router_lifetime_seconds; 0
// makes the gateway no default router, for an instance that carries no IPv6
// flows yet), the source link-layer address, the MTU, the prefix (on-link,
// autonomous, valid 1 day, preferred 4 hours) and RDNSS naming PREFIX::1
// (RFC 8106).
//
// Floods: answers are bounded by a token bucket (kBurst, then kPerSecond);
// past it a message is counted as rate_limited and gets nothing. Nothing is
// kept per guest address, so a flood of solicitations for random targets
// costs a check each and no memory.
//
// Invariants: replies are built into one buffer the responder owns (no
// allocation per frame after the first), valid until the next handle();
// nothing is read from the frame that GuestFrame did not check, or that is
// not bounds-checked here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/token_bucket.h"
#include "netstack/stack/guest_frame.h"
#include "netstack/stack/ipv6_guest_checks.h"

namespace abox::netstack {

// fdXX:XXXX:XXXX:0000::/64 from the instance's name: RFC 4193's 40-bit
// global ID taken from SHA-256 of the name (not random, so the guest keeps
// its addresses across restarts of the same instance), subnet 0.
Ipv6Prefix64 instance_ula_prefix(std::string_view instance);

struct NdpConfig {
  std::array<std::uint8_t, 6> gateway_mac{};
  Ipv6Prefix64 prefix{};  // the instance's /64 (instance_ula_prefix())
  std::uint32_t mtu = 1500;
  std::uint16_t router_lifetime_seconds = 1800;
  // The RDNSS option's lifetime: 0 names no DNS server over IPv6 (for an
  // instance that does not carry the DNS gate over IPv6).
  std::uint32_t rdnss_lifetime_seconds = 1800;
  // The O flag, "other configuration" (RFC 4861 section 4.2): set when the
  // stateless DHCPv6 server (dhcpv6_server.h) answers.
  bool other_configuration = false;
};

enum class NdpOutcome : std::uint8_t {
  router_advertisement,     // reply holds one
  neighbour_advertisement,  // reply holds one
  not_for_gateway,          // a solicitation for an address that is not the gateway's
  guest_router_advertisement,
  ignored,       // a neighbour advertisement, a redirect
  not_ndp,       // an ICMPv6 type that is not neighbour discovery
  malformed,     // fails a check above
  rate_limited,  // past the token bucket
};

struct NdpCounters {
  std::uint64_t router_advertisements = 0;     // sent
  std::uint64_t neighbour_advertisements = 0;  // sent
  std::uint64_t not_for_gateway = 0;
  std::uint64_t guest_router_advertisements = 0;
  std::uint64_t ignored = 0;
  std::uint64_t malformed = 0;
  std::uint64_t rate_limited = 0;
};

struct NdpResult {
  NdpOutcome outcome = NdpOutcome::malformed;
  std::span<const std::uint8_t> reply;  // a whole Ethernet frame, or empty
};

class NdpResponder {
 public:
  static constexpr unsigned kBurst = 32;
  static constexpr unsigned kPerSecond = 64;

  explicit NdpResponder(const NdpConfig& config);

  // One ICMPv6 message from the guest: `frame` is the whole Ethernet frame
  // and `view` its GuestFrame (IPv6, no oddity, a source the guest may use,
  // upper protocol ICMPv6: the caller has checked all of that).
  NdpResult handle(std::span<const std::uint8_t> frame, const GuestFrame& view, base::MonoTime now);

  // The instance's /64.
  const Ipv6Prefix64& prefix() const { return config_.prefix; }
  // The gateway's two addresses.
  const std::array<std::uint8_t, 16>& link_local() const { return link_local_; }
  const std::array<std::uint8_t, 16>& global() const { return global_; }
  const NdpCounters& counters() const { return counters_; }

 private:
  NdpResult answer_router_solicitation(std::span<const std::uint8_t> frame, const Ipv6Fields& ip);
  NdpResult answer_neighbour_solicitation(std::span<const std::uint8_t> frame, const Ipv6Fields& ip);
  // Ethernet + IPv6 (hop limit 255, ICMPv6) + `icmp` with its checksum, into reply_.
  std::span<const std::uint8_t> build(std::span<const std::uint8_t, 6> dst_mac,
                                      const std::array<std::uint8_t, 16>& src,
                                      const std::array<std::uint8_t, 16>& dst,
                                      std::span<const std::uint8_t> icmp);

  NdpConfig config_;
  std::array<std::uint8_t, 16> link_local_{};
  std::array<std::uint8_t, 16> global_{};
  base::TokenBucket answers_{kPerSecond, kBurst};
  NdpCounters counters_;
  std::vector<std::uint8_t> icmp_;   // the message being built
  std::vector<std::uint8_t> reply_;  // the frame handed back
};

}  // namespace abox::netstack
