// GuestStack: one guest's side of abox-net. How a frame goes through:
//
//   Link ──a read posted on the ring (on_link_read), or receive() on
//          readiness (receive_ready_frames) ──▶ take_frame(): GuestFrame::parse(),
//          the one validated view of the frame's headers (guest_frame.h)
//     refused by the view ── counted (frames_dropped_malformed), dropped
//     IPv4 UDP to port 67 ── DhcpServer gets the UDP payload (the fixed lease),
//                            reply straight to the Link
//     IPv4 fragments, sources other than the guest ── counted, dropped
//     IPv6 ── checked (ipv6_guest_checks.h: header tricks, spoofed sources);
//             neighbour discovery to NdpResponder when the config turns it
//             on, but a neighbour advertisement to the gateway's address
//             ──▶ lwIP (its ND resolves the guest's MAC); with IPv6
//             flows on, TCP, unicast UDP and echo requests without
//             extension headers ──▶ lwIP, as IPv4's below (the DNS gate
//             also on PREFIX::1), and UDP 546 to ff02::1:2 port 547 to
//             Dhcpv6Server (stateless: the DNS server), its reply straight
//             to the Link; the rest counted, dropped, logged once
//             (take_ipv6())
//     anything not IPv4/ARP/IPv6 ── counted, dropped
//     ARP, IPv4 ──▶ lwIP (netif->input; accept-all, see netstack/lwip/abox_lwip.h)
//        echo requests to anything but the gateway ──▶ take_echo() (before
//                           lwIP): admission → EchoFlow (a host ping socket),
//                           or refused with an ICMP(v6) prohibited error
//        other ICMP to anything but the gateway ── eaten by the IPv4 hook, counted
//        UDP ──▶ on_udp():  gateway:53 → GuestDns (the DNS gate)
//                           else       → admission → UdpFlow (a host UDP socket),
//                                        or refused with an ICMP(v6) unreachable
//                                        (a base::TokenBucket bounds them)
//        TCP SYN ──▶ on_syn(): gateway:53 → GuestDns's listener (an ordinary lwIP listener)
//                              else       → limits, admission → accept or RST
//        TCP accepted ──▶ TcpFlow (peek SNI/Host if the rule asks, then a host socket)
//   lwIP ──linkoutput──▶ an io::RingWriter slot (frames up to 2 KiB, written with
//                        the turn's wait) or Link::send_frame (the pbuf
//                        chain's pieces, uncopied; TCP/UDP checksums left to
//                        the link when it offers that)
//
// Everything runs on the io::EventLoop's thread. lwIP is process-global state, so
// there is at most one GuestStack per process (abox-net serves one instance).
// Limits come from the policy: flows (TCP + UDP), half-open TCP, DNS in flight.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/event_log.h"
#include "base/random.h"
#include "base/token_bucket.h"
#include "dns/answer_table.h"
#include "io/event_loop.h"
#include "io/ring_writer.h"
#include "netstack/gateway/dhcp_server.h"
#include "netstack/gateway/dhcpv6_server.h"
#include "netstack/gateway/ndp_responder.h"
#include "netstack/link/link.h"
#include "netstack/stack/drop_reason.h"
#include "netstack/stack/echo_flow.h"
#include "netstack/stack/flow_services.h"
#include "netstack/stack/guest_config.h"
#include "netstack/stack/route_cache.h"
#include "netstack/stack/stack_counters.h"
#include "netstack/stack/udp_flow.h"
#include "policy/policy.h"

struct netif;
struct pbuf;
struct tcp_pcb;
struct udp_pcb;

namespace abox::io {
class ReceiveBufferPool;
}  // namespace abox::io

