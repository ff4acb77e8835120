#include "netstack/program/dns_host_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "dns/tcp_stream.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

namespace {

constexpr std::size_t kUdpBuf = dns::kMaxAdvertisedUdpSize;
constexpr std::uint64_t kTcpTokenBit = std::uint64_t{1} << 63;
constexpr std::size_t kTcpReadChunk = 16384;
// One whole message (two-byte length + 65535) plus one read: every complete
// message is taken out after each read, so this is never reached.
constexpr std::size_t kTcpInLimit = 2 + 65535 + kTcpReadChunk;

std::uint64_t token(std::uint32_t index, std::uint32_t gen) {
  return (std::uint64_t{gen} << 32) | index;
}

// Picks of a UDP port that TCP could not have too, before giving up (see
// bind_pair()). One in a hundred ports taken for TCP is already a busy host.
constexpr int kPortPicks = 64;

// A socket of `type` bound to `at`; throws when there is none. *bind_errno
// gets the bind's errno (0 when it succeeded).
base::UniqueFd bound_socket(const policy::Endpoint& at, int type, int* bind_errno = nullptr) {
  sockaddr_storage ss{};
  socklen_t len = to_sockaddr(at, ss);
  base::UniqueFd fd(::socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) < 0) {
    const int e = errno;
    if (bind_errno != nullptr) *bind_errno = e;
    throw std::runtime_error("cannot bind " + at.to_string() + ": " + std::strerror(e));
  }
  if (bind_errno != nullptr) *bind_errno = 0;
  return fd;
}

}  // namespace

struct DnsHostServer::UdpWatcher final : io::EventLoop::Watcher {
  DnsHostServer* s;
  explicit UdpWatcher(DnsHostServer* server) : s(server) {}
  void on_ready(std::uint32_t) override { s->on_udp_ready(); }
};

struct DnsHostServer::ListenWatcher final : io::EventLoop::Watcher {
  DnsHostServer* s;
  explicit ListenWatcher(DnsHostServer* server) : s(server) {}
  void on_ready(std::uint32_t) override { s->on_accept_ready(); }
};

struct DnsHostServer::TcpClient final : io::EventLoop::Watcher {
  DnsHostServer* s = nullptr;
  std::uint32_t index = 0;
  std::uint32_t gen = 0;
  base::UniqueFd fd;
  io::EventLoop::Handle handle = io::EventLoop::kNoHandle;
  dns::DnsTcpReader in{kTcpInLimit};  // bytes read, not yet a whole message
  std::vector<std::uint8_t> out;      // answers not yet written
  std::size_t out_pos = 0;
  base::MonoTime idle_deadline{};
  void on_ready(std::uint32_t events) override { s->on_tcp_ready(index, events); }
};

