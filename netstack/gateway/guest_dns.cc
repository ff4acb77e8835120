#include "netstack/gateway/guest_dns.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "dns/tcp_stream.h"
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "lwip/udp.h"
#include "netstack/stack/lwip_address.h"

namespace abox::netstack {

namespace {

constexpr std::uint64_t kTcpBit = std::uint64_t{1} << 63;
// A UDP token for an IPv6 guest: this bit, the slot's generation (bits
// 32..47), the slot (16..31) and the port (0..15). An IPv4 token is the
// address (16..47) and the port: bit 62 is never set in one.
constexpr std::uint64_t kIpv6Bit = std::uint64_t{1} << 62;

// The GuestDns instance lwIP's C callbacks reach (one stack per process).
GuestDns* g_dns = nullptr;

void udp_recv_cb(void*, udp_pcb*, pbuf* p, const ip_addr_t* addr, u16_t port) {
  g_dns->on_udp(p, from_ip_addr(addr), port);
}

err_t tcp_recv_cb(void* arg, tcp_pcb*, pbuf* p, err_t) {
  auto index = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(arg));
  return g_dns->on_tcp_data(index, p) ? ERR_OK : ERR_ABRT;
}

void tcp_err_cb(void* arg, err_t) {
  g_dns->on_tcp_error(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(arg)));
}

err_t accept_cb(void*, tcp_pcb* pcb, err_t err) {
  if (err != ERR_OK || pcb == nullptr) return ERR_VAL;
  return g_dns->on_accept(pcb) ? ERR_OK : ERR_ABRT;  // ERR_ABRT: the pcb is freed (see guest_stack.cc)
}

}  // namespace

GuestDns::GuestDns(io::EventLoop& loop, const policy::Policy& policy, const policy::HostAddresses& host,
                   std::vector<policy::Endpoint> upstreams, dns::AnswerTable& table, base::EventLog& events,
                   base::RandomSource& random, std::uint32_t gateway,
                   std::optional<std::array<std::uint8_t, 16>> gateway_v6)
    : loop_(loop),
      upstream_(loop, policy.limits().dns_in_flight),
      gate_(policy, host, std::move(upstreams), table, events, random, *this),
      tcp_(kMaxTcpClients) {
  if (g_dns != nullptr) throw std::runtime_error("one GuestDns per process");
  g_dns = this;
  upstream_.set_gate(&gate_);
  std::uint8_t gw[4];
  std::memcpy(gw, &gateway, 4);
  serve_on(policy::IpAddress::v4_bytes(gw), udp_, listener_);
  if (gateway_v6) serve_on(policy::IpAddress::v6(*gateway_v6), udp6_, listener6_);

  deadlines_ = loop_.add_timer_source(
      {[this] { return gate_.next_deadline(); }, [this](base::MonoTime now) { gate_.on_tick(now); }});
}

void GuestDns::serve_on(const policy::IpAddress& address, udp_pcb*& udp, tcp_pcb*& listener) {
  const ip_addr_t at = to_ip_addr(address);
  udp = udp_new_ip_type(IP_GET_TYPE(&at));
  if (udp == nullptr || udp_bind(udp, &at, 53) != ERR_OK)
    throw std::runtime_error("cannot bind DNS on UDP 53");
  udp_recv(udp, udp_recv_cb, nullptr);

  tcp_pcb* pcb = tcp_new_ip_type(IP_GET_TYPE(&at));
  if (pcb == nullptr || tcp_bind(pcb, &at, 53) != ERR_OK)
    throw std::runtime_error("cannot bind DNS on TCP 53");
  listener = tcp_listen(pcb);
  if (listener == nullptr) throw std::runtime_error("cannot listen for DNS on TCP 53");
  tcp_accept(listener, accept_cb);
}

GuestDns::~GuestDns() {
  for (std::uint32_t i = 0; i < tcp_.size(); ++i) close_tcp(i, true);
  if (listener_ != nullptr) tcp_close(listener_);
  if (udp_ != nullptr) udp_remove(udp_);
  if (listener6_ != nullptr) tcp_close(listener6_);
  if (udp6_ != nullptr) udp_remove(udp6_);
  g_dns = nullptr;
}

std::uint64_t GuestDns::udp_token(const policy::IpAddress& src, std::uint16_t src_port) {
  if (!src.is_v6()) {
    std::uint32_t net = 0;
    std::memcpy(&net, src.bytes().data(), 4);
    return (std::uint64_t{net} << 16) | src_port;
  }
  std::size_t slot = kIpv6Sources;
  for (std::size_t i = 0; i < kIpv6Sources; ++i) {
    if (ipv6_sources_[i].used && ipv6_sources_[i].address == src.bytes()) slot = i;
  }
  if (slot == kIpv6Sources) {
    slot = next_ipv6_source_;
    next_ipv6_source_ = (next_ipv6_source_ + 1) % kIpv6Sources;
    Ipv6Source& s = ipv6_sources_[slot];
    s.address = src.bytes();
    s.used = true;
    ++s.generation;  // answers still due to the address it replaces go nowhere
  }
  return kIpv6Bit | (std::uint64_t{ipv6_sources_[slot].generation} << 32) | (std::uint64_t{slot} << 16) |
         src_port;
}

std::optional<policy::IpAddress> GuestDns::udp_token_address(std::uint64_t token) const {
  if ((token & kIpv6Bit) == 0) {
    const auto net = static_cast<std::uint32_t>(token >> 16);
    std::uint8_t b[4];
    std::memcpy(b, &net, 4);
    return policy::IpAddress::v4_bytes(b);
  }
  const std::size_t slot = (token >> 16) & 0xFFFF;
  const auto generation = static_cast<std::uint16_t>(token >> 32);
  if (slot >= kIpv6Sources || !ipv6_sources_[slot].used || ipv6_sources_[slot].generation != generation)
    return std::nullopt;
  return policy::IpAddress::v6(ipv6_sources_[slot].address);
}

