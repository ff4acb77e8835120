#include "netstack/stack/udp_flow.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "io/receive_buffer_pool.h"
#include "io/ring_writer.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/udp.h"
#include "netstack/stack/flow_services.h"
#include "netstack/stack/lwip_address.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

namespace {

constexpr std::size_t kMaxDatagram = 65535;
constexpr std::size_t kBatch = 8;  // datagrams per recvmmsg
// Ends of the ring receive in a row that brought no datagram (the pool ran
// dry, errors) before the flow reads on readiness instead: a receive that
// keeps ending at once would otherwise be posted again every turn.
constexpr unsigned kMaxReceivesWithoutData = 16;

}  // namespace

std::size_t UdpFlowKeyHash::operator()(const UdpFlowKey& k) const noexcept {
  const policy::IpAddressHash address;
  std::size_t h = address(k.guest);
  h = h * 31 + address(k.destination.address);
  return h * 31 + ((std::size_t{k.guest_port} << 16) | k.destination.port);
}

UdpFlow::UdpFlow(FlowServices& stack, const UdpFlowKey& key, std::string name, bool audited)
    : stack_(stack), key_(key), name_(std::move(name)), audited_(audited) {}

void HostReceive::post(int fd) {
  pool_.post_multishot_receive(this, fd);
  in_flight = 1;
}

void HostReceive::on_complete(int res, std::uint32_t cqe_flags) {
  if (flow_ != nullptr) {
    if (auto datagram = pool_.bytes(res, cqe_flags)) {
      flow_->from_host(*datagram);
    } else if (res == 0) {
      // An empty datagram: the kernel takes no buffer for it and ends the
      // multishot receive, as it would at a stream's end.
      flow_->from_host({});
    }
  }
  pool_.give_back(cqe_flags);
  if ((cqe_flags & IORING_CQE_F_MORE) != 0) return;
  in_flight = 0;
  if (flow_ != nullptr) flow_->receive_ended(res);
}

UdpFlow::~UdpFlow() {
  if (handle_ != io::EventLoop::kNoHandle) stack_.loop().unwatch(handle_);
  if (receive_ != nullptr && receive_->in_flight != 0) {
    receive_->orphan();
    stack_.loop().cancel(receive_.get());
    stack_.keep_until_complete(std::move(receive_));
  }
  // A write still queued names host_'s fd number, which closing it would
  // free for reuse: hand it to the kernel first (which then holds the file).
  if (queued_on_ring_) stack_.loop().submit_now();
  if (pcb_ != nullptr) stack_.release_reply_pcb(key_.destination);
}

bool UdpFlow::start() {
  sockaddr_storage ss{};
  socklen_t len = to_sockaddr(key_.destination, ss);
  host_.reset(::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!host_ || ::connect(host_.get(), reinterpret_cast<sockaddr*>(&ss), len) < 0) return false;
  // Answers leave from the address and port the guest sent to.
  pcb_ = stack_.acquire_reply_pcb(key_.destination);
  if (pcb_ == nullptr) return false;
  if (io::ReceiveBufferPool* pool = stack_.host_receive_pool(); pool != nullptr) {
    receive_ = std::make_unique<HostReceive>(this, *pool);
    receive_->post(host_.get());
  } else {
    handle_ = stack_.loop().watch(host_.get(), POLLIN, this);
  }
  last_activity_ = stack_.loop().now();
  return true;
}

// Only ends in a row count: from_host() starts the count again, so errors
// scattered over a long-lived flow (an ICMP error now and then) never trip it.
void UdpFlow::receive_ended(int res) {
  if (retired_) return;
  // Whatever ended it (ECONNREFUSED from an ICMP error, -ENOBUFS): post it again.
  if (++receives_without_data_ <= kMaxReceivesWithoutData) {
    receive_->post(host_.get());
    return;
  }
  ++stack_.mutable_counters().udp_ring_receive_fallbacks;
  if (stack_.events().reserve_line())
    stack_.events().write_reserved(
        "udp", {{"reason", "ring receives keep ending without data; reading on readiness"},
                {"name", name_},
                {"errno", -res}});
  handle_ = stack_.loop().watch(host_.get(), POLLIN, this);
}