namespace abox::netstack {

class GuestFrame;
struct OversizeFrame;
class TcpFlow;
class UdpFlow;
class HostReceive;
class GuestDns;

// What happens to a new SYN at the accept-all listener (lwIP's verdicts).
enum class SynVerdict : std::uint8_t { accept, drop, reset };

// Live flows by state, counted when asked (GuestStack::flow_gauges()).
// tcp_* partition tcp_flows(); udp_open is udp_flows(). tcp_half_open and
// tcp_time_wait are lwIP pcbs that are not (or no longer) flows: handshakes
// in progress, and connections lwIP holds after a close it did not hand
// to a flow (DNS over TCP; TcpFlow frees its own, see tcp_flow.cc).
struct FlowGauges {
  std::uint64_t tcp_peeking = 0;     // waiting for the first bytes (SNI/Host)
  std::uint64_t tcp_connecting = 0;  // host connect in flight
  std::uint64_t tcp_open = 0;        // proxying both ways
  std::uint64_t tcp_closing = 0;     // one side shut, draining
  std::uint64_t tcp_brokered = 0;    // handed to the broker
  std::uint64_t tcp_half_open = 0;
  std::uint64_t tcp_time_wait = 0;
  std::uint64_t udp_open = 0;
};

class GuestStack final : public FlowServices {
 public:
  // Everything passed must outlive the stack. Throws std::runtime_error when
  // a second stack is made in one process.
  GuestStack(io::EventLoop& loop, Link& link, const policy::Policy& policy,
             std::vector<policy::Endpoint> upstreams, base::EventLog& events, base::RandomSource& random,
             GuestConfig config = {});
  ~GuestStack();
  GuestStack(const GuestStack&) = delete;
  GuestStack& operator=(const GuestStack&) = delete;

  const StackCounters& counters() const { return counters_; }
  const dns::AnswerTable& table() const { return table_; }
  const GuestDns& dns() const { return *dns_; }
  const NdpCounters& ndp_counters() const { return ndp_.counters(); }
  const Dhcpv6Counters& dhcpv6_counters() const { return dhcpv6_.counters(); }
  // The addresses of the host abox-net runs on: reserved for the DNS gate
  // and admission (policy/host_addresses.h). Empty until its owner fills it
  // (abox-net run: a HostAddressWatch); the stack only reads it.
  policy::HostAddresses& host_addresses() { return host_addresses_; }
  const GuestConfig& config() const override { return config_; }
  // Audit mode: the policy's [mode] audit, or GuestConfig::audit (--audit).
  // Admission's refusals a policy makes (not_answered, port_not_allowed) and
  // the SNI/Host checks let the flow through with a `would_deny` event;
  // reserved ranges and this host's addresses stay refused, as do limits and
  // everything that is not the policy's to lift. A reload in audit mode cuts
  // nothing and forgets no answer (each flow it would cut: a would_deny).
  bool audit() const override { return config_.audit || policy_->mode().audit; }
  void would_deny(std::string_view reason, std::string_view proto, const policy::Endpoint& dst,
                  std::string_view name) override;
  // Egress budgets ([[allow]] max_bytes_out, max_flows, per): counted per
  // rule in fixed windows of `per` seconds from the rule's first flow of the
  // window. A new flow is counted at its SYN (TCP) or first datagram (UDP)
  // and refused (budget_spent) once max_flows were counted or max_bytes_out
  // was sent in the window; bytes are counted as the host socket takes them.
  // When max_bytes_out is crossed, a `budget` event says so and every live
  // flow of the rule is cut at the end of the turn (budget_cut; the flow
  // that crossed it sends what its host socket took first). Reaching
  // max_flows refuses new flows only. A reload starts every budget afresh.
  void spend(std::size_t rule, std::uint64_t bytes) override;
  std::size_t tcp_flows() const { return tcp_flows_.size(); }
  std::size_t udp_flows() const { return udp_flows_.size(); }
  std::size_t echo_flows() const { return echo_flows_.size(); }
  // Every flow [limits] flows counts: TCP, UDP and echo.
  std::size_t flows_now() const { return tcp_flows_.size() + udp_flows_.size() + echo_flows_.size(); }
  // What lwIP's glue (netstack/lwip/abox_lwip.h) counted, for the stats:
  // ICMP to a foreign address it dropped, and lwIP's TCP retransmissions to
  // the guest (by its timer; on duplicate ACKs).
  struct LwipCounts {
    std::uint64_t icmp_not_for_gateway = 0;
    std::uint64_t tcp_retransmit_timeouts = 0;
    std::uint64_t tcp_fast_retransmits = 0;
  };
  static LwipCounts lwip_counts();
  // Walks the flow table and lwIP's pcb lists: O(flows), every one bounded
  // (limits.flows, kMaxTimeWait), for the stats, never the packet path.
  FlowGauges flow_gauges() const;
  // The host's routes changed (or notifications of them were lost): every
  // remembered route answer is asked again (abox-net run: HostAddressWatch).
  void forget_routes() { routes_.forget(); }
  const RouteCache& routes() const { return routes_; }
  // False once the link has failed for good (the guest's namespace or VM is gone).
  bool link_alive() const { return link_alive_; }

