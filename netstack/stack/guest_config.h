// GuestConfig: how a GuestStack is set up (addresses, the broker, whether
// the link and host sockets go through the ring). Read by the stack and by
// its flows (flow_services.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "policy/ip_address.h"

namespace abox::netstack {

struct GuestConfig {
  policy::IpAddress gateway = policy::IpAddress::v4(0x0A000202);  // 10.0.2.2
  policy::IpAddress guest = policy::IpAddress::v4(0x0A00020F);    // 10.0.2.15
  unsigned prefix_len = 24;
  std::array<std::uint8_t, 6> gateway_mac{0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};
  // Where flows to [[broker]] names go (a unix stream socket), and the
  // instance name they are handed off under. Empty: brokered names are
  // refused (never sent out directly).
  std::string broker_path;
  std::string instance = "guest";
  // Read and write the link through the loop's ring when it can (link.h):
  // one completion per frame read instead of a readiness wake-up, the read,
  // and a read that finds nothing; small frames written with the turn's
  // wait instead of a writev each (io::RingWriter). Off: receive() on
  // readiness and send_frame().
  bool link_on_ring = true;
  // Host sockets on the ring: guest bytes go to a TCP flow's socket by a
  // sendmsg request handed over with the turn's wait, guest datagrams of up
  // to io::RingWriter::kSlotBytes to their UDP sockets likewise, and host
  // datagrams come by a multishot receive into a shared io::ReceiveBufferPool
  // instead of readiness and recvmmsg. Off: the system calls.
  bool host_io_on_ring = true;
  // IPv6 on the guest side (issue 21; off by default): the gateway answers
  // neighbour and router solicitations (netstack/gateway/ndp_responder.h)
  // with the instance's ULA /64 from `instance`, and the guest's addresses
  // in it pass the source check. Without ipv6_flows, router
  // advertisements carry router and RDNSS lifetimes of 0: the guest gets
  // addresses but no IPv6 default route and no IPv6 DNS server, so a
  // connection to a global IPv6 address fails at once (a quick IPv4
  // fallback), not after a timeout, and everything but neighbour discovery
  // is still dropped, counted.
  bool ipv6_neighbour_discovery = false;
  // Audit mode forced on (abox-net run --audit), whatever the policy's
  // [mode] says: see GuestStack::audit().
  bool audit = false;
  // IPv6 flows (needs ipv6_neighbour_discovery; abox-net run --ipv6 on):
  // the guest's IPv6 TCP and unicast UDP go to lwIP and through the same
  // admission as IPv4 (to an address the gate answered in AAAA for an
  // allowed name), each to an AF_INET6 host socket; the DNS gate is served
  // on PREFIX::1 too; echo to the gateway's addresses is answered. The RA's
  // router and RDNSS lifetimes are 1800 s: the guest gets an IPv6 default
  // route and the gate as its IPv6 DNS server. Every other ICMPv6, multicast
  // UDP and extension headers are still dropped, counted.
  bool ipv6_flows = false;
};

}  // namespace abox::netstack
