#include "netstack/stack/guest_stack.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/byte_reader.h"
#include "io/receive_buffer_pool.h"
#include "lwip/etharp.h"
#include "lwip/ethip6.h"
#include "lwip/icmp.h"
#include "lwip/icmp6.h"
#include "lwip/init.h"
#include "lwip/ip.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
#include "lwip/udp.h"
#include "netif/ethernet.h"
#include "netstack/gateway/guest_dns.h"
#include "netstack/lwip/abox_lwip.h"
#include "netstack/stack/admission.h"
#include "netstack/stack/guest_frame.h"
#include "netstack/stack/lwip_address.h"
#include "netstack/stack/packet_too_big.h"
#include "netstack/stack/tcp_flow.h"
#include "netstack/stack/udp_flow.h"

namespace abox::netstack {

namespace {

GuestStack* g_stack = nullptr;  // lwIP is process-global; so is its one stack

std::uint32_t to_net(const policy::IpAddress& a) {
  std::uint32_t v = 0;
  std::memcpy(&v, a.bytes().data(), 4);
  return v;
}

}  // namespace

// The C side of lwIP's callbacks, as friends of GuestStack.
struct StackGlue {
  static err_t linkoutput(netif*, pbuf* p) {  // NOLINT(readability-non-const-parameter): the frame is patched
    g_stack->output_frame(p);
    return ERR_OK;
  }
  static err_t netif_init(netif* n) {
    n->name[0] = 'a';
    n->name[1] = 'b';
    n->output = etharp_output;
    n->output_ip6 = ethip6_output;
    n->linkoutput = linkoutput;
    n->hwaddr_len = ETH_HWADDR_LEN;
    n->flags = NETIF_FLAG_BROADCAST | NETIF_FLAG_ETHARP | NETIF_FLAG_ETHERNET | NETIF_FLAG_LINK_UP;
    return ERR_OK;
  }
  static abox_lwip_syn_verdict_t syn(void*, const ip_addr_t*, u16_t, const ip_addr_t* dst, u16_t dport) {
    switch (g_stack->on_syn(from_ip_addr(dst), dport)) {
      case SynVerdict::accept:
        return ABOX_LWIP_SYN_ACCEPT;
      case SynVerdict::drop:
        return ABOX_LWIP_SYN_DROP;
      case SynVerdict::reset:
        break;
    }
    return ABOX_LWIP_SYN_RESET;
  }
  static err_t accept(void*, tcp_pcb* pcb, err_t err) {
    if (err != ERR_OK || pcb == nullptr) return ERR_VAL;
    // A pcb aborted inside the callback must be answered ERR_ABRT: lwIP
    // would otherwise go on with the segment on the pcb it just freed.
    return g_stack->on_accept(pcb) ? ERR_OK : ERR_ABRT;
  }
  // The accept-all listener's new pcb (SYN_RCVD) takes the admission its
  // SYN was given; lwIP frees it with the pcb if on_accept() never runs.
  static err_t passive_open(u8_t id, tcp_pcb_listen*, tcp_pcb* pcb) {
    tcp_ext_arg_set_callbacks(pcb, id, &kSynAdmissionCallbacks);
    tcp_ext_arg_set(pcb, id, g_stack->syn_admission_.release());
    return ERR_OK;
  }
  static void destroy_syn_admission(u8_t, void* data) { delete static_cast<GuestStack::SynAdmission*>(data); }
  static constexpr tcp_ext_arg_callbacks kSynAdmissionCallbacks = {&destroy_syn_admission, nullptr};
  static constexpr tcp_ext_arg_callbacks kListenerCallbacks = {nullptr, &passive_open};
  static void udp(void*, udp_pcb*, pbuf* p, const ip_addr_t* src, u16_t sport) {
    g_stack->on_udp(p, from_ip_addr(src), sport, from_ip_addr(ip_current_dest_addr()),
                    abox_lwip_udp_current_dest_port());
  }
};

class GuestStack::LinkWatcher final : public io::EventLoop::Watcher {
 public:
  explicit LinkWatcher(GuestStack& s) : s_(s) {}
  void on_ready(std::uint32_t events) override {
    if ((events & POLLOUT) != 0) {
      s_.link_full_ = false;
      s_.flush_link();
    }
    s_.receive_ready_frames();
  }

 private:
  GuestStack& s_;
};

class GuestStack::LinkReader final : public io::EventLoop::Completion {
 public:
  explicit LinkReader(GuestStack& s) : s_(s) {}
  void on_complete(int res, std::uint32_t /*cqe_flags*/) override { s_.on_link_read(res); }

 private:
  GuestStack& s_;
};

GuestStack::GuestStack(io::EventLoop& loop, Link& link, const policy::Policy& policy,
                       std::vector<policy::Endpoint> upstreams, base::EventLog& events,
                       base::RandomSource& random, GuestConfig config)
    : loop_(loop),
      link_(link),
      policy_(&policy),
      events_(events),
      config_(config),
      table_(policy, policy.limits().answer_entries),
      dhcp_({.gateway = config.gateway.v4_value(),
             .guest = config.guest.v4_value(),
             .prefix_len = config.prefix_len,
             .gateway_mac = config.gateway_mac,
             .mtu = link.mtu()}),
      ndp_(NdpConfig{.gateway_mac = config.gateway_mac,
                     .prefix = instance_ula_prefix(config.instance),
                     .mtu = static_cast<std::uint32_t>(link.mtu()),
                     // A default route and an IPv6 DNS server (the gate on
                     // PREFIX::1) only when IPv6 flows are carried.
                     .router_lifetime_seconds = static_cast<std::uint16_t>(config.ipv6_flows ? 1800 : 0),
                     .rdnss_lifetime_seconds = config.ipv6_flows ? 1800u : 0u,
                     .other_configuration = config.ipv6_flows}),
      dhcpv6_({.gateway_mac = config.gateway_mac,
               .gateway_link_local = ndp_.link_local(),
               .dns_server = ndp_.global()}),
      netif_(std::make_unique<netif>()),
      rx_size_(static_cast<std::uint16_t>(std::min<std::size_t>(link.max_receive_size(), 0xFFFF))) {
  if (g_stack != nullptr) throw std::runtime_error("one GuestStack per process");
  g_stack = this;
  static bool lwip_ready = false;
  static u8_t syn_admission_arg = 0;
  if (!lwip_ready) {
    abox_lwip_init_once();
    syn_admission_arg = tcp_ext_arg_alloc_id();
    lwip_ready = true;
  }
  syn_admission_arg_ = syn_admission_arg;
  abox_lwip_set_syn_hook(&StackGlue::syn);

  ip4_addr_t gw;
  ip4_addr_t mask;
  ip4_addr_t none;
  gw.addr = to_net(config_.gateway);
  mask.addr = lwip_htonl(config_.prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - config_.prefix_len));
  none.addr = 0;
  std::memset(netif_.get(), 0, sizeof(netif));
  if (netif_add(netif_.get(), &gw, &mask, &none, nullptr, &StackGlue::netif_init, ethernet_input) ==
      nullptr) {
    throw std::runtime_error("lwIP netif_add failed");
  }
  std::memcpy(netif_->hwaddr, config_.gateway_mac.data(), 6);
  netif_->mtu = static_cast<u16_t>(link.mtu());
  if (config_.ipv6_neighbour_discovery) {
    // The gateway's two IPv6 addresses, usable at once: NdpResponder speaks
    // for them on the link (lwipopts.h: no DAD, SLAAC, RS or MLD in lwIP).
    // lwIP's own neighbour solicitations for the guest come from the one in
    // the guest address's /64 (nd6_send_ns()).
    const std::array<const std::array<std::uint8_t, 16>*, 2> own = {&ndp_.link_local(), &ndp_.global()};
    for (s8_t i = 0; i < 2; ++i) {
      ip6_addr_t a{};
      std::memcpy(a.addr, own[static_cast<std::size_t>(i)]->data(), 16);
      netif_ip6_addr_set(netif_.get(), i, &a);
      netif_ip6_addr_set_state(netif_.get(), i, IP6_ADDR_PREFERRED);
    }
  }
  // A link whose far end finishes TCP/UDP checksums: lwIP leaves them to it
  // (output_frame() writes the pseudo-header sum the offload starts from).
  if (link_.tx_checksum_offload()) {
    tx_checksum_flags_ = NETIF_CHECKSUM_ENABLE_ALL & ~(NETIF_CHECKSUM_GEN_TCP | NETIF_CHECKSUM_GEN_UDP);
  }
  NETIF_SET_CHECKSUM_CTRL(netif_.get(), tx_checksum_flags_);
  netif_set_default(netif_.get());
  netif_set_up(netif_.get());