  // Reads and handles every frame the link has waiting now, without
  // blocking, however the link is read (at most 256 reads): for tests and
  // the frames fuzzer, which drive the stack by hand instead of turning the
  // loop. On readiness that is receive() until nothing is waiting (what the
  // loop itself calls when the fd is readable). On the ring it takes the
  // read in flight if the kernel has finished it (io::EventLoop::complete_ready(),
  // which leaves every other completion for the next turn), the frames that
  // read brought, and posts the next read, until a read finds nothing.
  void poll_link();
  // True when the link's frames come by ring reads (GuestConfig).
  bool link_read_on_ring() const { return ring_reader_ != nullptr; }

  // A reloaded policy, validated by its maker, in force from now on: the
  // swap happens here, on the loop's thread, between two frames, so no frame
  // or flow is judged half by the old policy and half by the new one. At
  // once: the DNS gate asks the new policy (GuestDns::set_policy()); the
  // answer table forgets the names it no longer allows; every live flow is
  // judged again (recheck_flow(), admission.h), and one it no longer
  // allows is cut (TCP: RST to the guest, host socket closed; UDP: host
  // socket closed), counted and logged as DropReason::policy_revoked;
  // flows it still allows are untouched (a brokered one follows its
  // binding in the new policy). Handshakes in progress are judged again
  // when they complete. Limits apply to new work: nothing live is cut to
  // meet a lower one. What was sized at start stays: the DNS upstreams, the
  // answer table's capacity and [dns] grace, the gate's slots and cache.
  // The previous reload's policy is freed (nothing refers to it after the
  // pass); the constructor's stays its owner's.
  struct PolicyApplied {
    std::size_t tcp_revoked = 0;
    std::size_t udp_revoked = 0;
    std::size_t echo_revoked = 0;
    std::size_t answers_forgotten = 0;
  };
  PolicyApplied apply_policy(std::unique_ptr<const policy::Policy> next);

  // For flows: FlowServices (flow_services.h).
  io::EventLoop& loop() override { return loop_; }
  const policy::Policy& policy() const override { return *policy_; }
  base::EventLog& events() override { return events_; }
  dns::AnswerTable& answer_table() override { return table_; }
  const policy::HostAddresses& host_addresses() const override { return host_addresses_; }
  StackCounters& mutable_counters() override { return counters_; }
  netif* guest_netif() override { return netif_.get(); }
  // The lwIP pcb that answers the guest from dst (address and port, either
  // family): one per destination, shared by every flow to it (lwIP lets only
  // one pcb bind a foreign address and port), and it hands datagrams it
  // catches to the same dispatch as the accept-all pcb. Counted; released by
  // each flow.
  udp_pcb* acquire_reply_pcb(const policy::Endpoint& dst) override;
  void release_reply_pcb(const policy::Endpoint& dst) override;
  // Writes small datagrams to host UDP sockets through the ring (null when
  // GuestConfig says not to). Results are not reported: UDP loses a
  // datagram a full socket refuses, as sendmsg would.
  io::RingWriter* host_datagram_writer() override { return host_datagram_writer_.get(); }
  bool host_sends_on_ring() const override { return config_.host_io_on_ring; }
  // Buffers for UDP flows' ring receives (null when GuestConfig says not to).
  io::ReceiveBufferPool* host_receive_pool() override { return host_receive_pool_.get(); }
  // A flow that ends with its ring receive still in the kernel (cancelled)
  // leaves it here until its last completion.
  void keep_until_complete(std::unique_ptr<HostReceive> receive) override;

  // A flow is finished: destroy it at the end of this loop turn (it may be
  // inside its own callback now).
  void retire(TcpFlow* flow) override;
  void retire(UdpFlow* flow) override;
  void retire(EchoFlow* flow) override;
  bool send_to_guest(std::span<const std::uint8_t> frame) override;
  // An inbound flow (a published port, inbound_ports.h) joins the flow
  // table: swept, in the gauges and [limits] flows, retired like the
  // guest's own flows; a reload leaves it alone (no policy admitted it).
  void adopt(std::unique_ptr<TcpFlow> flow);

