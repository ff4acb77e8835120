#include "netstack/stack/host_tcp_info.h"

// The kernel's own tcp_info (linux/tcp.h), not glibc's copy in
// netinet/tcp.h, which stops before tcpi_rcv_ooopack. The two cannot be
// included together, hence this file of its own.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace abox::netstack {

std::optional<HostTcpInfo> read_host_tcp_info(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  // An older kernel fills less: a field past `len` was not written.
  if (len < offsetof(tcp_info, tcpi_rcv_ooopack) + sizeof info.tcpi_rcv_ooopack) return std::nullopt;
  return HostTcpInfo{.retransmits = info.tcpi_total_retrans, .out_of_order_received = info.tcpi_rcv_ooopack};
}

}  // namespace abox::netstack