  // Over IPv6 too when IPv6 flows are carried: on PREFIX::1, which the
  // router advertisement's RDNSS names.
  dns_ = std::make_unique<GuestDns>(
      loop, policy, host_addresses_, std::move(upstreams), table_, events, random, gw.addr,
      config_.ipv6_neighbour_discovery && config_.ipv6_flows ? std::optional(ndp_.global()) : std::nullopt);
  dns_->set_audit(audit());
  budgets_.resize(policy.rules().size());

  tcp_pcb* pcb = tcp_new();
  if (pcb == nullptr) throw std::runtime_error("lwIP tcp_new failed");
  ip_set_option(pcb, SOF_ABOX_ACCEPT_ALL);
  listener_ = tcp_listen(pcb);
  if (listener_ == nullptr) throw std::runtime_error("lwIP tcp_listen failed");
  tcp_accept(listener_, &StackGlue::accept);
  tcp_ext_arg_set_callbacks(listener_, syn_admission_arg_, &StackGlue::kListenerCallbacks);

  udp_all_ = udp_new();
  if (udp_all_ == nullptr) throw std::runtime_error("lwIP udp_new failed");
  ip_set_option(udp_all_, SOF_ABOX_ACCEPT_ALL);
  udp_bind(udp_all_, IP_ANY_TYPE, 0);
  udp_recv(udp_all_, &StackGlue::udp, nullptr);

  link_watcher_ = std::make_unique<LinkWatcher>(*this);
  if (config_.link_on_ring && link_.ring_send_supported()) {
    ring_writer_ = std::make_unique<io::RingWriter>(
        loop_, link_.fd(),
        [this](int res, std::size_t frame_size) { on_ring_frame_written(res, frame_size); });
  }
  if (config_.host_io_on_ring) {
    host_datagram_writer_ = std::make_unique<io::RingWriter>(loop_, -1, [](int, std::size_t) {});
    host_receive_pool_ =
        std::make_unique<io::ReceiveBufferPool>(loop_, kHostReceiveBuffers, kHostReceiveBufferBytes);
  }
  if (config_.link_on_ring && !link_.ring_receive_iovecs({}).empty()) {
    // Read on the ring; the fd is watched only while output is held back.
    ring_reader_ = std::make_unique<LinkReader>(*this);
    post_link_read();
  } else {
    link_events_ = POLLIN;
    link_handle_ = loop_.watch(link_.fd(), link_events_, link_watcher_.get());
  }

  // lwIP's own timers, and ours: flow deadlines once a second is enough
  // (peek and connect timeouts are seconds).
  lwip_timers_ = loop_.add_timer_source(
      {[this] { return next_lwip_timeout(); }, [](base::MonoTime) { sys_check_timeouts(); }});
  sweep_timer_ =
      loop_.add_timer_source({[this] { return next_sweep_; }, [this](base::MonoTime now) { sweep(now); }});
  end_of_turn_ = loop_.add_turn_hook([this] { end_turn(); });
  next_sweep_ = loop_.now() + base::Seconds(1);
}

GuestStack::~GuestStack() {
  loop_.unwatch(link_handle_);
  // The kernel may still write into rx_pbuf_ (or a stream link's own
  // buffer) until its read is cancelled.
  if (ring_reader_ != nullptr) loop_.cancel_all(ring_reader_.get(), ring_reads_in_flight_);
  ring_writer_.reset();
  tcp_flows_.clear();
  udp_flows_.clear();
  echo_flows_.clear();
  // Flows retired this turn wait in the loop and refer to this stack.
  loop_.delete_retired_now();
  // After the flows, which hand what they queued to the kernel as they go
  // and leave their receives here, cancelled; the pool goes once none is left.
  host_datagram_writer_.reset();
  for (auto& r : ending_receives_) loop_.cancel_all(r.get(), r->in_flight);
  ending_receives_.clear();
  host_receive_pool_.reset();
  for (auto& [_, r] : reply_pcbs_) udp_remove(r.pcb);
  reply_pcbs_.clear();
  dns_.reset();
  if (listener_ != nullptr) tcp_close(listener_);
  if (udp_all_ != nullptr) udp_remove(udp_all_);
  abox_lwip_set_syn_hook(nullptr);
  if (rx_pbuf_ != nullptr) pbuf_free(rx_pbuf_);
  netif_remove(netif_.get());
  g_stack = nullptr;
}

// A frame written on the ring: the result only counts. A full tap drops
// the frame (TCP retransmits), and a dead one shows on the read side.
void GuestStack::on_ring_frame_written(int res, std::size_t frame_size) {
  (void)link_.finish_ring_send(res, frame_size);
}

// lwIP's own timers: when the next one is due (none: nothing scheduled).
std::optional<base::MonoTime> GuestStack::next_lwip_timeout() const {
  const u32_t ms = sys_timeouts_sleeptime();
  if (ms == SYS_TIMEOUTS_SLEEPTIME_INFINITE) return std::nullopt;
  return loop_.now() + base::Millis(ms);
}

// Once a second: flow deadlines (peek and connect timeouts are seconds),
// idle UDP flows, and the bound on lwIP's TIME_WAIT pcbs.
void GuestStack::sweep(base::MonoTime now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + base::Seconds(1);
  // A check may retire its flow, which erases it from the map: walk a
  // snapshot, not the map.
  sweep_tcp_.clear();
  for (auto& [_, f] : tcp_flows_) sweep_tcp_.push_back(f.get());
  for (TcpFlow* f : sweep_tcp_) f->check_deadlines(now);
  sweep_udp_.clear();
  for (auto& [_, f] : udp_flows_) sweep_udp_.push_back(f.get());
  for (UdpFlow* f : sweep_udp_) f->check_idle(now);
  sweep_echo(now);
  bound_time_wait();
}

// The end of every loop turn (after the loop destroyed the flows retired
// in it): receives of ended flows that completed go, the link's batch is
// flushed, its watch follows what it holds, and a ring read that could not
// be posted is tried again.
void GuestStack::end_turn() {
  drop_finished_receives();
  if (!budgets_to_cut_.empty()) cut_budget_flows();
  // A link that batches (a stream socket) writes what this turn sent in
  // one go; what the socket cannot take waits for POLLOUT, and until then
  // no turn tries again (each try would be a send that fails).
  if (link_alive_ && !link_full_ && link_.output_pending()) {
    flush_link();
    link_full_ = link_.output_pending();
  }
  watch_link_output();
  // A ring read that could not be posted (no memory for its pbuf) is tried
  // again every turn, after the frames a stream's last read brought that
  // found no pbuf either.
  if (ring_reader_ != nullptr && ring_reads_in_flight_ == 0) {
    take_buffered_frames();
    post_link_read();
  }
}

