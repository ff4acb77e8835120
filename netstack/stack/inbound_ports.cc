#include "netstack/stack/inbound_ports.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "lwip/udp.h"
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/sockaddr.h"
#include "netstack/stack/tcp_flow.h"

namespace abox::netstack {

namespace {

ip_addr_t to_lwip_v4(const policy::IpAddress& a) {
  ip_addr_t out{};
  IP_SET_TYPE_VAL(out, IPADDR_TYPE_V4);
  std::memcpy(&ip_2_ip4(&out)->addr, a.bytes().data(), 4);
  return out;
}

std::string describe_errno(const policy::PublishSpec& spec, const char* what, int err) {
  return "--publish " + spec.to_string() + ": " + what + ": " + std::strerror(err);
}

void udp_recv_cb(void* arg, udp_pcb*, pbuf* p, const ip_addr_t*, u16_t);

bool flow_table_full(const GuestStack& stack) {
  return stack.flows_now() >= stack.policy().limits().flows;
}

}  // namespace

base::Result<std::vector<PublishedSocket>, std::string> listen_published(
    std::span<const policy::PublishSpec> specs) {
  std::vector<PublishedSocket> out;
  out.reserve(specs.size());
  for (const policy::PublishSpec& spec : specs) {
    const bool tcp = spec.protocol == policy::PublishSpec::Protocol::tcp;
    const policy::Endpoint ep{spec.host_address, spec.host_port};
    sockaddr_storage ss{};
    const socklen_t len = to_sockaddr(ep, ss);
    base::UniqueFd fd(
        ::socket(ss.ss_family, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return base::Err{describe_errno(spec, "socket", errno)};
    int one = 1;
    if (tcp) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // [::] means IPv6 only: 0.0.0.0 is a separate spec.
    if (ss.ss_family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0)
      return base::Err{describe_errno(spec, "cannot listen there", errno)};
    if (tcp && ::listen(fd.get(), 128) != 0) return base::Err{describe_errno(spec, "listen", errno)};
    out.push_back({spec, std::move(fd)});
  }
  return out;
}

struct InboundPorts::UdpSession {
  InboundPorts* owner = nullptr;
  Port* port = nullptr;
  policy::Endpoint peer;
  udp_pcb* pcb = nullptr;
  base::MonoTime last{};
  std::uint64_t to_guest = 0;
  std::uint64_t from_guest = 0;
  ~UdpSession() {
    if (pcb != nullptr) udp_remove(pcb);
  }
};

struct InboundPorts::Port final : io::EventLoop::Watcher {
  Port(InboundPorts& o, PublishedSocket s) : owner(o), socket(std::move(s)) {}
  void on_ready(std::uint32_t) override { owner.on_readable(*this); }
  bool udp() const { return socket.spec.protocol == policy::PublishSpec::Protocol::udp; }
  InboundPorts& owner;
  PublishedSocket socket;
  io::EventLoop::Handle handle = io::EventLoop::kNoHandle;
  std::uint32_t live = 0;  // TCP: inbound flows alive (each counts itself); UDP: sessions
  std::map<std::pair<policy::IpAddress, std::uint16_t>, std::unique_ptr<UdpSession>> sessions;
};

namespace {
void udp_recv_cb(void* arg, udp_pcb*, pbuf* p, const ip_addr_t*, u16_t) {
  auto* s = static_cast<InboundPorts::UdpSession*>(arg);
  s->owner->on_guest_datagram(*s, p);
}
}  // namespace

InboundPorts::InboundPorts(GuestStack& stack, std::vector<PublishedSocket> sockets,
                           std::uint32_t max_connections)
    : stack_(stack), loop_(stack.loop()), max_connections_(max_connections) {
  bool any_udp = false;
  for (PublishedSocket& s : sockets) {
    auto port = std::make_unique<Port>(*this, std::move(s));
    port->handle =
        stack_.loop().watch(port->socket.fd.get(), POLLIN, port.get(), io::EventLoop::Trigger::level);
    any_udp = any_udp || port->udp();
    ports_.push_back(std::move(port));
  }
  if (any_udp) {
    datagram_.resize(65536);
    next_sweep_ = stack_.loop().now() + base::Seconds(1);
    udp_sweep_ = stack_.loop().add_timer_source(
        {[this] { return next_sweep_; }, [this](base::MonoTime now) { sweep_udp(now); }});
  }
}

InboundPorts::~InboundPorts() {
  for (auto& port : ports_) {
    if (port->handle != io::EventLoop::kNoHandle) loop_.unwatch(port->handle);
  }
}

std::uint32_t InboundPorts::live(std::size_t index) const {
  return ports_.at(index)->live;
}

void InboundPorts::on_readable(Port& port) {
  if (port.udp()) {
    receive_udp(port);
  } else {
    accept_tcp(port);
  }
}

void InboundPorts::refuse(Port& port, std::string_view reason, const std::string& peer) {
  ++stack_.mutable_counters().inbound_refused_limit;
  if (stack_.events().reserve_line())
    stack_.events().write_reserved("inbound_refused", {{"reason", reason},
                                                       {"published", port.socket.spec.to_string()},
                                                       {"peer", peer},
                                                       {"proto", port.udp() ? "udp" : "tcp"}});
}

void InboundPorts::accept_tcp(Port& port) {
  for (std::size_t i = 0; i < kAcceptsPerTurn; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    base::UniqueFd conn(::accept4(port.socket.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                                  SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) return;  // EAGAIN (the level-triggered watch says when more come), or the peer gave up
    const auto peer = from_sockaddr(ss).value_or(policy::Endpoint{});
    // Refused: accepted and closed at once, so the peer learns now rather
    // than waiting in the backlog.
    if (port.live >= max_connections_) {
      refuse(port, "the port's limit of live connections (--publish-max-connections)", peer.to_string());
      continue;
    }
    if (flow_table_full(stack_)) {
      refuse(port, "the flow table is full ([limits] flows)", peer.to_string());
      continue;
    }
    tcp_pcb* pcb = tcp_new_ip_type(IPADDR_TYPE_V4);
    if (pcb == nullptr) {
      refuse(port, "no memory for the connection to the guest", peer.to_string());
      continue;
    }
    ++stack_.mutable_counters().inbound_accepted;
    const std::string published = port.socket.spec.to_string();
    if (stack_.events().reserve_line())
      stack_.events().write_reserved(
          "inbound_accepted", {{"published", published}, {"peer", peer.to_string()}, {"proto", "tcp"}});
    auto flow =
        std::make_unique<TcpFlow>(stack_, pcb,
                                  TcpFlow::Inbound{std::move(conn),
                                                   {stack_.config().guest, port.socket.spec.guest_port},
                                                   peer,
                                                   published,
                                                   &port.live});
    TcpFlow* raw = flow.get();
    stack_.adopt(std::move(flow));
    (void)raw->start_inbound();  // a refusal retired it, said in its inbound_closed
  }
}

void InboundPorts::receive_udp(Port& port) {
  for (std::size_t i = 0; i < kDatagramsPerTurn; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const ssize_t n = ::recvfrom(port.socket.fd.get(), datagram_.data(), datagram_.size(), MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&ss), &len);
    if (n < 0) return;  // EAGAIN: the level-triggered watch says when more come
    const auto peer = from_sockaddr(ss);
    if (!peer) continue;
    const auto key = std::make_pair(peer->address, peer->port);
    auto it = port.sessions.find(key);
    if (it == port.sessions.end()) {
      if (port.live >= max_connections_) {
        refuse(port, "the port's limit of live peers (--publish-max-connections)", peer->to_string());
        continue;
      }
      if (flow_table_full(stack_)) {
        refuse(port, "the flow table is full ([limits] flows)", peer->to_string());
        continue;
      }
      auto session = std::make_unique<UdpSession>();
      session->owner = this;
      session->port = &port;
      session->peer = *peer;
      session->pcb = udp_new_ip_type(IPADDR_TYPE_V4);
      const ip_addr_t gateway = to_lwip_v4(stack_.config().gateway);
      const ip_addr_t guest = to_lwip_v4(stack_.config().guest);
      if (session->pcb == nullptr || udp_bind(session->pcb, &gateway, 0) != ERR_OK ||
          udp_connect(session->pcb, &guest, port.socket.spec.guest_port) != ERR_OK) {
        refuse(port, "no room in the stack for the guest's side", peer->to_string());
        continue;
      }
      udp_recv(session->pcb, udp_recv_cb, session.get());
      ++port.live;
      ++stack_.mutable_counters().inbound_accepted;
      if (stack_.events().reserve_line())
        stack_.events().write_reserved(
            "inbound_accepted",
            {{"published", port.socket.spec.to_string()}, {"peer", peer->to_string()}, {"proto", "udp"}});
      it = port.sessions.emplace(key, std::move(session)).first;
    }
    UdpSession& s = *it->second;
    s.last = stack_.loop().now();
    pbuf* p = pbuf_alloc(PBUF_TRANSPORT, static_cast<u16_t>(n), PBUF_RAM);
    if (p == nullptr) continue;  // UDP loses it, as a full socket would
    pbuf_take(p, datagram_.data(), static_cast<u16_t>(n));
    if (udp_send(s.pcb, p) == ERR_OK) s.to_guest += static_cast<std::uint64_t>(n);
    pbuf_free(p);
  }
}

void InboundPorts::on_guest_datagram(UdpSession& s, pbuf* p) {
  if (p == nullptr) return;
  const std::size_t n = p->tot_len;
  pbuf_copy_partial(p, datagram_.data(), static_cast<u16_t>(n), 0);
  pbuf_free(p);
  s.last = stack_.loop().now();
  sockaddr_storage ss{};
  const socklen_t len = to_sockaddr(s.peer, ss);
  // To the peer this session is for, from the published socket: nowhere else.
  if (::sendto(s.port->socket.fd.get(), datagram_.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&ss), len) >= 0)
    s.from_guest += n;
}

void InboundPorts::sweep_udp(base::MonoTime now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + base::Seconds(1);
  const auto idle = base::Seconds(stack_.policy().timeouts().udp_idle_s);
  for (auto& port : ports_) {
    for (auto it = port->sessions.begin(); it != port->sessions.end();) {
      UdpSession& s = *it->second;
      if (now - s.last < idle) {
        ++it;
        continue;
      }
      if (stack_.events().reserve_line())
        stack_.events().write_reserved("inbound_closed", {{"reason", "idle timeout"},
                                                          {"published", port->socket.spec.to_string()},
                                                          {"peer", s.peer.to_string()},
                                                          {"bytes_to_guest", s.to_guest},
                                                          {"bytes_from_guest", s.from_guest},
                                                          {"proto", "udp"}});
      --port->live;
      it = port->sessions.erase(it);
    }
  }
}

}  // namespace abox::netstack