void GuestDns::on_udp(pbuf* p, const policy::IpAddress& src, std::uint16_t src_port) {
  ++counters_.udp_queries;
  std::uint8_t buf[dns::kMaxAdvertisedUdpSize];
  std::size_t n = std::min<std::size_t>(p->tot_len, sizeof buf);
  // An oversized datagram is malformed for the gate: hand it nothing readable.
  if (p->tot_len > sizeof buf) n = 0;
  pbuf_copy_partial(p, buf, static_cast<u16_t>(n), 0);
  pbuf_free(p);
  const std::uint64_t token = udp_token(src, src_port);
  (void)gate_.on_guest_query(std::span<const std::uint8_t>(buf, n), dns::GuestRef{token, dns::Transport::udp},
                             loop_.now());
}

void GuestDns::send_to_guest(const dns::GuestRef& to, std::span<const std::uint8_t> msg) {
  if (to.transport == dns::Transport::udp) {
    pbuf* p = pbuf_alloc(PBUF_TRANSPORT, static_cast<u16_t>(msg.size()), PBUF_RAM);
    if (p == nullptr) {
      ++counters_.send_failed;
      return;
    }
    pbuf_take(p, msg.data(), static_cast<u16_t>(msg.size()));
    const auto address = udp_token_address(to.token);
    udp_pcb* from = address && address->is_v6() ? udp6_ : udp_;
    const ip_addr_t dst = address ? to_ip_addr(*address) : ip_addr_t{};
    if (!address || from == nullptr ||
        udp_sendto(from, p, &dst, static_cast<u16_t>(to.token & 0xFFFF)) != ERR_OK)
      ++counters_.send_failed;
    pbuf_free(p);
    return;
  }
  auto index = static_cast<std::uint32_t>(to.token & 0xFFFF'FFFFu);
  auto gen = static_cast<std::uint32_t>((to.token & ~kTcpBit) >> 32);
  if (index >= tcp_.size()) return;
  TcpClient& c = tcp_[index];
  if (c.pcb == nullptr || c.gen != gen) return;
  if (tcp_sndbuf(c.pcb) < msg.size() + 2) {
    ++counters_.tcp_overflow;  // a client that does not read its answers
    close_tcp(index, true);
    return;
  }
  const auto len = dns::tcp_length_prefix(msg.size());
  tcp_write(c.pcb, len.data(), 2, TCP_WRITE_FLAG_COPY | TCP_WRITE_FLAG_MORE);
  tcp_write(c.pcb, msg.data(), static_cast<u16_t>(msg.size()), TCP_WRITE_FLAG_COPY);
  tcp_output(c.pcb);
}

bool GuestDns::on_accept(tcp_pcb* pcb) {
  if (tcp_open_ >= kMaxTcpClients) {
    ++counters_.tcp_refused;
    tcp_abort(pcb);
    return false;
  }
  std::uint32_t index = 0;
  while (tcp_[index].pcb != nullptr) ++index;
  TcpClient& c = tcp_[index];
  c.pcb = pcb;
  c.gen += 1;
  c.in.clear();
  ++tcp_open_;
  ++counters_.tcp_accepted;
  tcp_arg(pcb, reinterpret_cast<void*>(static_cast<std::uintptr_t>(index)));
  tcp_recv(pcb, tcp_recv_cb);
  tcp_err(pcb, tcp_err_cb);
  return true;
}

bool GuestDns::on_tcp_data(std::uint32_t index, pbuf* p) {
  TcpClient& c = tcp_[index];
  if (p == nullptr) {  // the client is done sending
    close_tcp(index, false);
    return true;
  }
  auto room = c.in.append(p->tot_len);
  if (room.empty()) {
    pbuf_free(p);
    ++counters_.tcp_overflow;
    close_tcp(index, true);
    return false;
  }
  pbuf_copy_partial(p, room.data(), p->tot_len, 0);
  tcp_recved(c.pcb, p->tot_len);
  pbuf_free(p);
  const std::uint32_t gen = c.gen;
  const dns::GuestRef from{kTcpBit | (std::uint64_t{gen} << 32) | index, dns::Transport::tcp};
  return c.in.for_each_message([&](std::span<const std::uint8_t> query) {
    (void)gate_.on_guest_query(query, from, loop_.now());
    return c.pcb != nullptr && c.gen == gen;  // false: aborted while answering
  });
}

void GuestDns::on_tcp_error(std::uint32_t index) {
  TcpClient& c = tcp_[index];
  if (c.pcb == nullptr) return;
  c.pcb = nullptr;  // lwIP freed it
  c.gen += 1;
  c.in.clear();
  --tcp_open_;
}

void GuestDns::close_tcp(std::uint32_t index, bool abort) {
  TcpClient& c = tcp_[index];
  if (c.pcb == nullptr) return;
  tcp_pcb* pcb = c.pcb;
  c.pcb = nullptr;
  c.gen += 1;
  c.in.clear();
  --tcp_open_;
  tcp_arg(pcb, nullptr);
  tcp_recv(pcb, nullptr);
  tcp_err(pcb, nullptr);
  if (abort || tcp_close(pcb) != ERR_OK) tcp_abort(pcb);
}

void GuestDns::send_upstream(std::uint32_t slot, const policy::Endpoint& upstream, dns::Transport transport,
                             std::span<const std::uint8_t> msg) {
  upstream_.send(slot, upstream, transport, msg);
}

void GuestDns::cancel_upstream(std::uint32_t slot) {
  upstream_.cancel(slot);
}

}  // namespace abox::netstack