// Frames are read straight into a pbuf of the largest frame size. One that
// fills at least half of it goes to lwIP as it is, uncopied (bulk TCP at a
// large MTU); a smaller one is copied into a pbuf of its own size, so that a
// small frame lwIP queues never holds 64 KiB (mem_trim does nothing with
// MEM_LIBC_MALLOC, LWIP.md), and the big pbuf is read into again.
void GuestStack::receive_ready_frames() {
  // A ring read owns rx_pbuf_ while it is in flight: frames come that way
  // (the fd is watched then only for POLLOUT).
  if (ring_reader_ != nullptr) return;
  for (int i = 0; i < 256; ++i) {
    if (!ready_rx_pbuf()) break;  // out of memory: the frames wait in the link
    auto r = link_.receive(std::span<std::uint8_t>(static_cast<std::uint8_t*>(rx_pbuf_->payload), rx_size_));
    if (!r.ok()) {
      link_failed(r.error());
      return;
    }
    if (*r == 0) {
      if (take_oversize_head()) continue;
      return;
    }
    take_frame(*r);
  }
  loop_.wake_next_turn(link_handle_);
}

// On the ring, a receive() here would race the read in flight (which owns
// rx_pbuf_, and on a stream the bytes it reads are the next frame's): the
// frames come through that read instead, taken now if the kernel has it.
void GuestStack::poll_link() {
  if (ring_reader_ == nullptr) {
    receive_ready_frames();
    return;
  }
  for (int i = 0; i < 256 && link_alive_; ++i) {
    // What an earlier read left (no pbuf then), and a read posted if none is.
    take_buffered_frames();
    post_link_read();
    if (ring_reads_in_flight_ == 0 || loop_.complete_ready(ring_reader_.get()) == 0) return;
  }
}

bool GuestStack::ready_rx_pbuf() {
  if (rx_pbuf_ == nullptr) rx_pbuf_ = pbuf_alloc(PBUF_RAW, rx_size_, PBUF_RAM);
  return rx_pbuf_ != nullptr;
}

void GuestStack::post_link_read() {
  if (!link_alive_ || ring_reads_in_flight_ != 0 || !ready_rx_pbuf()) return;
  auto iov = link_.ring_receive_iovecs(
      std::span<std::uint8_t>(static_cast<std::uint8_t*>(rx_pbuf_->payload), rx_size_));
  io_uring_sqe* s = loop_.request(ring_reader_.get());
  // Offset -1: the fd's own position, which a tap does not have (a stream).
  io_uring_prep_readv(s, link_.fd(), iov.data(), static_cast<unsigned>(iov.size()), ~std::uint64_t{0});
  ++ring_reads_in_flight_;
}

void GuestStack::on_link_read(int res) {
  --ring_reads_in_flight_;
  if (!link_alive_) return;
  auto r = link_.finish_ring_receive(res);
  if (!r.ok()) {
    link_failed(r.error());
    return;
  }
  if (*r != 0) {
    take_frame(*r);
  } else {
    (void)take_oversize_head();
  }
  take_buffered_frames();
  post_link_read();
}

// A stream link's one read may have brought many frames (link.h): every
// whole one is taken now, without another read. Frames left when no pbuf
// could be had wait for the turn hook's retry.
void GuestStack::take_buffered_frames() {
  while (link_alive_ && ready_rx_pbuf()) {
    auto r = link_.receive_buffered(
        std::span<std::uint8_t>(static_cast<std::uint8_t*>(rx_pbuf_->payload), rx_size_));
    if (!r.ok()) {
      link_failed(r.error());
      return;
    }
    if (*r == 0) {
      if (take_oversize_head()) continue;
      return;
    }
    take_frame(*r);
  }
}

// Checked as any frame is (GuestFrame::parse_head(), then the family's own
// checks); the head is in rx_pbuf_, which stays ours: the answer is built
// in a buffer of its own.
bool GuestStack::take_oversize_head() {
  const std::optional<OversizeHead> head = link_.last_oversize_head();
  if (!head) return false;
  const auto parsed = GuestFrame::parse_head(head->head, head->frame_size);
  if (!parsed.ok()) return true;
  if (parsed->view.is_ipv4()) answer_oversize_ipv4(*parsed);
  if (parsed->view.is_ipv6()) answer_oversize_ipv6(*parsed);
  return true;
}

// Only what drop_before_lwip() and lwIP would have let through, with DF
// set: a datagram without DF the guest's kernel would have fragmented had
// it known the MTU, so it is dropped as before (RFC 1191: no answer is
// asked for). lwIP answers ICMP only for the gateway (the input hook eats
// the rest), and an ICMP error never gets one (RFC 1122 3.2.2).
void GuestStack::answer_oversize_ipv4(const OversizeFrame& frame) {
  constexpr std::uint8_t kEchoRequest = 8;
  const Ipv4Fields& ip = frame.view.ipv4();
  if (!ip.dont_fragment || ip.fragment || ip.source_net != to_net(config_.guest)) return;
  std::array<std::uint8_t, 4> destination{};  // network order: the bytes as they stand
  std::memcpy(destination.data(), &ip.destination_net, 4);
  const bool multicast_or_broadcast = (destination[0] >> 4) == 0xE || ip.destination_net == 0xFFFF'FFFF;
  const bool to_gateway = ip.destination_net == to_net(config_.gateway);
  const bool carried =
      ip.protocol == GuestFrame::kProtoTcp || ip.protocol == GuestFrame::kProtoUdp ||
      (ip.protocol == GuestFrame::kProtoIcmp && frame.ipv4_icmp_type == kEchoRequest && to_gateway);
  if (multicast_or_broadcast || !carried) return;
  const auto mtu = static_cast<std::uint16_t>(std::min<std::size_t>(link_.mtu(), 0xFFFF));
  build_icmp_fragmentation_needed(frame, mtu, config_.gateway_mac, too_big_frame_);
  send_too_big();
}

// Shares the bucket of the unreachables (icmp_errors_): a guest that
// floods oversize frames gets at most its rate of answers.
void GuestStack::send_too_big() {
  if (!icmp_errors_.take(loop_.now())) {
    ++counters_.icmp_packet_too_big_limited;
    return;
  }
  if (link_.send(too_big_frame_).ok()) ++counters_.icmp_packet_too_big_sent;  // a full link loses it
}

// Every guest frame is validated once (GuestFrame) and routed once, on the
// view: refused → dropped; IPv6 (ipv6_guest_checks.h) and unknown ethertypes
// → dropped; IPv4 to
// UDP port 67 → the DHCP server; other IPv4 → the checks before lwIP; ARP
// and IPv4 → lwIP.
void GuestStack::take_frame(std::size_t n) {
  const std::span<const std::uint8_t> bytes(static_cast<const std::uint8_t*>(rx_pbuf_->payload), n);
  ++counters_.frames_in;
  const auto parsed = GuestFrame::parse(bytes);
  if (!parsed.ok()) {
    drop(DropReason::frame_malformed);
    return;
  }
  const GuestFrame& frame = *parsed;
  switch (frame.kind()) {
    case EtherKind::ipv6:
      take_ipv6(bytes, frame);
      return;
    case EtherKind::other:
      drop(DropReason::frame_ethertype);
      return;
    case EtherKind::arp:
      break;
    case EtherKind::ipv4:
      // DHCP first: a DISCOVER comes from 0.0.0.0, which the checks below drop.
      if (frame.is_udp() && frame.transport().destination_port == DhcpServer::kServerPort) {
        const DhcpResult dhcp = dhcp_.handle(frame.transport().udp_payload);
        count(dhcp.outcome);
        if (!dhcp.reply.empty()) (void)link_.send(dhcp.reply);  // a full link loses it; the client retries
        return;
      }
      if (drop_before_lwip(frame)) return;
      if (is_relayed_echo_v4(frame)) {
        take_echo(frame);
        return;
      }
      break;
  }
  to_lwip(bytes);
}

