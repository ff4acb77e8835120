#include "netstack/stack/echo_flow.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "netstack/stack/echo_message.h"
#include "netstack/stack/flow_services.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

std::size_t EchoFlowKeyHash::operator()(const EchoFlowKey& k) const noexcept {
  const policy::IpAddressHash address;
  return (address(k.guest) * 31 + address(k.destination)) * 31 + k.guest_id;
}

EchoFlow::EchoFlow(FlowServices& stack, const EchoFlowKey& key, const std::array<std::uint8_t, 6>& guest_mac,
                   std::string name, bool audited)
    : stack_(stack), key_(key), guest_mac_(guest_mac), name_(std::move(name)), audited_(audited) {}

EchoFlow::~EchoFlow() {
  if (handle_ != io::EventLoop::kNoHandle) stack_.loop().unwatch(handle_);
}

base::Result<void, int> EchoFlow::start() {
  const bool v6 = key_.destination.is_v6();
  const int protocol = v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP};
  host_.reset(::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol));
  if (!host_) return base::Err{errno};
  sockaddr_storage ss{};
  const socklen_t len = to_sockaddr(policy::Endpoint{key_.destination, 0}, ss);
  if (::connect(host_.get(), reinterpret_cast<sockaddr*>(&ss), len) < 0) return base::Err{errno};
  // connect() bound the socket: its "port" is the id the kernel puts in
  // every request and matches replies by.
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  if (::getsockname(host_.get(), reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
    if (auto ep = from_sockaddr(local)) host_id_ = ep->port;
  }
  handle_ = stack_.loop().watch(host_.get(), POLLIN, this);
  last_activity_ = stack_.loop().now();
  return {};
}

void EchoFlow::from_guest(std::uint16_t sequence, std::span<const std::uint8_t> payload) {
  last_activity_ = stack_.loop().now();
  if (!host_) return;
  const std::vector<std::uint8_t> request = echo_request_message(key_.destination.is_v6(), sequence, payload);
  // A full socket buffer or an ICMP error loses this one request, as the
  // network would.
  if (::send(host_.get(), request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) return;
  ++requests_;
  bytes_out_ += payload.size();
  ++stack_.mutable_counters().echo_requests;
}

void EchoFlow::on_ready(std::uint32_t) {
  if (retired_) return;
  // One buffer for every flow (one thread), made on first use.
  static std::unique_ptr<std::uint8_t[]> buffer;
  constexpr std::size_t kBuffer = kEchoHeader + kMaxEchoPayload + 1;  // +1: a longer one shows as too long
  if (!buffer) buffer = std::make_unique_for_overwrite<std::uint8_t[]>(kBuffer);
  for (int i = 0; i < kRepliesPerWake; ++i) {
    const ssize_t n = ::recv(host_.get(), buffer.get(), kBuffer, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      continue;  // an ICMP error for one request (unreachable): that request is lost
    }
    const std::size_t got = std::min(static_cast<std::size_t>(n), kBuffer);
    (void)from_host(std::span<const std::uint8_t>(buffer.get(), got));
  }
  stack_.loop().wake_next_turn(handle_);
}

bool EchoFlow::from_host(std::span<const std::uint8_t> message) {
  const bool v6 = key_.destination.is_v6();
  const auto reply = parse_echo_reply(message, v6, host_id_);
  if (!reply.ok()) {
    ++stack_.mutable_counters().echo_replies_dropped;
    return false;
  }
  last_activity_ = stack_.loop().now();
  const GuestLink link{stack_.config().gateway_mac, guest_mac_};
  const std::vector<std::uint8_t> frame =
      echo_reply_frame(link, key_.destination, key_.guest, key_.guest_id, reply->sequence, reply->payload);
  if (!stack_.send_to_guest(frame)) {
    ++stack_.mutable_counters().echo_replies_dropped;
    return false;
  }
  ++replies_;
  bytes_in_ += reply->payload.size();
  ++stack_.mutable_counters().echo_replies;
  return true;
}

void EchoFlow::cut() {
  if (retired_) return;
  retired_ = true;
  stack_.retire(this);
}

void EchoFlow::check_idle(base::MonoTime now) {
  if (retired_) return;
  const std::string dst = key_.destination.to_string();
  // An address that became this host's ends the flow, as for UDP
  // (host_address_watch.h).
  const bool now_host = stack_.host_addresses().contains(key_.destination);
  const bool expired =
      now_host || (!audited_ && now >= stack_.answer_table().live_until(key_.destination, name_));
  if (expired && stack_.events().reserve_line()) {
    stack_.events().write_reserved(
        "flow", {{"reason", now_host ? "the destination became an address of this host"
                                     : "the answer that admitted the flow expired (TTL + grace)"},
                 {"name", name_},
                 {"dst", dst},
                 {"proto", "icmp"}});
  }
  if (expired || now - last_activity_ >= base::Seconds(stack_.policy().timeouts().icmp_idle_s)) {
    retired_ = true;
    stack_.retire(this);
  }
}

}  // namespace abox::netstack
