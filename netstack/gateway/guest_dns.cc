#include "netstack/gateway/guest_dns.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "dns/tcp_stream.h"
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "lwip/udp.h"

namespace abox::netstack {

namespace {

constexpr std::uint64_t kTcpBit = std::uint64_t{1} << 63;

// The GuestDns instance lwIP's C callbacks reach (one stack per process).
GuestDns* g_dns = nullptr;

void udp_recv_cb(void*, udp_pcb*, pbuf* p, const ip_addr_t* addr, u16_t port) {
  g_dns->on_udp(p, ip_2_ip4(addr)->addr, port);
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
                   base::RandomSource& random, std::uint32_t gateway)
    : loop_(loop),
      upstream_(loop, policy.limits().dns_in_flight),
      gate_(policy, host, std::move(upstreams), table, events, random, *this),
      tcp_(kMaxTcpClients) {
  if (g_dns != nullptr) throw std::runtime_error("one GuestDns per process");
  g_dns = this;
  upstream_.set_gate(&gate_);
  ip_addr_t gw;
  ip_addr_set_ip4_u32(&gw, gateway);

  udp_ = udp_new();
  if (udp_ == nullptr || udp_bind(udp_, &gw, 53) != ERR_OK)
    throw std::runtime_error("cannot bind DNS on UDP 53");
  udp_recv(udp_, udp_recv_cb, nullptr);

  tcp_pcb* pcb = tcp_new();
  if (pcb == nullptr || tcp_bind(pcb, &gw, 53) != ERR_OK)
    throw std::runtime_error("cannot bind DNS on TCP 53");
  listener_ = tcp_listen(pcb);
  if (listener_ == nullptr) throw std::runtime_error("cannot listen for DNS on TCP 53");
  tcp_accept(listener_, accept_cb);

  deadlines_ = loop_.add_timer_source(
      {[this] { return gate_.next_deadline(); }, [this](base::MonoTime now) { gate_.on_tick(now); }});
}

GuestDns::~GuestDns() {
  for (std::uint32_t i = 0; i < tcp_.size(); ++i) close_tcp(i, true);
  if (listener_ != nullptr) tcp_close(listener_);
  if (udp_ != nullptr) udp_remove(udp_);
  g_dns = nullptr;
}

void GuestDns::on_udp(pbuf* p, std::uint32_t src_ip, std::uint16_t src_port) {
  ++counters_.udp_queries;
  std::uint8_t buf[dns::kMaxAdvertisedUdpSize];
  std::size_t n = std::min<std::size_t>(p->tot_len, sizeof buf);
  // An oversized datagram is malformed for the gate: hand it nothing readable.
  if (p->tot_len > sizeof buf) n = 0;
  pbuf_copy_partial(p, buf, static_cast<u16_t>(n), 0);
  pbuf_free(p);
  std::uint64_t token = (std::uint64_t{src_ip} << 16) | src_port;
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
    ip_addr_t dst;
    ip_addr_set_ip4_u32(&dst, static_cast<std::uint32_t>(to.token >> 16));
    if (udp_sendto(udp_, p, &dst, static_cast<u16_t>(to.token & 0xFFFF)) != ERR_OK) ++counters_.send_failed;
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