void GuestStack::to_lwip(std::span<const std::uint8_t> bytes) {
  const std::size_t n = bytes.size();
  pbuf* p = nullptr;
  if (n * 2 >= rx_size_) {
    p = rx_pbuf_;
    rx_pbuf_ = nullptr;
    pbuf_realloc(p, static_cast<u16_t>(n));
  } else {
    p = pbuf_alloc(PBUF_RAW, static_cast<u16_t>(n), PBUF_RAM);
    if (p == nullptr) return;
    pbuf_take(p, bytes.data(), static_cast<u16_t>(n));
  }
  // A frame whose TCP/UDP checksum the guest's kernel left partial (or
  // verified) is not checked again: it would fail or cost for nothing. The
  // IPv4 header checksum was checked by GuestFrame::parse().
  std::uint16_t flags = tx_checksum_flags_ & ~NETIF_CHECKSUM_CHECK_IP;
  if (link_.last_frame_checksum_trusted()) flags &= ~(NETIF_CHECKSUM_CHECK_TCP | NETIF_CHECKSUM_CHECK_UDP);
  NETIF_SET_CHECKSUM_CTRL(netif_.get(), flags);
  if (netif_->input(p, netif_.get()) != ERR_OK) pbuf_free(p);
}

void GuestStack::count(DhcpOutcome outcome) {
  switch (outcome) {
    case DhcpOutcome::offer:
      ++counters_.dhcp_offers;
      break;
    case DhcpOutcome::ack:
      ++counters_.dhcp_acks;
      break;
    case DhcpOutcome::nak:
      ++counters_.dhcp_naks;
      break;
    case DhcpOutcome::ignored:
      ++counters_.dhcp_ignored;
      break;
    case DhcpOutcome::malformed:
      ++counters_.dhcp_malformed;
      break;
  }
}

void GuestStack::link_failed(int err) {
  if (!link_alive_) return;
  link_alive_ = false;
  // A VMM that exits (or a namespace torn down) closes its end: that is the
  // ordinary end of an instance, not a fault.
  const bool peer_left = err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == EIO || err == 0;
  if (events_.reserve_line())
    events_.write_reserved(
        "link", {{"reason", peer_left ? "the guest's side of the link closed (the VM or namespace went away)"
                                      : "the guest link failed"},
                 {"errno", err},
                 {"error", std::strerror(err)}});
  loop_.stop();
}

void GuestStack::flush_link() {
  if (!link_alive_) return;
  if (auto r = link_.flush(); !r.ok()) link_failed(r.error());
}

// POLLOUT only while the link holds output back: a writable socket would
// otherwise wake the loop on every turn.
void GuestStack::watch_link_output() {
  const std::uint32_t in = ring_reader_ != nullptr ? 0 : POLLIN;
  const std::uint32_t want = link_alive_ && link_.output_pending() ? (in | POLLOUT) : in;
  if (want == link_events_) return;
  link_events_ = want;
  if (want == 0) {
    loop_.unwatch(link_handle_);
    link_handle_ = io::EventLoop::kNoHandle;
  } else if (link_handle_ == io::EventLoop::kNoHandle) {
    link_handle_ = loop_.watch(link_.fd(), want, link_watcher_.get());
  } else {
    loop_.modify(link_handle_, want);
  }
}

// The frame goes to the link as the pbuf chain's pieces, uncopied. With
// checksum offload, lwIP left the TCP/UDP checksum field zero: it gets the
// pseudo-header sum here and the guest's kernel does the rest. The headers
// are lwIP's own, but they are still read through bounds checks: a frame
// whose headers are not all in the first pbuf is made contiguous first.
void GuestStack::output_frame(pbuf* p) {
  if (!link_alive_) return;
  std::array<std::span<const std::uint8_t>, kMaxFramePieces> pieces;
  std::size_t npieces = 0;
  bool chain_fits = true;
  for (pbuf* q = p; q != nullptr; q = q->next) {
    if (q->len == 0) continue;
    if (npieces == pieces.size()) {
      chain_fits = false;
      break;
    }
    pieces[npieces++] = {static_cast<const std::uint8_t*>(q->payload), q->len};
  }
  std::span<std::uint8_t> head(static_cast<std::uint8_t*>(p->payload), p->len);
  OutFrame frame{};
  if (link_.tx_checksum_offload()) {
    auto offload = checksum_offload_of(head, p->tot_len);
    if (offload.field_end > head.size()) chain_fits = false;  // headers span pbufs
    if (!chain_fits) {
      if (rx_out_.size() < p->tot_len) rx_out_.resize(p->tot_len);
      std::size_t n = pbuf_copy_partial(p, rx_out_.data(), p->tot_len, 0);
      head = std::span<std::uint8_t>(rx_out_.data(), n);
      offload = checksum_offload_of(head, n);
      pieces[0] = head;
      npieces = 1;
    }
    if (offload.field_end != 0 && offload.field_end <= head.size()) {
      head[offload.field_end - 2] = static_cast<std::uint8_t>(offload.pseudo_sum >> 8);
      head[offload.field_end - 1] = static_cast<std::uint8_t>(offload.pseudo_sum);
      frame.checksum_start = offload.start;
      frame.checksum_offset = offload.offset;
      // A TCP frame over the MTU is a flow whose MSS on_accept() widened:
      // the guest's kernel takes it as one GSO packet of MSS-sized segments.
      if (offload.tcp_headers != 0 && p->tot_len > link_.mtu() + 14 && link_.tx_tso()) {
        frame.gso_size = static_cast<std::uint16_t>(link_.mtu() - ip_tcp_headers(offload.ipv6));
        frame.gso_header_size = offload.tcp_headers;
        frame.gso_tcp_ipv6 = offload.ipv6;
      }
    }
  } else if (!chain_fits) {
    if (rx_out_.size() < p->tot_len) rx_out_.resize(p->tot_len);
    std::size_t n = pbuf_copy_partial(p, rx_out_.data(), p->tot_len, 0);
    pieces[0] = std::span<const std::uint8_t>(rx_out_.data(), n);
    npieces = 1;
  }
  frame.pieces = std::span<const std::span<const std::uint8_t>>(pieces.data(), npieces);
  if (ring_writer_ != nullptr) {
    const std::size_t size = frame.size();
    if (size + Link::kRingSendHeaderMax <= io::RingWriter::kSlotBytes) {
      std::array<std::uint8_t, Link::kRingSendHeaderMax> header{};
      const auto header_size = link_.ring_send_header(frame, header);
      if (!header_size) return;  // dropped and counted by the link
      std::array<std::span<const std::uint8_t>, kMaxFramePieces + 1> parts;
      parts[0] = std::span<const std::uint8_t>(header.data(), *header_size);
      std::copy_n(pieces.begin(), npieces, parts.begin() + 1);
      if (ring_writer_->write(std::span(parts.data(), npieces + 1), size)) return;
    }
    // Too large for a slot, or every slot in flight: written now, after
    // what this turn queued on the ring.
    loop_.submit_now();
  }
  auto r = link_.send_frame(frame);
  // EAGAIN (full) and EMSGSIZE: the link dropped and counted the frame; TCP
  // retransmits, UDP loses one datagram. A dead link shows on the read side.
  (void)r;
}

