#include "netstack/gateway/dns_upstream_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

struct DnsUpstreamClient::Slot final : io::EventLoop::Watcher {
  DnsUpstreamClient* owner = nullptr;
  std::uint32_t index = 0;
  base::UniqueFd fd;
  io::EventLoop::Handle handle = io::EventLoop::kNoHandle;
  dns::Transport transport = dns::Transport::udp;
  // TCP: what is still to be written (length prefix + message), and what
  // has been read of the reply so far.
  std::vector<std::uint8_t> out;
  std::size_t out_pos = 0;
  std::vector<std::uint8_t> in;

  void on_ready(std::uint32_t events) override { owner->on_slot_ready(index, events); }
};

DnsUpstreamClient::DnsUpstreamClient(io::EventLoop& loop, std::size_t slots)
    : loop_(loop), rx_(std::make_unique_for_overwrite<std::uint8_t[]>(kRxBytes)) {
  slots_.reserve(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->owner = this;
    s->index = static_cast<std::uint32_t>(i);
    slots_.push_back(std::move(s));
  }
}

DnsUpstreamClient::~DnsUpstreamClient() {
  for (std::uint32_t i = 0; i < slots_.size(); ++i) cancel(i);
}

void DnsUpstreamClient::cancel(std::uint32_t index) {
  if (index >= slots_.size()) return;
  Slot& s = *slots_[index];
  if (s.handle != io::EventLoop::kNoHandle) loop_.unwatch(s.handle);
  s.handle = io::EventLoop::kNoHandle;
  s.fd.reset();
  s.out.clear();
  s.out_pos = 0;
  s.in.clear();
}

void DnsUpstreamClient::fail(std::uint32_t index) {
  ++socket_errors_;
  cancel(index);
  if (gate_ != nullptr) gate_->on_upstream_error(index, loop_.now());
}

void DnsUpstreamClient::send(std::uint32_t index, const policy::Endpoint& upstream, dns::Transport transport,
                             std::span<const std::uint8_t> msg) {
  if (index >= slots_.size()) return;
  cancel(index);
  Slot& s = *slots_[index];
  s.transport = transport;
  sockaddr_storage ss{};
  socklen_t len = to_sockaddr(upstream, ss);
  int type = transport == dns::Transport::udp ? SOCK_DGRAM : SOCK_STREAM;
  s.fd.reset(::socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.fd) {
    fail(index);
    return;
  }
  int rc = ::connect(s.fd.get(), reinterpret_cast<sockaddr*>(&ss), len);
  if (transport == dns::Transport::udp) {
    if (rc < 0 || ::send(s.fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL) < 0) {
      fail(index);
      return;
    }
    s.handle = loop_.watch(s.fd.get(), POLLIN, &s);
    return;
  }
  if (rc < 0 && errno != EINPROGRESS) {
    fail(index);
    return;
  }
  s.out.resize(2 + msg.size());
  s.out[0] = static_cast<std::uint8_t>(msg.size() >> 8);
  s.out[1] = static_cast<std::uint8_t>(msg.size() & 0xFF);
  std::memcpy(s.out.data() + 2, msg.data(), msg.size());
  s.out_pos = 0;
  s.handle = loop_.watch(s.fd.get(), POLLOUT | POLLIN, &s);
}

void DnsUpstreamClient::on_slot_ready(std::uint32_t index, std::uint32_t events) {
  Slot& s = *slots_[index];
  if (!s.fd) return;
  if (s.transport == dns::Transport::udp) {
    // Drain: every datagram goes to the gate, which ignores what is not ours.
    for (int i = 0; i < 16 && s.fd; ++i) {
      ssize_t n = ::recv(s.fd.get(), rx_.get(), kRxBytes, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        fail(index);  // ECONNREFUSED from an ICMP port unreachable, and the like
        return;
      }
      gate_->on_upstream_reply(index, std::span<const std::uint8_t>(rx_.get(), static_cast<std::size_t>(n)),
                               loop_.now());
      // The gate may have finished (and cancelled) this slot.
    }
    if (s.fd) loop_.wake_next_turn(s.handle);
    return;
  }

  if ((events & (POLLERR | POLLHUP)) && s.out_pos < s.out.size()) {
    fail(index);
    return;
  }
  while (s.out_pos < s.out.size()) {
    ssize_t n = ::send(s.fd.get(), s.out.data() + s.out_pos, s.out.size() - s.out_pos, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN) return;  // still connecting
      fail(index);
      return;
    }
    s.out_pos += static_cast<std::size_t>(n);
    if (s.out_pos == s.out.size()) loop_.modify(s.handle, POLLIN);
  }
  for (;;) {
    std::size_t want = 2;
    if (s.in.size() >= 2) want = 2 + ((std::size_t{s.in[0]} << 8) | s.in[1]);
    if (s.in.size() >= want && want > 2) break;
    std::size_t room = want - s.in.size();
    std::size_t old = s.in.size();
    s.in.resize(want);
    ssize_t n = ::recv(s.fd.get(), s.in.data() + old, room, MSG_DONTWAIT);
    if (n <= 0) {
      s.in.resize(old);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      fail(index);  // closed before a whole reply, or an error
      return;
    }
    s.in.resize(old + static_cast<std::size_t>(n));
    // A zero length prefix makes `room` 0 next time round, and recv() of
    // nothing reads as a close: such a reply fails the attempt.
  }
  gate_->on_upstream_reply(index, std::span<const std::uint8_t>(s.in).subspan(2), loop_.now());
}

}  // namespace abox::netstack