// A datagram of up to a ring slot is copied into one and written with the
// turn's wait (no system call of its own); a longer one goes out by sendmsg
// as the pbufs hold it (one iovec each, uncopied: a datagram from the guest
// is normally one pbuf), after what this turn queued, so a flow's datagrams
// keep their order.
void UdpFlow::from_guest(pbuf* p) {
  last_activity_ = stack_.loop().now();
  if (!host_) {
    pbuf_free(p);
    return;
  }
  stack_.spend(budget_rule_, p->tot_len);
  bytes_out_ += p->tot_len;
  std::array<std::span<const std::uint8_t>, 8> parts{};
  std::size_t count = 0;
  std::size_t covered = 0;
  for (pbuf* q = p; q != nullptr && count < parts.size(); q = q->next, ++count) {
    parts[count] = {static_cast<const std::uint8_t*>(q->payload), q->len};
    covered += q->len;
  }
  io::RingWriter* ring = stack_.host_datagram_writer();
  if (covered == p->tot_len && ring != nullptr &&
      ring->write_to(host_.get(), std::span(parts.data(), count), 0)) {
    queued_on_ring_ = true;
    pbuf_free(p);
    return;
  }
  if (queued_on_ring_) stack_.loop().submit_now();
  // UDP: a full buffer or an ICMP error just loses this datagram.
  if (covered == p->tot_len) {
    std::array<iovec, 8> iov{};
    for (std::size_t i = 0; i < count; ++i)
      iov[i] = {const_cast<std::uint8_t*>(parts[i].data()), parts[i].size()};
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    (void)::sendmsg(host_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } else {  // a longer chain than iov holds: copy it whole
    std::vector<std::uint8_t> whole(p->tot_len);
    pbuf_copy_partial(p, whole.data(), p->tot_len, 0);
    (void)::send(host_.get(), whole.data(), whole.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  pbuf_free(p);
}

// Datagrams from the destination, up to kBatch per recvmmsg: one call takes
// what is waiting and says how much, so a socket that had one datagram costs
// one call, not a second one that finds nothing (EAGAIN). The buffers are
// shared by every flow (one thread) and made on first use; a page is
// resident only once a datagram that long has used it.
void UdpFlow::on_ready(std::uint32_t) {
  if (retired_) return;
  static std::unique_ptr<std::uint8_t[]> buffers;
  if (!buffers) buffers = std::make_unique_for_overwrite<std::uint8_t[]>(kBatch * kMaxDatagram);
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < kBatch; ++i) {
      iov[i] = {buffers.get() + i * kMaxDatagram, kMaxDatagram};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int got = ::recvmmsg(host_.get(), msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      continue;  // ECONNREFUSED and the like: the destination said no to one datagram
    }
    for (int i = 0; i < got; ++i) {
      from_host(std::span<const std::uint8_t>(
          static_cast<const std::uint8_t*>(iov[static_cast<std::size_t>(i)].iov_base),
          msgs[static_cast<std::size_t>(i)].msg_len));
    }
    if (static_cast<std::size_t>(got) < kBatch) return;  // that was all that was waiting
  }
  stack_.loop().wake_next_turn(handle_);
}

void UdpFlow::from_host(std::span<const std::uint8_t> datagram) {
  last_activity_ = stack_.loop().now();
  receives_without_data_ = 0;
  pbuf* p = pbuf_alloc(PBUF_TRANSPORT, static_cast<u16_t>(datagram.size()), PBUF_RAM);
  if (p == nullptr) return;  // out of memory: UDP loses it
  pbuf_take(p, datagram.data(), static_cast<u16_t>(datagram.size()));
  // A datagram longer than the guest's MTU reaches it in fragments
  // (lwipopts.h IP_FRAG, LWIP_IPV6_FRAG). A link that finishes checksums
  // does so for whole datagrams only (output_frame() skips fragments), so
  // lwIP sums this one itself: over IPv6 a UDP checksum left 0 is dropped.
  netif* guest_netif = stack_.guest_netif();
  const std::size_t ip_header = key_.guest.is_v4() ? 20 : 40;
  const u16_t checksum_flags = guest_netif->chksum_flags;
  const bool fragmented = ip_header + 8 + datagram.size() > guest_netif->mtu;
  if (fragmented) NETIF_SET_CHECKSUM_CTRL(guest_netif, checksum_flags | NETIF_CHECKSUM_GEN_UDP);
  // From the destination's address, which is not the netif's own: lwIP's
  // plain udp_send() would refuse that source.
  const ip_addr_t guest = to_ip_addr(key_.guest);
  if (udp_sendto_if_src(pcb_, p, &guest, key_.guest_port, guest_netif, &pcb_->local_ip) == ERR_OK)
    bytes_in_ += datagram.size();
  if (fragmented) NETIF_SET_CHECKSUM_CTRL(guest_netif, checksum_flags);
  pbuf_free(p);
}

void UdpFlow::cut() {
  if (retired_) return;
  retired_ = true;
  stack_.retire(this);
}

void UdpFlow::check_idle(base::MonoTime now) {
  if (retired_) return;
  // An address that became this host's since the flow was admitted ends it
  // as an expired answer would (host_address_watch.h).
  const bool now_host = stack_.host_addresses().contains(key_.destination.address);
  if (now_host && stack_.events().reserve_line()) {
    stack_.events().write_reserved("flow", {{"reason", "the destination became an address of this host"},
                                            {"name", name_},
                                            {"dst", key_.destination.to_string()},
                                            {"proto", "udp"}});
  }
  bool expired =
      now_host || (!audited_ && now >= stack_.answer_table().live_until(key_.destination.address, name_));
  if (expired && !now_host) {
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("flow",
                                     {{"reason", "the answer that admitted the flow expired (TTL + grace)"},
                                      {"name", name_},
                                      {"dst", key_.destination.to_string()},
                                      {"proto", "udp"}});
  }
  if (expired || now - last_activity_ >= base::Seconds(stack_.policy().timeouts().udp_idle_s)) {
    retired_ = true;
    stack_.retire(this);
  }
}

}  // namespace abox::netstack