// Where the TCP/UDP checksum of an outgoing IPv4 frame is, and the
// pseudo-header sum (folded, not inverted, network order) it starts from.
// `head` is the frame's first piece, frame_size the whole frame's length.
// field_end 0: not TCP or UDP, a fragment, or lengths that do not add up;
// field_end > head.size(): the checksum field is not in the first piece.
GuestStack::ChecksumOffload GuestStack::checksum_offload_of(std::span<const std::uint8_t> head,
                                                            std::size_t frame_size) {
  ChecksumOffload out;
  if (frame_size < head.size()) return out;
  base::ByteReader eth(head);
  if (!eth.skip(12)) return out;
  const auto ethertype = eth.u16be();
  if (ethertype == std::optional<std::uint16_t>{0x86DD}) return checksum_offload_of_ipv6(head, frame_size);
  if (ethertype != std::optional<std::uint16_t>{0x0800}) return out;
  const std::span<const std::uint8_t> ip_bytes = eth.rest();
  base::ByteReader ip(ip_bytes);
  const auto version_ihl = ip.u8();
  const bool tos = ip.skip(1);
  const auto total_length = ip.u16be();
  const bool id = ip.skip(2);
  const auto fragment = ip.u16be();
  const bool ttl = ip.skip(1);
  const auto proto = ip.u8();
  const bool header_checksum = ip.skip(2);
  const auto addresses = ip.bytes(8);
  if (!version_ihl || !tos || !total_length || !id || !fragment || !ttl || !proto || !header_checksum ||
      !addresses)
    return out;
  const std::size_t ihl = std::size_t{*version_ihl & 0x0Fu} * 4;
  const std::size_t total = *total_length;
  if ((*version_ihl >> 4) != 4 || ihl < 20 || total < ihl || total > frame_size - 14) return out;
  if ((*fragment & 0x3FFF) != 0) return out;  // a fragment
  std::size_t field = 0;
  if (*proto == GuestFrame::kProtoTcp) {
    field = 16;
  } else if (*proto == GuestFrame::kProtoUdp) {
    field = 6;
  } else {
    return out;
  }
  if (total < ihl + field + 2) return out;
  std::uint32_t sum = sum16(*addresses);
  sum += *proto;
  sum += static_cast<std::uint32_t>(total - ihl);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  out.start = static_cast<std::uint16_t>(14 + ihl);
  out.offset = static_cast<std::uint16_t>(field);
  out.field_end = 14 + ihl + field + 2;
  out.pseudo_sum = static_cast<std::uint16_t>(sum);
  if (*proto == GuestFrame::kProtoTcp) out.tcp_headers = tcp_headers_end(ip_bytes, ihl, total);
  return out;
}

// Where the TCP header that starts `ip_header` bytes into `ip_bytes` ends,
// counted from the start of the frame (Ethernet included); 0 when its data
// offset is short or runs past `ip_total`, the IP packet's length.
std::uint16_t GuestStack::tcp_headers_end(std::span<const std::uint8_t> ip_bytes, std::size_t ip_header,
                                          std::size_t ip_total) {
  base::ByteReader tcp(ip_bytes);
  if (!tcp.skip(ip_header + 12)) return 0;
  const auto data_offset = tcp.u8();
  if (!data_offset) return 0;
  const std::size_t tcp_header = std::size_t{*data_offset} / 16 * 4;
  if (tcp_header < 20 || ip_header + tcp_header > ip_total) return 0;
  return static_cast<std::uint16_t>(14 + ip_header + tcp_header);
}

bool GuestStack::drop_before_lwip(const GuestFrame& frame) {
  const Ipv4Fields& ip = frame.ipv4();
  // Fragments: lwIP is built without reassembly and would drop them
  // uncounted; count them here (and never hold any state for them).
  if (ip.fragment) {
    drop(DropReason::frame_fragment);
    return true;
  }
  // Only the guest's own address may send: a spoofed source could
  // otherwise make lwIP answer (and admit) on behalf of another host.
  if (ip.source_net != to_net(config_.guest)) {
    drop(DropReason::frame_spoofed);
    return true;
  }
  return dns_half_open_full(frame);
}

bool GuestStack::dns_half_open_full(const GuestFrame& frame) {
  // The DNS listeners on the gateway are ordinary lwIP listeners, outside the
  // SYN hook: bound their handshakes in progress here (both families share
  // the bound).
  if (!frame.is_tcp_syn_only() || frame.transport().destination_port != 53) return false;
  if (frame.is_ipv4() && frame.ipv4().destination_net != to_net(config_.gateway)) return false;
  if (frame.is_ipv6() && frame.ipv6().destination != ndp_.global()) return false;
  std::size_t pending = 0;
  for (tcp_pcb* pcb = tcp_active_pcbs; pcb != nullptr; pcb = pcb->next) {
    if (pcb->state == SYN_RCVD && pcb->local_port == 53) ++pending;
  }
  if (pending < kMaxDnsHalfOpen) return false;
  drop(DropReason::gateway_dns_half_open, "tcp");
  return true;
}

// lwIP keeps a connection it closed first in TIME_WAIT for 2 MSL (two
// minutes), and with malloc-backed pools nothing else bounds how many: a
// guest that opens and closes DNS-over-TCP connections to the gateway in a
// loop would grow that list by every connection. TcpFlow frees its own at
// once; the rest are held to kMaxTimeWait here, oldest dropped first
// (tcp_abort() frees a TIME_WAIT pcb without sending anything). lwIP adds
// new ones at the head of the list, so the tail is the oldest.
void GuestStack::bound_time_wait() {
  std::size_t n = 0;
  tcp_pcb* keep_last = nullptr;
  for (tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) {
    if (++n == kMaxTimeWait) keep_last = pcb;
  }
  if (keep_last == nullptr || keep_last->next == nullptr) return;
  sweep_time_wait_.clear();
  for (tcp_pcb* pcb = keep_last->next; pcb != nullptr; pcb = pcb->next) sweep_time_wait_.push_back(pcb);
  for (tcp_pcb* pcb : sweep_time_wait_) tcp_abort(pcb);
  counters_.time_wait_dropped += sweep_time_wait_.size();
}

// Counted by walking rather than at each transition: a flow changes state
// on many paths (abort, guest reset, deadlines, deferred retirement), and a
// gauge kept by hand on each would drift the day one path forgets; the walk
// cannot. The stats are read by a person or a script, a few times a second
// at most, and the tables are bounded.
FlowGauges GuestStack::flow_gauges() const {
  FlowGauges g;
  for (const auto& [_, flow] : tcp_flows_) {
    switch (flow->phase()) {
      case TcpFlow::Phase::peeking:
        ++g.tcp_peeking;
        break;
      case TcpFlow::Phase::connecting:
        ++g.tcp_connecting;
        break;
      case TcpFlow::Phase::open:
        ++g.tcp_open;
        break;
      case TcpFlow::Phase::closing:
        ++g.tcp_closing;
        break;
      case TcpFlow::Phase::brokered:
        ++g.tcp_brokered;
        break;
    }
  }
  g.tcp_half_open = half_open_now();
  for (tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) ++g.tcp_time_wait;
  g.udp_open = udp_flows_.size();
  return g;
}

GuestStack::LwipCounts GuestStack::lwip_counts() {
  const abox_lwip_counters_t* c = abox_lwip_counters();
  return {.icmp_not_for_gateway = c->icmp_not_for_netif,
          .tcp_retransmit_timeouts = c->tcp_retransmit_timeouts,
          .tcp_fast_retransmits = c->tcp_fast_retransmits};
}

std::size_t GuestStack::half_open_now() const {
  std::size_t n = 0;
  for (tcp_pcb* pcb = tcp_active_pcbs; pcb != nullptr; pcb = pcb->next) {
    if (pcb->state == SYN_RCVD) ++n;
  }
  return n;
}

