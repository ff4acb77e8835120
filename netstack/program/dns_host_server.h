// DnsHostServer: the DNS gate served on host sockets, for `abox-net dns`
// (benchmarks, and operators trying a policy). The netstack serves the same
// gate to a guest over lwIP instead; the upstream side is shared.
//
// UDP: datagrams are read in batches with recvmmsg and answers written in
// batches with sendmmsg at the end of each loop turn. A client address is
// kept in a bounded table only while its query is in flight.
// TCP (RFC 7766): several length-prefixed queries per connection, answered
// as they complete; at most kMaxTcpClients connections, each closed after
// kTcpIdle without a query or when its unsent answers pass kTcpOutLimit.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/event_log.h"
#include "base/random.h"
#include "base/unique_fd.h"
#include "dns/answer_table.h"
#include "dns/gate.h"
#include "io/event_loop.h"
#include "netstack/gateway/dns_upstream_client.h"

namespace abox::netstack {

struct DnsServerCounters {
  std::uint64_t udp_received = 0;
  std::uint64_t udp_sent = 0;
  std::uint64_t udp_send_errors = 0;
  std::uint64_t client_table_full = 0;  // UDP queries dropped: too many in flight
  std::uint64_t tcp_accepted = 0;
  std::uint64_t tcp_refused = 0;  // over kMaxTcpClients
  std::uint64_t tcp_closed_idle = 0;
  std::uint64_t tcp_closed_overflow = 0;
};

class DnsHostServer final : public dns::GateSink {
 public:
  static constexpr std::size_t kMaxTcpClients = 128;
  static constexpr base::Seconds kTcpIdle{10};
  static constexpr std::size_t kTcpOutLimit = 256 * 1024;
  static constexpr std::size_t kBatch = 64;

  // Throws std::runtime_error when the listen address cannot be bound (UDP
  // and TCP on one port: with port 0, one the kernel gave for UDP that TCP
  // can have too; see bind_pair()).
  DnsHostServer(io::EventLoop& loop, const policy::Policy& policy, std::vector<policy::Endpoint> upstreams,
                const policy::Endpoint& listen, base::EventLog& events, base::RandomSource& random);
  ~DnsHostServer() override;

  // The bound address (the port is the kernel's choice when 0 was asked).
  const policy::Endpoint& address() const { return bound_; }
  const dns::DnsGate& gate() const { return gate_; }
  const dns::AnswerTable& table() const { return table_; }
  const DnsServerCounters& counters() const { return counters_; }
  // The addresses of the host it runs on, filtered out of every answer
  // (policy/host_addresses.h). Empty until its owner fills it (abox-net dns:
  // a HostAddressWatch).
  policy::HostAddresses& host_addresses() { return host_addresses_; }

  // GateSink
  void send_to_guest(const dns::GuestRef& to, std::span<const std::uint8_t> msg) override;
  void send_upstream(std::uint32_t slot, const policy::Endpoint& upstream, dns::Transport transport,
                     std::span<const std::uint8_t> msg) override;
  void cancel_upstream(std::uint32_t slot) override;

 private:
  struct UdpWatcher;
  struct ListenWatcher;
  struct TcpClient;
  struct UdpClient {
    sockaddr_storage addr{};
    socklen_t len = 0;
    std::uint32_t gen = 0;
    bool used = false;
  };

  void on_udp_ready();
  void on_accept_ready();
  void on_tcp_ready(std::uint32_t index, std::uint32_t events);
  void close_tcp(std::uint32_t index);
  void flush_udp();
  void bind_pair(const policy::Endpoint& listen);  // sets udp_fd_, tcp_fd_ and bound_
  void expire_tcp(base::MonoTime now);
  std::optional<base::MonoTime> next_tcp_deadline() const;

  io::EventLoop& loop_;
  base::EventLog& events_;
  policy::HostAddresses host_addresses_;  // before gate_, which reads it
  dns::AnswerTable table_;
  DnsUpstreamClient upstream_;
  dns::DnsGate gate_;
  policy::Endpoint bound_;

  base::UniqueFd udp_fd_;
  base::UniqueFd tcp_fd_;
  std::unique_ptr<UdpWatcher> udp_watcher_;
  std::unique_ptr<ListenWatcher> listen_watcher_;
  io::EventLoop::Handle udp_handle_ = io::EventLoop::kNoHandle;
  io::EventLoop::Handle tcp_handle_ = io::EventLoop::kNoHandle;

  std::vector<UdpClient> udp_clients_;
  std::vector<std::uint32_t> udp_free_;

  // recvmmsg / sendmmsg batches, preallocated.
  std::vector<std::uint8_t> rx_bufs_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iov_;
  std::vector<sockaddr_storage> rx_addrs_;
  std::vector<std::uint8_t> tx_bufs_;
  std::vector<mmsghdr> tx_msgs_;
  std::vector<iovec> tx_iov_;
  std::vector<sockaddr_storage> tx_addrs_;
  std::size_t tx_count_ = 0;

  std::vector<std::unique_ptr<TcpClient>> tcp_;
  std::size_t tcp_open_ = 0;
  DnsServerCounters counters_;
  // Last: unregistered first, while what their callbacks use is still whole.
  io::EventLoop::Registration gate_deadlines_;
  io::EventLoop::Registration tcp_deadlines_;
  io::EventLoop::Registration udp_flush_;
};

}  // namespace abox::netstack