 private:
  // A TCP or UDP flow's `close` event: its name, where it went, its bytes
  // both ways (what `abox policy suggest` counts per rule).
  void close_event(std::string_view proto, std::string_view name, const policy::Endpoint& dst,
                   std::uint64_t bytes_out, std::uint64_t bytes_in);
  friend struct StackGlue;
  class LinkWatcher;
  class LinkReader;

  struct ChecksumOffload {
    std::uint16_t start = 0;        // from the start of the frame
    std::uint16_t offset = 0;       // of the checksum field, from start
    std::size_t field_end = 0;      // 0: no offload for this frame
    std::uint16_t pseudo_sum = 0;   // what the field starts from
    std::uint16_t tcp_headers = 0;  // TCP: Ethernet + IP + TCP header bytes; 0 otherwise
    bool ipv6 = false;              // an IPv6 frame (a GSO frame is then TCPV6)
  };
  static ChecksumOffload checksum_offload_of(std::span<const std::uint8_t> head, std::size_t frame_size);
  // The same for an IPv6 frame lwIP built (guest_stack_ipv6.cc): no
  // extension headers.
  static ChecksumOffload checksum_offload_of_ipv6(std::span<const std::uint8_t> head, std::size_t frame_size);
  static std::uint16_t tcp_headers_end(std::span<const std::uint8_t> ip_bytes, std::size_t ip_header,
                                       std::size_t ip_total);
  // The IP and TCP headers without options: what an MSS is the MTU less.
  static constexpr std::size_t ip_tcp_headers(bool ipv6) { return ipv6 ? 60 : 40; }
  static constexpr std::size_t kMaxFramePieces = 16;
  // The loop's calls into the stack (set up by the constructor).
  void on_ring_frame_written(int res, std::size_t frame_size);
  std::optional<base::MonoTime> next_lwip_timeout() const;
  void sweep(base::MonoTime now);
  void end_turn();
  void output_frame(pbuf* p);
  // The pbuf frames are read into (rx_pbuf_), made if needed; false when
  // out of memory.
  bool ready_rx_pbuf();
  // Readiness: receive() until the link has nothing waiting (LinkWatcher).
  void receive_ready_frames();
  // Handles the n-byte frame just read into rx_pbuf_.
  void take_frame(std::size_t n);
  // After a receive call returned 0: the head of a frame over the MTU the
  // link dropped, when it kept one (link.h), answered with an ICMP "packet
  // too big" when it qualifies (packet_too_big.h). False: no head (the 0
  // meant what it always meant).
  bool take_oversize_head();
  // Whether the oversize frame would have passed every check a frame under
  // the MTU passes, and the answer (guest_stack_ipv6.cc for IPv6).
  void answer_oversize_ipv4(const OversizeFrame& frame);
  void answer_oversize_ipv6(const OversizeFrame& frame);
  // Sends too_big_frame_ when the ICMP error bucket allows (counted).
  void send_too_big();
  // An IPv6 frame (guest_stack_ipv6.cc): checked, neighbour discovery
  // answered when on, the rest dropped.
  void take_ipv6(std::span<const std::uint8_t> bytes, const GuestFrame& frame);
  // An echo request from the guest to anything but the gateway
  // (guest_stack_echo.cc): admitted like a UDP flow's first datagram and
  // relayed by an EchoFlow, or refused with an ICMP(v6) administratively
  // prohibited error. `frame` is an IPv4 ICMP or IPv6 ICMPv6 packet.
  void take_echo(const GuestFrame& frame);
  // Refuses an echo: counted and logged under `why`, and the error to the
  // guest (within icmp_errors_).
  void refuse_echo(DropReason why, const GuestFrame& frame, const policy::IpAddress& src,
                   const policy::IpAddress& dst, std::string_view name = {});
  // The guest's echo request to the gateway's own addresses is lwIP's: true
  // for an echo request (IPv4) that take_echo() relays instead.
  bool is_relayed_echo_v4(const GuestFrame& frame) const;
  // The sweep's and a reload's passes over echo flows.
  void sweep_echo(base::MonoTime now);
  std::size_t recheck_echo(const policy::Policy& now_in_force);
  // Whether the host can route to `to` (RouteCache: asked once per
  // destination until the routes change).
  bool host_has_route(const policy::Endpoint& to) { return routes_.has_route(to.address, loop_.now()); }
  // One of the gateway's own IPv6 addresses (link-local, PREFIX::1).
  bool is_gateway_ipv6(const policy::IpAddress& a) const {
    return a.is_v6() && (a.bytes() == ndp_.link_local() || a.bytes() == ndp_.global());
  }
  // Gives the n-byte frame in rx_pbuf_ (bytes) to lwIP's netif->input.
  void to_lwip(std::span<const std::uint8_t> bytes);
  // Ring reads: one read in flight at a time, posted again as each completes.
  void post_link_read();
  void on_link_read(int res);
  // The other whole frames a ring read brought (a stream link's, link.h).
  void take_buffered_frames();
  void flush_link();
  void link_failed(int err);
  void watch_link_output();
  void count(DhcpOutcome outcome);
  // The admission decided at a SYN, carried on its pcb (an lwIP ext arg)
  // until on_accept() takes it; lwIP frees it with a pcb whose handshake
  // never completes. The name is a copy: the table may drop its own.
  struct SynAdmission {
    std::string name;
    const policy::BrokerBinding* broker = nullptr;
    const policy::ReservedRange* lifted = nullptr;
    bool needs_name = false;
    base::MonoTime answer_expires{};
    std::uint64_t policy_generation = 0;  // a reload during the handshake: judged again
    bool audited = false;                 // let through by audit mode (TcpFlow's `audited`)
    std::size_t budget_rule = kNoBudget;  // the rule whose budget the flow spends
  };
  struct BudgetUse {
    base::MonoTime window_end{};
    std::uint64_t bytes_out = 0;
    std::uint32_t flows = 0;
    bool crossed = false;  // the `budget` event was written for this window
  };
  // The rule's budget, its window rolled to `now`.
  BudgetUse& budget_of(const policy::AllowRule& rule);
  // Counts one new flow against the rule's budget; false (nothing counted)
  // when it is spent.
  bool take_budget(const policy::AllowRule& rule);
  void budget_crossed(const policy::AllowRule& rule, std::string_view what, std::uint64_t limit);
  void cut_budget_flows();
  // The rule index a new direct flow spends (kNoBudget when its rule has none).
  static std::size_t budget_rule_of(const policy::AllowRule* rule) {
    return rule != nullptr && rule->budget ? rule->index : kNoBudget;
  }
  // Audit mode lifts this refusal (a policy's own: not_answered, port_not_allowed).
  bool audit_lifts(DropReason refusal) const;
  // For a flow audit mode lets through: the name its destination was last
  // answered for (empty when none).
  std::string audited_name(const policy::IpAddress& dst) const;
  // Counts and logs one drop or refusal as its row in drop_reason.h says.
  // proto: "tcp", "udp", "ipv6", or empty for a frame (counted as TCP's).
  void drop(DropReason reason, std::string_view proto = {}, const policy::Endpoint* dst = nullptr,
            std::string_view name = {});
  // The SYN hook: decide_syn() once, its verdict counted once.
  SynVerdict on_syn(const policy::IpAddress& dst, std::uint16_t dst_port);
  SynVerdict decide_syn(const policy::IpAddress& dst, std::uint16_t dst_port);
  // The handshake is done: the flow starts with its SYN's admission. False
  // when the pcb was aborted (lwIP must then be answered ERR_ABRT).
  bool on_accept(tcp_pcb* pcb);
  void on_udp(pbuf* p, const policy::IpAddress& src, std::uint16_t src_port, const policy::IpAddress& dst,
              std::uint16_t dst_port);
  std::size_t half_open_now() const;
  // TIME_WAIT pcbs lwIP holds, at most (see bound_time_wait()).
  static constexpr std::size_t kMaxTimeWait = 1024;
  void bound_time_wait();
  // Checks on a valid IPv4 frame before lwIP sees it (fragments, spoofed
  // sources, handshakes to the gateway's DNS); true drops it (counted).
  bool drop_before_lwip(const GuestFrame& frame);
  // A SYN to the gateway's DNS (IPv4, or PREFIX::1) past kMaxDnsHalfOpen
  // handshakes in progress: true drops it (counted).
  bool dns_half_open_full(const GuestFrame& frame);
  static constexpr std::size_t kMaxDnsHalfOpen = 32;
  void drop_finished_receives();