// The one way the stack drops or refuses: the counter and the log line come
// from the reason's row (drop_reason.h), never written by hand.
void GuestStack::drop(DropReason reason, std::string_view proto, const policy::Endpoint* dst,
                      std::string_view name) {
  const DropReasonInfo& row = info(reason);
  // An echo flow's destination is an address alone: icmp has no port.
  const std::string to = dst == nullptr    ? std::string()
                         : proto == "icmp" ? dst->address.to_string()
                                           : dst->to_string();
  // Echo counts as UDP does, its admission refusals under their own counter.
  std::uint64_t StackCounters::*counter =
      proto == "udp" || proto == "icmp" ? row.udp_counter : row.tcp_counter;
  if (proto == "icmp" && counter == &StackCounters::udp_refused) counter = &StackCounters::echo_refused;
  ++(counters_.*counter);
  switch (row.log) {
    case DropLog::none:
      return;
    case DropLog::once: {
      bool& logged = logged_once_.at(static_cast<std::size_t>(reason));
      if (logged) return;
      logged = true;
      if (events_.reserve_line())
        events_.write_reserved("deny", {{"reason", row.sentence}, {"proto", proto}});
      return;
    }
    case DropLog::deny:
      break;
    case DropLog::limit: {
      const std::uint64_t limit =
          reason == DropReason::half_open ? policy_->limits().half_open : policy_->limits().flows;
      if (events_.reserve_line())
        events_.write_reserved("limit",
                               {{"reason", row.name}, {"limit", limit}, {"dst", to}, {"proto", proto}});
      return;
    }
  }
  if (!events_.reserve_line()) return;
  // A flow to port 53 or 853 of anything but the gateway is a guest asking
  // another resolver, which is never allowed: the event says where DNS is
  // served.
  if (dst != nullptr && (dst->port == 53 || dst->port == 853)) {
    const std::string where =
        "served only by the gateway, " +
        (dst->address.is_v6() ? policy::Endpoint{policy::IpAddress::v6(ndp_.global()), 53}.to_string()
                              : config_.gateway.to_string() + ":53");
    if (name.empty()) {
      events_.write_reserved("deny",
                             {{"reason", row.sentence}, {"dst", to}, {"proto", proto}, {"dns", where}});
    } else {
      events_.write_reserved(
          "deny", {{"reason", row.sentence}, {"name", name}, {"dst", to}, {"proto", proto}, {"dns", where}});
    }
  } else if (name.empty()) {
    events_.write_reserved("deny", {{"reason", row.sentence}, {"dst", to}, {"proto", proto}});
  } else {
    events_.write_reserved("deny", {{"reason", row.sentence}, {"name", name}, {"dst", to}, {"proto", proto}});
  }
}

// The one decision on a new TCP flow, at its SYN, and the one place a SYN
// verdict is counted (syn_reset, syn_dropped; a refusal also by its reason).
// An admitted SYN's decision rides on its pcb to on_accept().
SynVerdict GuestStack::on_syn(const policy::IpAddress& dst, std::uint16_t dst_port) {
  const SynVerdict verdict = decide_syn(dst, dst_port);
  if (verdict == SynVerdict::reset) ++counters_.syn_reset;
  if (verdict == SynVerdict::drop) ++counters_.syn_dropped;
  return verdict;
}

SynVerdict GuestStack::decide_syn(const policy::IpAddress& dst, std::uint16_t dst_port) {
  if (dst == config_.gateway) return SynVerdict::reset;  // only DNS (its own listener) runs there
  if (is_gateway_ipv6(dst)) return SynVerdict::reset;    // only DNS (its own listener) runs there
  const policy::Endpoint to{dst, dst_port};
  // Handshakes in progress become flows: they count against the limit too.
  std::size_t half_open = half_open_now();
  if (flows_now() + half_open >= policy_->limits().flows) {
    drop(DropReason::flows, "tcp", &to);
    return SynVerdict::reset;
  }
  if (half_open >= policy_->limits().half_open) {
    drop(DropReason::half_open, "tcp", &to);
    return SynVerdict::drop;  // the guest retries; old flows keep going
  }
  Admission a =
      admit_flow(*policy_, host_addresses_, table_, dst, dst_port, policy::Protocol::tcp, loop_.now());
  if (!a.admitted() && audit_lifts(*a.refusal)) {
    would_deny(describe(*a.refusal), "tcp", to, audited_name(dst));
    syn_admission_ = std::make_unique<SynAdmission>(SynAdmission{
        audited_name(dst), nullptr, nullptr, false, base::MonoTime::max(), policy_generation_, true});
    return SynVerdict::accept;
  }
  if (!a.admitted()) {
    drop(*a.refusal, "tcp", &to);
    return SynVerdict::reset;
  }
  if (a.broker != nullptr && config_.broker_path.empty()) {
    // Never sent out directly: without a broker there is nowhere to go.
    drop(DropReason::no_broker, "tcp", &to, a.name);
    return SynVerdict::reset;
  }
  // Refused at the SYN, not reset after the handshake: a happy-eyeballs
  // client then falls back to IPv4 at once.
  if (dst.is_v6() && a.broker == nullptr && !host_has_route(to)) {
    drop(DropReason::no_route, "tcp", &to, a.name);
    return SynVerdict::reset;
  }
  // Last: a flow refused for any other reason spends none of its budget.
  if (a.broker == nullptr && a.rule != nullptr && a.rule->budget && !take_budget(*a.rule)) {
    drop(DropReason::budget_spent, "tcp", &to, a.name);
    return SynVerdict::reset;
  }
  // The name is copied: the table's string may go before the handshake ends.
  syn_admission_ = std::make_unique<SynAdmission>(
      SynAdmission{std::string(a.name), a.broker, a.lifted, a.needs_name, a.answer_expires,
                   policy_generation_, false, a.broker != nullptr ? kNoBudget : budget_rule_of(a.rule)});
  return SynVerdict::accept;
}

