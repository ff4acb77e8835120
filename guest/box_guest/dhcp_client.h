// DhcpClient: box-guest's lease from the gateway, once, at boot (DISCOVER ->
// OFFER -> REQUEST -> ACK). Its own, so an image needs no udhcpc or dhclient.
//
// It talks over one AF_PACKET (SOCK_DGRAM, ETH_P_IP) socket bound to the
// interface: the packets it sends are whole IPv4 packets to the broadcast
// MAC, and it reads every IPv4 packet that arrives on the interface, since
// the interface has no address yet (dhcp_packet.h says why and what is
// checked). Packets that are not a reply to this client are ignored; broken
// replies are counted and the first of each kind is logged.
//
// Bounded: `attempts` rounds at most, each a fresh xid, a DISCOVER and up to
// `wait_ms` for an OFFER, then a REQUEST and up to `wait_ms` for the ACK; a
// NAK starts the next round; the whole exchange stops at `total_ms`. No
// renewal: the gateway's lease is fixed and it keeps no state per client,
// and an address set by ioctl does not expire in the kernel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/random.h"
#include "base/result.h"
#include "guest/box_guest/dhcp_packet.h"

namespace abox::guest {

struct DhcpClientLimits {
  int attempts = 5;
  int wait_ms = 2000;
  int total_ms = 15000;
};

// The ACK, or why no lease came (with the counts of what was dropped).
base::Result<DhcpReply, std::string> lease_by_dhcp(std::string_view ifname, const DhcpClientLimits& limits,
                                                   base::RandomSource& random);

}  // namespace abox::guest
