// HostTcpInfo: what the kernel's TCP counted on one of abox-net's host
// sockets (TCP_INFO), read once as a flow ends, for the stats. abox-net
// cannot see the server's retransmissions, but its own socket sees their
// cause: segments that arrived out of order (lost or reordered on the way
// from the server), and its own retransmissions to the server.
//
// One getsockopt; nothing is kept. A socket that is not TCP (the broker's
// unix socket), or a kernel whose tcp_info is too short to hold a field,
// gives nothing.
#pragma once

#include <cstdint>
#include <optional>

namespace abox::netstack {

struct HostTcpInfo {
  // Segments this socket sent again (tcpi_total_retrans).
  std::uint32_t retransmits = 0;
  // Segments that arrived out of order (tcpi_rcv_ooopack, Linux 5.4+).
  std::uint32_t out_of_order_received = 0;
};

std::optional<HostTcpInfo> read_host_tcp_info(int fd);

}  // namespace abox::netstack