bool GuestStack::on_accept(tcp_pcb* pcb) {
  const policy::Endpoint dst{from_ip_addr(&pcb->local_ip), pcb->local_port};
  std::unique_ptr<SynAdmission> a(static_cast<SynAdmission*>(tcp_ext_arg_get(pcb, syn_admission_arg_)));
  tcp_ext_arg_set(pcb, syn_admission_arg_, nullptr);
  // Decided at the SYN; what can have changed since is the answer's expiry
  // (a handshake can take seconds of SYN-ACK retransmits).
  if (a == nullptr || loop_.now() >= a->answer_expires) {
    drop(DropReason::answer_expired, "tcp", &dst);
    tcp_abort(pcb);
    return false;
  }
  if (a->policy_generation != policy_generation_) {
    // A reload came during the handshake: judged again, wholly by the
    // policy in force now (the SYN's binding pointer went with the old one).
    Admission again = admit_flow(*policy_, host_addresses_, table_, dst.address, dst.port,
                                 policy::Protocol::tcp, loop_.now());
    if (!again.admitted() && audit_lifts(*again.refusal)) {
      *a = SynAdmission{audited_name(dst.address), nullptr, nullptr, false, base::MonoTime::max(),
                        policy_generation_,        true};
    } else if (!again.admitted() || (again.broker != nullptr && config_.broker_path.empty())) {
      drop(DropReason::policy_revoked, "tcp", &dst, a->name);
      tcp_abort(pcb);
      return false;
    } else {
      *a = SynAdmission{std::string(again.name),
                        again.broker,
                        again.lifted,
                        again.needs_name,
                        again.answer_expires,
                        policy_generation_,
                        false,
                        again.broker != nullptr ? kNoBudget : budget_rule_of(again.rule)};
    }
  }
  if (flows_now() >= policy_->limits().flows) {
    drop(DropReason::flows, "tcp", &dst);  // exact even if handshakes raced past the SYN check
    tcp_abort(pcb);
    return false;
  }
  ++counters_.tcp_admitted;
  if (a->broker != nullptr) ++counters_.tcp_brokered;
  if (events_.reserve_line())
    events_.write_reserved("admit", {{"reason", a->audited             ? "audit mode: would be denied"
                                                : a->broker != nullptr ? "answered name, handed to the broker"
                                                : a->needs_name ? "answered name, SNI/Host to be checked"
                                                                : "answered name"},
                                     {"name", a->name},
                                     {"dst", dst.to_string()},
                                     {"proto", "tcp"}});
  if (a->lifted != nullptr) {
    if (events_.reserve_line())
      events_.write_reserved("unsafe",
                             {{"reason", "flow to a reserved range lifted by [unsafe] allow_reserved"},
                              {"dst", dst.to_string()},
                              {"range", a->lifted->range.to_string()}});
  }
  // A guest whose MSS is its MTU's gets segments of up to 64 KiB, which the
  // link hands over as GSO packets (see output_frame()): a whole number of
  // guest MSS each, so the guest sees the same segments it would otherwise.
  // A flow that asked for a smaller MSS keeps it, unwidened. Over IPv6 the
  // guest's MSS is the MTU less 60 (RFC 8200's 40-byte header), and the
  // frame's headers are 20 bytes longer.
  const std::size_t headers = ip_tcp_headers(IP_IS_V6(&pcb->remote_ip));
  if (link_.tx_tso() && link_.mtu() >= 576 && pcb->mss == link_.mtu() - headers) {
    const std::size_t guest_mss = pcb->mss;
    const std::size_t wide = std::min<std::size_t>(TCP_MSS, (0xFFFF - 14 - headers) / guest_mss * guest_mss);
    if (wide > guest_mss) pcb->mss = static_cast<u16_t>(wide);
  }
  auto flow = std::make_unique<TcpFlow>(*this, pcb, a->needs_name, std::move(a->name), a->broker, a->audited);
  TcpFlow* raw = flow.get();
  raw->set_budget_rule(a->budget_rule);
  tcp_flows_.emplace(raw, std::move(flow));
  raw->start();
  // A flow whose host side failed at once (no socket) aborted its pcb.
  return !raw->aborted();
}

void GuestStack::on_udp(pbuf* p, const policy::IpAddress& src, std::uint16_t src_port,
                        const policy::IpAddress& dst, std::uint16_t dst_port) {
  const policy::Endpoint to{dst, dst_port};
  auto refuse = [&](DropReason why) {
    drop(why, "udp", &to);
    // ICMP "communication administratively prohibited" (type 3, code 13),
    // or ICMPv6 destination unreachable, "administratively prohibited"
    // (type 1, code 1), quoting the datagram: move back over the UDP and IP
    // headers first. Bounded (icmp_errors_, a token bucket): the rest only counted.
    if (!icmp_errors_.take(loop_.now())) {
      ++counters_.icmp_unreachable_limited;
    } else if (pbuf_header_force(p, static_cast<s16_t>(ip_current_header_tot_len() + 8)) == 0) {
      if (dst.is_v6()) {
        icmp6_dest_unreach(p, ICMP6_DUR_PROHIBITED);
      } else {
        icmp_dest_unreach(p, static_cast<enum icmp_dur_type>(13));
      }
      ++counters_.icmp_unreachable_sent;
    }
    pbuf_free(p);
  };
  if (dst == config_.gateway || is_gateway_ipv6(dst)) {
    refuse(DropReason::gateway_udp);
    return;
  }
  const UdpFlowKey key{src, src_port, to};
  if (auto it = udp_flows_.find(key); it != udp_flows_.end()) {
    it->second->from_guest(p);
    return;
  }
  if (flows_now() >= policy_->limits().flows) {
    drop(DropReason::flows, "udp", &to);
    pbuf_free(p);
    return;
  }
  Admission a =
      admit_flow(*policy_, host_addresses_, table_, dst, dst_port, policy::Protocol::udp, loop_.now());
  const bool audited = !a.admitted() && audit_lifts(*a.refusal);
  if (!a.admitted() && !audited) {
    refuse(*a.refusal);
    return;
  }
  if (!audited && a.rule != nullptr && a.rule->budget && !take_budget(*a.rule)) {
    refuse(DropReason::budget_spent);
    return;
  }
  const std::string name = audited ? audited_name(dst) : std::string(a.name);
  if (audited) would_deny(describe(*a.refusal), "udp", to, name);
  if (dst.is_v6() && !host_has_route(to)) {
    refuse(DropReason::no_route);  // at once, as for a SYN: no datagram lost in silence
    return;
  }
  auto flow = std::make_unique<UdpFlow>(*this, key, name, audited);
  flow->set_budget_rule(audited ? kNoBudget : budget_rule_of(a.rule));
  if (!flow->start()) {
    drop(DropReason::host_socket_failed, "udp", &to, name);  // was silent
    pbuf_free(p);
    return;
  }
  ++counters_.udp_admitted;
  if (events_.reserve_line())
    events_.write_reserved("admit", {{"reason", audited ? "audit mode: would be denied" : "answered name"},
                                     {"name", name},
                                     {"dst", to.to_string()},
                                     {"proto", "udp"}});
  UdpFlow* raw = flow.get();
  udp_flows_.emplace(key, std::move(flow));
  raw->from_guest(p);
}