  io::EventLoop& loop_;
  Link& link_;
  const policy::Policy* policy_;  // never null: the constructor's, or the last reload's
  std::unique_ptr<const policy::Policy> reloaded_policy_;  // owns the last reload's
  std::uint64_t policy_generation_ = 0;                    // +1 per reload
  std::vector<BudgetUse> budgets_;                         // by rule index
  std::vector<std::size_t> budgets_to_cut_;                // rules crossed this turn
  base::EventLog& events_;
  GuestConfig config_;
  policy::HostAddresses host_addresses_;  // before dns_, which reads it
  dns::AnswerTable table_;
  DhcpServer dhcp_;
  NdpResponder ndp_;
  Dhcpv6Server dhcpv6_;  // after ndp_: built from its addresses
  std::unique_ptr<netif> netif_;
  std::unique_ptr<LinkWatcher> link_watcher_;
  std::unique_ptr<LinkReader> ring_reader_;  // set when the link is read on the ring
  std::size_t ring_reads_in_flight_ = 0;
  std::unique_ptr<io::RingWriter> ring_writer_;  // set when the link is written on the ring
  std::unique_ptr<io::RingWriter> host_datagram_writer_;
  // 32 buffers of the largest datagram: 2 MiB reserved, resident as used.
  static constexpr std::uint16_t kHostReceiveBuffers = 32;
  static constexpr std::size_t kHostReceiveBufferBytes = 65536;
  std::unique_ptr<io::ReceiveBufferPool> host_receive_pool_;
  std::vector<std::unique_ptr<HostReceive>> ending_receives_;
  io::EventLoop::Handle link_handle_ = io::EventLoop::kNoHandle;
  std::uint32_t link_events_ = 0;  // what the link's watch asks for (POLLIN, + POLLOUT)
  tcp_pcb* listener_ = nullptr;
  udp_pcb* udp_all_ = nullptr;
  std::unique_ptr<GuestDns> dns_;
  std::unique_ptr<SynAdmission> syn_admission_;  // the last SYN's, until lwIP makes its pcb
  std::uint8_t syn_admission_arg_ = 0;           // lwIP ext arg id (one per process)
  std::unordered_map<TcpFlow*, std::unique_ptr<TcpFlow>> tcp_flows_;
  std::unordered_map<UdpFlowKey, std::unique_ptr<UdpFlow>, UdpFlowKeyHash> udp_flows_;
  std::unordered_map<EchoFlowKey, std::unique_ptr<EchoFlow>, EchoFlowKeyHash> echo_flows_;
  std::vector<EchoFlow*> sweep_echo_;
  struct ReplyPcb {
    udp_pcb* pcb = nullptr;
    std::uint32_t users = 0;
  };
  struct EndpointHash {
    std::size_t operator()(const policy::Endpoint& e) const noexcept {
      return policy::IpAddressHash{}(e.address) * 31 + e.port;
    }
  };
  std::unordered_map<policy::Endpoint, ReplyPcb, EndpointHash> reply_pcbs_;
  std::vector<TcpFlow*> sweep_tcp_;  // reused by the once-a-second sweep
  std::vector<UdpFlow*> sweep_udp_;
  std::vector<tcp_pcb*> sweep_time_wait_;
  // The pbuf the next frame is read into (see receive_ready_frames()), and its size.
  pbuf* rx_pbuf_ = nullptr;
  std::uint16_t rx_size_;
  std::vector<std::uint8_t> rx_out_;         // a frame lwIP hands out, made contiguous when it must be
  std::vector<std::uint8_t> too_big_frame_;  // the last ICMP "packet too big" built
  // lwIP's checksum flags for this link: all on, or TCP/UDP generation left
  // to the link (tx_checksum_offload()).
  std::uint16_t tx_checksum_flags_ = 0xFFFF;
  base::MonoTime next_sweep_{};
  bool link_alive_ = true;
  bool link_full_ = false;                        // the link's fd took only part of a flush: wait for POLLOUT
  std::array<bool, kDropReasons> logged_once_{};  // DropLog::once reasons already logged
  StackCounters counters_;
  // ICMP(v6) unreachables for refused UDP: 20 at once, then 10 a second.
  base::TokenBucket icmp_errors_{10, 20};
  RouteCache routes_;
  // Last: unregistered first, while what their callbacks use is still whole.
  io::EventLoop::Registration lwip_timers_;
  io::EventLoop::Registration sweep_timer_;
  io::EventLoop::Registration end_of_turn_;
};

}  // namespace abox::netstack
