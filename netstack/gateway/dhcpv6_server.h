// Dhcpv6Server: the gateway's stateless DHCPv6 server (RFC 8415 section
// 6.1, RFC 3646), sans-I/O, as NdpResponder is for neighbour discovery
// (issue 21). Addresses come by SLAAC; the one thing a client may ask here
// is the DNS server, for a guest that does not read RDNSS from the router
// advertisement (whose O flag, "other configuration", says to ask).
//
// What it answers: an Information-Request (11) from the guest's link-local
// address, port 546, to All_DHCP_Relay_Agents_and_Servers (ff02::1:2) port
// 547, with a right UDP checksum (unless the link vouches for it), no IA option, and no server identifier or
// the gateway's own (RFC 8415 section 16.12) gets a Reply (7), unicast from
// the gateway's link-local address (fe80::1) port 547 to the client's
// address port 546, holding the transaction id, the server identifier (a
// DUID-LL of the gateway's MAC), the client identifier echoed, and DNS
// recursive name servers naming PREFIX::1 (the DNS gate); nothing else.
// Solicit, Request and every other client type get nothing (ignored,
// counted): there are no addresses to lease. A message the parser refuses,
// or a bad checksum, is malformed (counted).
//
// Floods: answers are bounded by a token bucket (kBurst, then kPerSecond);
// past it a message is counted as rate_limited and gets nothing. Nothing is
// kept per client.
//
// Invariants: the reply is built into one buffer the server owns (no
// allocation per frame after the first), valid until the next handle();
// nothing is read from the frame that GuestFrame did not check, or that is
// not bounds-checked here.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/clock.h"
#include "base/token_bucket.h"
#include "netstack/stack/guest_frame.h"

namespace abox::netstack {

struct Dhcpv6ServerConfig {
  std::array<std::uint8_t, 6> gateway_mac{};
  std::array<std::uint8_t, 16> gateway_link_local{};  // the Reply's source
  std::array<std::uint8_t, 16> dns_server{};          // PREFIX::1
};

enum class Dhcpv6Outcome : std::uint8_t {
  reply,         // reply holds one
  ignored,       // a client type other than Information-Request, or one the server must discard
  malformed,     // a bad checksum, or the parser refused it
  rate_limited,  // past the token bucket
};

struct Dhcpv6Counters {
  std::uint64_t answered = 0;
  std::uint64_t ignored = 0;
  std::uint64_t malformed = 0;
  std::uint64_t rate_limited = 0;
};

struct Dhcpv6Result {
  Dhcpv6Outcome outcome = Dhcpv6Outcome::malformed;
  std::span<const std::uint8_t> reply;  // a whole Ethernet frame, or empty
};

class Dhcpv6Server {
 public:
  static constexpr std::uint16_t kClientPort = 546;
  static constexpr std::uint16_t kServerPort = 547;
  static constexpr std::array<std::uint8_t, 16> kAllServers = {0xFF, 0x02, 0, 0, 0, 0, 0, 0,
                                                               0,    0,    0, 0, 0, 1, 0, 2};
  static constexpr unsigned kBurst = 16;
  static constexpr unsigned kPerSecond = 16;

  explicit Dhcpv6Server(const Dhcpv6ServerConfig& config);

  // Whether a frame is for this server: IPv6 UDP from port 546 to ff02::1:2
  // port 547. The caller routes it to handle() then, and nowhere else.
  static bool is_for_server(const GuestFrame& view);

  // One datagram for the server: `frame` is the whole Ethernet frame and
  // `view` its GuestFrame (is_for_server(), a source the guest may use: the
  // caller has checked both). `checksum_trusted`: the link says the guest's
  // kernel verified the UDP checksum or left it partial for us (a tap's
  // vnet header; Link::last_frame_checksum_trusted()), so it is not checked.
  Dhcpv6Result handle(std::span<const std::uint8_t> frame, const GuestFrame& view, base::MonoTime now,
                      bool checksum_trusted = false);

  const Dhcpv6Counters& counters() const { return counters_; }

 private:
  Dhcpv6ServerConfig config_;
  std::array<std::uint8_t, 10> duid_{};
  base::TokenBucket answers_{kPerSecond, kBurst};
  Dhcpv6Counters counters_;
  std::vector<std::uint8_t> message_;  // the Reply being built
  std::vector<std::uint8_t> reply_;    // the frame handed back
};

}  // namespace abox::netstack