udp_pcb* GuestStack::acquire_reply_pcb(const policy::Endpoint& dst) {
  ReplyPcb& r = reply_pcbs_[dst];
  if (r.pcb == nullptr) {
    r.pcb = udp_new_ip_type(dst.address.is_v6() ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
    const ip_addr_t local = to_ip_addr(dst.address);
    if (r.pcb == nullptr || udp_bind(r.pcb, &local, dst.port) != ERR_OK) {
      if (r.pcb != nullptr) udp_remove(r.pcb);
      reply_pcbs_.erase(dst);
      return nullptr;
    }
    // Datagrams to this destination now match this pcb before the
    // accept-all one: send them through the same dispatch.
    udp_recv(r.pcb, &StackGlue::udp, nullptr);
  }
  ++r.users;
  return r.pcb;
}

void GuestStack::release_reply_pcb(const policy::Endpoint& dst) {
  auto it = reply_pcbs_.find(dst);
  if (it == reply_pcbs_.end()) return;
  if (--it->second.users == 0) {
    udp_remove(it->second.pcb);
    reply_pcbs_.erase(it);
  }
}

GuestStack::PolicyApplied GuestStack::apply_policy(std::unique_ptr<const policy::Policy> next) {
  PolicyApplied out;
  const policy::Policy& now_in_force = *next;
  policy_ = &now_in_force;
  ++policy_generation_;
  ++counters_.policy_reloads;
  dns_->set_policy(now_in_force);
  dns_->set_audit(audit());
  // Budgets start afresh under the new rules.
  budgets_.assign(now_in_force.rules().size(), BudgetUse{});
  budgets_to_cut_.clear();
  // Audit mode keeps every answer: names the policy does not allow still
  // vouch for the flows it lets through.
  if (!audit()) {
    out.answers_forgotten =
        table_.forget_names([&](std::string_view name) { return !now_in_force.allows_name(name); });
  }
  counters_.answers_forgotten += out.answers_forgotten;
  // Cutting retires a flow, which erases it from its map: walk snapshots.
  sweep_tcp_.clear();
  for (auto& [_, f] : tcp_flows_) sweep_tcp_.push_back(f.get());
  for (TcpFlow* f : sweep_tcp_) {
    if (f->finished() || f->inbound()) continue;
    const policy::Endpoint dst = f->destination();
    const Recheck r = recheck_flow(now_in_force, host_addresses_, dst.address, dst.port,
                                   policy::Protocol::tcp, f->name(), f->brokered());
    if (r.allowed) {
      if (f->brokered()) f->follow_binding(r.broker);
      f->set_budget_rule(
          f->brokered() ? kNoBudget
                        : budget_rule_of(now_in_force.admits(f->name(), dst.port, policy::Protocol::tcp)));
      continue;
    }
    if (audit() && !f->brokered()) {
      would_deny(describe(DropReason::policy_revoked), "tcp", dst, f->name());
      continue;
    }
    drop(DropReason::policy_revoked, "tcp", &dst, f->name());
    f->cut();
    ++out.tcp_revoked;
  }
  sweep_udp_.clear();
  for (auto& [_, f] : udp_flows_) sweep_udp_.push_back(f.get());
  for (UdpFlow* f : sweep_udp_) {
    if (f->finished()) continue;
    const policy::Endpoint dst = f->destination();
    if (recheck_flow(now_in_force, host_addresses_, dst.address, dst.port, policy::Protocol::udp, f->name(),
                     false)
            .allowed) {
      f->set_budget_rule(budget_rule_of(now_in_force.admits(f->name(), dst.port, policy::Protocol::udp)));
      continue;
    }
    if (audit()) {
      would_deny(describe(DropReason::policy_revoked), "udp", dst, f->name());
      continue;
    }
    drop(DropReason::policy_revoked, "udp", &dst, f->name());
    f->cut();
    ++out.udp_revoked;
  }
  out.echo_revoked = recheck_echo(now_in_force);
  // Nothing refers to the previous reload's policy any more: flows follow
  // the new bindings, handshakes carry a generation, the gate the new one.
  reloaded_policy_ = std::move(next);
  return out;
}

GuestStack::BudgetUse& GuestStack::budget_of(const policy::AllowRule& rule) {
  BudgetUse& u = budgets_.at(rule.index);
  const base::MonoTime now = loop_.now();
  if (now >= u.window_end) u = BudgetUse{now + base::Seconds(rule.budget->per_s)};
  return u;
}

bool GuestStack::take_budget(const policy::AllowRule& rule) {
  BudgetUse& u = budget_of(rule);
  const policy::Budget& b = *rule.budget;
  if (b.max_bytes_out && u.bytes_out >= *b.max_bytes_out) return false;
  if (b.max_flows && u.flows >= *b.max_flows) {
    if (!u.crossed) budget_crossed(rule, "max_flows", *b.max_flows);
    return false;
  }
  ++u.flows;
  return true;
}

void GuestStack::spend(std::size_t rule_index, std::uint64_t bytes) {
  if (rule_index == kNoBudget || rule_index >= policy_->rules().size()) return;
  const policy::AllowRule& rule = policy_->rules()[rule_index];
  if (!rule.budget || !rule.budget->max_bytes_out) return;
  BudgetUse& u = budget_of(rule);
  u.bytes_out += bytes;
  if (u.bytes_out < *rule.budget->max_bytes_out || u.crossed) return;
  budget_crossed(rule, "max_bytes_out", *rule.budget->max_bytes_out);
  budgets_to_cut_.push_back(rule_index);
}

void GuestStack::budget_crossed(const policy::AllowRule& rule, std::string_view what, std::uint64_t limit) {
  BudgetUse& u = budgets_.at(rule.index);
  u.crossed = true;
  ++counters_.budget_crossed;
  const auto left = std::chrono::duration_cast<base::Seconds>(u.window_end - loop_.now()).count();
  events_.emit("budget", {{"reason", std::string(what) + " crossed"},
                          {"rule", rule.where.to_string()},
                          {"limit", limit},
                          {"bytes_out", u.bytes_out},
                          {"flows", static_cast<std::uint64_t>(u.flows)},
                          {"per_s", static_cast<std::uint64_t>(rule.budget->per_s)},
                          {"window_left_s", static_cast<std::uint64_t>(left > 0 ? left : 0)}});
}

void GuestStack::cut_budget_flows() {
  for (const std::size_t rule : budgets_to_cut_) {
    sweep_tcp_.clear();
    for (auto& [_, f] : tcp_flows_)
      if (f->budget_rule() == rule && !f->finished()) sweep_tcp_.push_back(f.get());
    for (TcpFlow* f : sweep_tcp_) {
      const policy::Endpoint dst = f->destination();
      drop(DropReason::budget_cut, "tcp", &dst, f->name());
      f->cut();
    }
    sweep_udp_.clear();
    for (auto& [_, f] : udp_flows_)
      if (f->budget_rule() == rule && !f->finished()) sweep_udp_.push_back(f.get());
    for (UdpFlow* f : sweep_udp_) {
      const policy::Endpoint dst = f->destination();
      drop(DropReason::budget_cut, "udp", &dst, f->name());
      f->cut();
    }
  }
  budgets_to_cut_.clear();
}

bool GuestStack::audit_lifts(DropReason refusal) const {
  return audit() && (refusal == DropReason::not_answered || refusal == DropReason::port_not_allowed ||
                     refusal == DropReason::icmp_not_allowed);
}

std::string GuestStack::audited_name(const policy::IpAddress& dst) const {
  const auto names = table_.names_for(dst, loop_.now());
  return names.empty() ? std::string() : std::string(names.front().name);
}

void GuestStack::would_deny(std::string_view reason, std::string_view proto, const policy::Endpoint& dst,
                            std::string_view name) {
  ++counters_.audit_would_deny;
  if (!events_.reserve_line()) return;
  events_.write_reserved("would_deny", {{"reason", reason},
                                        {"name", name},
                                        {"dst", proto == "icmp" ? dst.address.to_string() : dst.to_string()},
                                        {"proto", proto},
                                        {"audit", true}});
}

// Every flow ends here once: its `close` event carries its name, where it
// went and its bytes both ways (what `abox policy suggest` counts per rule).
void GuestStack::retire(TcpFlow* flow) {
  auto it = tcp_flows_.find(flow);
  if (it == tcp_flows_.end()) return;
  // An inbound flow (a published port) says inbound_closed instead.
  if (!flow->inbound())
    close_event("tcp", flow->name(), flow->destination(), flow->bytes_out(), flow->bytes_in());
  loop_.delete_later(std::move(it->second));
  tcp_flows_.erase(it);
}

void GuestStack::adopt(std::unique_ptr<TcpFlow> flow) {
  TcpFlow* raw = flow.get();
  tcp_flows_.emplace(raw, std::move(flow));
}

void GuestStack::retire(UdpFlow* flow) {
  auto it = udp_flows_.find(flow->key());
  if (it == udp_flows_.end()) return;
  close_event("udp", flow->name(), flow->destination(), flow->bytes_out(), flow->bytes_in());
  loop_.delete_later(std::move(it->second));
  udp_flows_.erase(it);
}

void GuestStack::close_event(std::string_view proto, std::string_view name, const policy::Endpoint& dst,
                             std::uint64_t bytes_out, std::uint64_t bytes_in) {
  if (!events_.reserve_line()) return;
  events_.write_reserved("close", {{"name", name},
                                   {"dst", dst.to_string()},
                                   {"proto", proto},
                                   {"bytes_out", bytes_out},
                                   {"bytes_in", bytes_in}});
}

void GuestStack::keep_until_complete(std::unique_ptr<HostReceive> receive) {
  ending_receives_.push_back(std::move(receive));
}

void GuestStack::drop_finished_receives() {
  std::erase_if(ending_receives_, [](const auto& r) { return r->in_flight == 0; });
}

}  // namespace abox::netstack