DnsHostServer::DnsHostServer(io::EventLoop& loop, const policy::Policy& policy,
                             std::vector<policy::Endpoint> upstreams, const policy::Endpoint& listen,
                             base::EventLog& events, base::RandomSource& random)
    : loop_(loop),
      events_(events),
      table_(policy, policy.limits().answer_entries),
      upstream_(loop, policy.limits().dns_in_flight),
      gate_(policy, host_addresses_, std::move(upstreams), table_, events, random, *this) {
  upstream_.set_gate(&gate_);

  bind_pair(listen);
  if (::listen(tcp_fd_.get(), 64) < 0)
    throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
  int big = 4 << 20;  // absorb bursts between turns
  ::setsockopt(udp_fd_.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  ::setsockopt(udp_fd_.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof big);

  std::size_t clients = std::size_t{policy.limits().dns_in_flight} * dns::DnsGate::kMaxWaiters + kBatch;
  udp_clients_.resize(clients);
  udp_free_.reserve(clients);
  for (std::size_t i = clients; i-- > 0;) udp_free_.push_back(static_cast<std::uint32_t>(i));

  rx_bufs_.resize(kBatch * kUdpBuf);
  rx_msgs_.resize(kBatch);
  rx_iov_.resize(kBatch);
  rx_addrs_.resize(kBatch);
  for (std::size_t i = 0; i < kBatch; ++i) {
    rx_iov_[i] = {rx_bufs_.data() + i * kUdpBuf, kUdpBuf};
    rx_msgs_[i] = {};
    rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
    rx_msgs_[i].msg_hdr.msg_iovlen = 1;
    rx_msgs_[i].msg_hdr.msg_name = &rx_addrs_[i];
  }
  tx_bufs_.resize(kBatch * kUdpBuf);
  tx_msgs_.resize(kBatch);
  tx_iov_.resize(kBatch);
  tx_addrs_.resize(kBatch);

  tcp_.resize(kMaxTcpClients);
  for (std::uint32_t i = 0; i < kMaxTcpClients; ++i) {
    tcp_[i] = std::make_unique<TcpClient>();
    tcp_[i]->s = this;
    tcp_[i]->index = i;
  }

  udp_watcher_ = std::make_unique<UdpWatcher>(this);
  listen_watcher_ = std::make_unique<ListenWatcher>(this);
  udp_handle_ = loop_.watch(udp_fd_.get(), POLLIN, udp_watcher_.get());
  tcp_handle_ = loop_.watch(tcp_fd_.get(), POLLIN, listen_watcher_.get());
  gate_deadlines_ = loop_.add_timer_source(
      {[this] { return gate_.next_deadline(); }, [this](base::MonoTime now) { gate_.on_tick(now); }});
  tcp_deadlines_ = loop_.add_timer_source(
      {[this] { return next_tcp_deadline(); }, [this](base::MonoTime now) { expire_tcp(now); }});
  udp_flush_ = loop_.add_turn_hook([this] { flush_udp(); });
}

// UDP and TCP on one port. With port 0 the kernel picks the UDP port, and
// TCP may hold that port already: a connection made from it, or one in
// TIME_WAIT (for 60 s; SO_REUSEADDR does not get past either, and a host
// that makes connections has a few hundred). Such a UDP socket is kept
// open until a pair is found, so that the next pick is another port; at
// most kPortPicks picks. A port asked for is bound as it is, or not at all.
void DnsHostServer::bind_pair(const policy::Endpoint& listen) {
  std::vector<base::UniqueFd> taken_for_tcp;
  for (int pick = 1;; ++pick) {
    base::UniqueFd udp = bound_socket(listen, SOCK_DGRAM);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(udp.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    const policy::Endpoint at = from_sockaddr(ss).value_or(listen);
    int bind_errno = 0;
    try {
      tcp_fd_ = bound_socket(at, SOCK_STREAM, &bind_errno);
    } catch (const std::runtime_error&) {
      if (listen.port != 0 || bind_errno != EADDRINUSE || pick == kPortPicks) throw;
      taken_for_tcp.push_back(std::move(udp));
      continue;
    }
    udp_fd_ = std::move(udp);
    bound_ = at;
    return;
  }
}

DnsHostServer::~DnsHostServer() {
  loop_.unwatch(udp_handle_);
  loop_.unwatch(tcp_handle_);
  for (std::uint32_t i = 0; i < tcp_.size(); ++i) close_tcp(i);
}

void DnsHostServer::on_udp_ready() {
  // Bounded per turn so TCP clients and upstream replies are not starved;
  // the loop comes back next turn when there is more.
  for (int round = 0; round < 8; ++round) {
    // The kernel rewrites only the name length and flags of each header.
    for (std::size_t i = 0; i < kBatch; ++i) {
      rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
      rx_msgs_[i].msg_hdr.msg_flags = 0;
    }
    int n = ::recvmmsg(udp_fd_.get(), rx_msgs_.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return;  // EAGAIN: drained
    base::MonoTime now = base::MonoClock::now();
    for (int i = 0; i < n; ++i) {
      ++counters_.udp_received;
      const auto& m = rx_msgs_[static_cast<std::size_t>(i)];
      if (udp_free_.empty()) {
        ++counters_.client_table_full;
        continue;
      }
      std::uint32_t c = udp_free_.back();
      udp_free_.pop_back();
      UdpClient& client = udp_clients_[c];
      client.used = true;
      client.gen += 1;
      std::memcpy(&client.addr, &rx_addrs_[static_cast<std::size_t>(i)], m.msg_hdr.msg_namelen);
      client.len = m.msg_hdr.msg_namelen;
      std::size_t len = (m.msg_hdr.msg_flags & MSG_TRUNC) ? 0 : m.msg_len;  // oversized: malformed
      bool kept = gate_.on_guest_query(
          std::span<const std::uint8_t>(rx_bufs_.data() + static_cast<std::size_t>(i) * kUdpBuf, len),
          dns::GuestRef{token(c, client.gen), dns::Transport::udp}, now);
      if (!kept && client.used && client.gen == udp_clients_[c].gen) {
        client.used = false;  // dropped without an answer
        udp_free_.push_back(c);
      }
    }
    flush_udp();
    if (n < static_cast<int>(kBatch)) return;
  }
  loop_.wake_next_turn(udp_handle_);
}

void DnsHostServer::send_to_guest(const dns::GuestRef& to, std::span<const std::uint8_t> msg) {
  if (to.transport == dns::Transport::udp) {
    auto index = static_cast<std::uint32_t>(to.token & 0xFFFF'FFFFu);
    auto gen = static_cast<std::uint32_t>(to.token >> 32);
    if (index >= udp_clients_.size()) return;
    UdpClient& c = udp_clients_[index];
    if (!c.used || c.gen != gen) return;
    if (msg.size() <= kUdpBuf) {
      if (tx_count_ == kBatch) flush_udp();
      std::size_t k = tx_count_++;
      std::memcpy(tx_bufs_.data() + k * kUdpBuf, msg.data(), msg.size());
      tx_iov_[k] = {tx_bufs_.data() + k * kUdpBuf, msg.size()};
      std::memcpy(&tx_addrs_[k], &c.addr, c.len);
      tx_msgs_[k] = {};
      tx_msgs_[k].msg_hdr.msg_iov = &tx_iov_[k];
      tx_msgs_[k].msg_hdr.msg_iovlen = 1;
      tx_msgs_[k].msg_hdr.msg_name = &tx_addrs_[k];
      tx_msgs_[k].msg_hdr.msg_namelen = c.len;
    }
    c.used = false;
    udp_free_.push_back(index);
    return;
  }
  auto index = static_cast<std::uint32_t>(to.token & 0xFFFF'FFFFu);
  auto gen = static_cast<std::uint32_t>((to.token & ~kTcpTokenBit) >> 32);
  if (index >= tcp_.size()) return;
  TcpClient& t = *tcp_[index];
  if (!t.fd || t.gen != gen) return;  // the connection is gone
  if (t.out.size() - t.out_pos + msg.size() + 2 > kTcpOutLimit) {
    ++counters_.tcp_closed_overflow;
    close_tcp(index);
    return;
  }
  const auto len = dns::tcp_length_prefix(msg.size());
  t.out.insert(t.out.end(), len.begin(), len.end());
  t.out.insert(t.out.end(), msg.begin(), msg.end());
  on_tcp_ready(index, POLLOUT);
}

void DnsHostServer::flush_udp() {
  std::size_t sent = 0;
  while (sent < tx_count_) {
    int n = ::sendmmsg(udp_fd_.get(), tx_msgs_.data() + sent, static_cast<unsigned>(tx_count_ - sent),
                       MSG_DONTWAIT);
    if (n <= 0) {
      // A full socket buffer or an unreachable client: this answer is lost
      // (UDP clients retry); skip it and go on with the rest.
      ++counters_.udp_send_errors;
      ++sent;
      continue;
    }
    sent += static_cast<std::size_t>(n);
    counters_.udp_sent += static_cast<std::uint64_t>(n);
  }
  tx_count_ = 0;
}

void DnsHostServer::on_accept_ready() {
  for (int i = 0; i < 64; ++i) {
    int fd = ::accept4(tcp_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (tcp_open_ >= kMaxTcpClients) {
      ++counters_.tcp_refused;
      events_.emit("limit",
                   {{"reason", "dns tcp clients"}, {"limit", static_cast<std::uint64_t>(kMaxTcpClients)}});
      ::close(fd);
      continue;
    }
    std::uint32_t index = 0;
    while (tcp_[index]->fd) ++index;
    TcpClient& t = *tcp_[index];
    t.fd.reset(fd);
    t.gen += 1;
    t.in.clear();
    t.out.clear();
    t.out_pos = 0;
    t.idle_deadline = loop_.now() + kTcpIdle;
    t.handle = loop_.watch(fd, POLLIN, &t);
    ++tcp_open_;
    ++counters_.tcp_accepted;
  }
  loop_.wake_next_turn(tcp_handle_);
}

void DnsHostServer::on_tcp_ready(std::uint32_t index, std::uint32_t events) {
  TcpClient& t = *tcp_[index];
  if (!t.fd) return;
  // Write what is queued first, so a slow reader's backlog is bounded.
  while (t.out_pos < t.out.size()) {
    ssize_t n =
        ::send(t.fd.get(), t.out.data() + t.out_pos, t.out.size() - t.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close_tcp(index);
      return;
    }
    t.out_pos += static_cast<std::size_t>(n);
  }
  if (t.out_pos == t.out.size()) {
    t.out.clear();
    t.out_pos = 0;
  }
  loop_.modify(t.handle, t.out.empty() ? POLLIN : (POLLIN | POLLOUT));
  if (!(events & (POLLIN | POLLERR | POLLHUP))) return;

  for (int round = 0; round < 16; ++round) {
    auto room = t.in.append(kTcpReadChunk);
    if (room.empty()) {  // cannot happen: whole messages are taken out after every read
      close_tcp(index);
      return;
    }
    ssize_t n = ::recv(t.fd.get(), room.data(), room.size(), MSG_DONTWAIT);
    t.in.unappend(room.size() - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close_tcp(index);
      return;
    }
    if (n < 0) return;
    t.idle_deadline = loop_.now() + kTcpIdle;
    const std::uint32_t gen = t.gen;
    const dns::GuestRef from{kTcpTokenBit | token(index, gen), dns::Transport::tcp};
    const bool open = t.in.for_each_message([&](std::span<const std::uint8_t> query) {
      gate_.on_guest_query(query, from, loop_.now());
      return t.fd && t.gen == gen;  // false: closed while answering
    });
    if (!open) return;
  }
  loop_.wake_next_turn(t.handle);
}

void DnsHostServer::close_tcp(std::uint32_t index) {
  TcpClient& t = *tcp_[index];
  if (!t.fd) return;
  loop_.unwatch(t.handle);
  t.handle = io::EventLoop::kNoHandle;
  t.fd.reset();
  t.in.release();
  t.out.clear();
  t.out.shrink_to_fit();
  t.gen += 1;  // answers still in flight for it are dropped
  --tcp_open_;
}

std::optional<base::MonoTime> DnsHostServer::next_tcp_deadline() const {
  std::optional<base::MonoTime> best;
  if (tcp_open_ == 0) return best;
  for (const auto& t : tcp_) {
    if (t->fd && (!best || t->idle_deadline < *best)) best = t->idle_deadline;
  }
  return best;
}

void DnsHostServer::expire_tcp(base::MonoTime now) {
  if (tcp_open_ == 0) return;
  for (std::uint32_t i = 0; i < tcp_.size(); ++i) {
    if (tcp_[i]->fd && tcp_[i]->idle_deadline <= now) {
      ++counters_.tcp_closed_idle;
      close_tcp(i);
    }
  }
}

void DnsHostServer::send_upstream(std::uint32_t slot, const policy::Endpoint& upstream,
                                  dns::Transport transport, std::span<const std::uint8_t> msg) {
  upstream_.send(slot, upstream, transport, msg);
}

void DnsHostServer::cancel_upstream(std::uint32_t slot) {
  upstream_.cancel(slot);
}

}  // namespace abox::netstack
