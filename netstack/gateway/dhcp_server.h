// DhcpServer: the gateway's DHCPv4 server (RFC 2131), sans-I/O. The guest of
// an instance has exactly one address, so there is one lease and no table:
// every client on the link is offered the instance's guest address, for a
// fixed time, with the gateway as router and DNS server and the link's MTU.
//
// Life of one message: GuestStack validates every guest frame once
// (GuestFrame, netstack/stack/guest_frame.h: IPv4 lengths and header
// checksum, the UDP length) and routes an unfragmented IPv4 datagram to UDP
// port 67 here, before lwIP (a DISCOVER comes from 0.0.0.0, which the
// spoofing check would drop): handle() gets the UDP payload, the BOOTP
// message, and it goes nowhere else. It is answered, ignored or counted as
// malformed; parse_dhcp_client_message() checks it (dhcp_message.h lists
// its checks).
//
// Answers:
//   DISCOVER                → OFFER of the guest address
//   REQUEST for the guest   → ACK  (the address from option 50, or ciaddr)
//   REQUEST for another     → NAK  (broadcast, as RFC 2131 says)
//   REQUEST to another server (option 54 is not the gateway) → ignored
//   INFORM                  → ACK without lease (yiaddr 0)
//   DECLINE, RELEASE        → ignored: the lease is fixed; counted
//   relayed (giaddr set)    → ignored: the guest is on the link
// Every OFFER/ACK carries: message type, server id (gateway), lease time
// (lease_seconds; INFORM excepted), T1 = lease/2, T2 = lease*7/8, subnet
// mask, router (gateway), DNS server (gateway), interface MTU (option 26).
// Replies go to 255.255.255.255 and ff:ff:ff:ff:ff:ff when the client set the
// broadcast flag (or for a NAK), else to the client's address (ciaddr when
// it has one, yiaddr otherwise) and chaddr, from the gateway's address and
// MAC, UDP 67 → 68, with IPv4 and UDP checksums.
//
// Limits: no state per client; the reply is built into one buffer the
// server owns (no allocation per frame), valid until the next handle().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "netstack/gateway/dhcp_message.h"

namespace abox::netstack {

struct DhcpServerConfig {
  std::uint32_t gateway = 0x0A00'0202;  // host order: 10.0.2.2
  std::uint32_t guest = 0x0A00'020F;    // 10.0.2.15
  unsigned prefix_len = 24;             // 1..30
  std::array<std::uint8_t, 6> gateway_mac{};
  std::size_t mtu = 1500;  // option 26 (the link's MTU, 68..65535)
  std::uint32_t lease_seconds = 24 * 3600;
};

enum class DhcpOutcome : std::uint8_t {
  offer,      // reply holds an OFFER
  ack,        // reply holds an ACK
  nak,        // reply holds a NAK
  ignored,    // a valid message that gets no answer (see the top of this file)
  malformed,  // not a valid client message: dropped
};

struct DhcpResult {
  DhcpOutcome outcome = DhcpOutcome::malformed;
  // The reply frame (empty unless offer, ack or nak); valid until the next
  // handle().
  std::span<const std::uint8_t> reply;
  // Why it was malformed or ignored (a short phrase), "" otherwise.
  const char* reason = "";
};

class DhcpServer {
 public:
  static constexpr std::uint16_t kServerPort = 67;

  explicit DhcpServer(const DhcpServerConfig& config);

  // The UDP payload of one datagram from the guest to port 67 (see the
  // top of this file).
  DhcpResult handle(std::span<const std::uint8_t> bootp);

 private:
  std::span<const std::uint8_t> build_reply(const DhcpClientMessage& m, std::uint8_t type,
                                            std::uint32_t yiaddr);

  DhcpServerConfig config_;
  std::vector<std::uint8_t> reply_;
};

}  // namespace abox::netstack
