// GuestDns: the DNS gate served to the guest on the gateway's port 53, over
// lwIP (UDP, and TCP with RFC 7766 framing). The gate itself is dns::DnsGate;
// upstream queries go out on host sockets (DnsUpstreamClient).
//
// Served on the gateway's IPv4 address and, when given one, on its IPv6
// address (the one the router advertisement's RDNSS names): the same gate
// answers both families.
//
// Bounds: TCP clients at most kMaxTcpClients (both families together), each
// with at most kTcpBufferLimit bytes of unread queries or unsent answers;
// past either, the connection is closed and counted. UDP needs no state per
// IPv4 client: the reply address travels in the GuestRef token. An IPv6
// address does not fit the token: the last kIpv6Sources guest addresses that
// asked are kept, and the token names one by slot and generation; an answer
// whose slot was taken by another address since is not sent (counted as
// send_failed). A guest has a few addresses (link-local, SLAAC, privacy).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dns/answer_table.h"
#include "dns/gate.h"
#include "dns/tcp_stream.h"
#include "io/event_loop.h"
#include "netstack/gateway/dns_upstream_client.h"

struct pbuf;
struct tcp_pcb;
struct udp_pcb;

namespace abox::netstack {

struct GuestDnsCounters {
  std::uint64_t udp_queries = 0;
  std::uint64_t tcp_accepted = 0;
  std::uint64_t tcp_refused = 0;
  std::uint64_t tcp_overflow = 0;
  std::uint64_t send_failed = 0;
};

class GuestDns final : public dns::GateSink {
 public:
  static constexpr std::size_t kMaxTcpClients = 64;
  static constexpr std::size_t kTcpBufferLimit = 128 * 1024;

  static constexpr std::size_t kIpv6Sources = 8;

  // gateway: the address (network order, as lwIP keeps it) port 53 is served on;
  // gateway_v6: the IPv6 address it is also served on, if any.
  // host: this host's addresses, filtered out of every answer (the owner
  // keeps it current).
  GuestDns(io::EventLoop& loop, const policy::Policy& policy, const policy::HostAddresses& host,
           std::vector<policy::Endpoint> upstreams, dns::AnswerTable& table, base::EventLog& events,
           base::RandomSource& random, std::uint32_t gateway,
           std::optional<std::array<std::uint8_t, 16>> gateway_v6 = std::nullopt);
  ~GuestDns() override;

  const dns::DnsGate& gate() const { return gate_; }
  // A reloaded policy for the gate (DnsGate::set_policy()).
  void set_policy(const policy::Policy& policy) { gate_.set_policy(policy); }
  void set_audit(bool on) { gate_.set_audit(on); }
  const GuestDnsCounters& counters() const { return counters_; }

  void send_to_guest(const dns::GuestRef& to, std::span<const std::uint8_t> msg) override;
  void send_upstream(std::uint32_t slot, const policy::Endpoint& upstream, dns::Transport transport,
                     std::span<const std::uint8_t> msg) override;
  void cancel_upstream(std::uint32_t slot) override;

  // lwIP callbacks (trampolines in guest_dns.cc).
  void on_udp(pbuf* p, const policy::IpAddress& src, std::uint16_t src_port);
  // False when it aborted pcb (lwIP must then hear ERR_ABRT).
  bool on_accept(tcp_pcb* pcb);
  bool on_tcp_data(std::uint32_t index, pbuf* p);  // false: the connection was aborted
  void on_tcp_error(std::uint32_t index);

 private:
  struct TcpClient {
    tcp_pcb* pcb = nullptr;
    std::uint32_t gen = 0;
    dns::DnsTcpReader in{kTcpBufferLimit};
  };
  void close_tcp(std::uint32_t index, bool abort);
  // The UDP reply token for a guest address: IPv4 inline, IPv6 by slot.
  std::uint64_t udp_token(const policy::IpAddress& src, std::uint16_t src_port);
  // The address a UDP token names; nullopt when its IPv6 slot was reused.
  std::optional<policy::IpAddress> udp_token_address(std::uint64_t token) const;
  // The UDP and TCP port 53 pcbs on `at`.
  void serve_on(const policy::IpAddress& at, udp_pcb*& udp, tcp_pcb*& listener);

  io::EventLoop& loop_;
  DnsUpstreamClient upstream_;
  dns::DnsGate gate_;
  udp_pcb* udp_ = nullptr;
  tcp_pcb* listener_ = nullptr;
  udp_pcb* udp6_ = nullptr;  // null without gateway_v6
  tcp_pcb* listener6_ = nullptr;
  struct Ipv6Source {
    std::array<std::uint8_t, 16> address{};
    std::uint16_t generation = 0;
    bool used = false;
  };
  std::array<Ipv6Source, kIpv6Sources> ipv6_sources_{};
  std::size_t next_ipv6_source_ = 0;  // the slot a new address takes (round robin)
  std::vector<TcpClient> tcp_;
  std::size_t tcp_open_ = 0;
  GuestDnsCounters counters_;
  // Last: unregistered first, while what its callbacks use is still whole.
  io::EventLoop::Registration deadlines_;
};

}  // namespace abox::netstack
