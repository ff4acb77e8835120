// StackCounters: what a GuestStack counts, every field a count that only
// grows. Each is written out by the stats (netstack/program/stats.cc); the
// list below names them all, and its size is checked against the struct, so
// a counter added here without its name does not build
// (tests/netstack/program/run_stats_test.cc checks that each reaches the
// stats output under that name).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace abox::netstack {

struct StackCounters {
  std::uint64_t frames_in = 0;  // frames the stack took from the link (stats: stack_frames_in)
  std::uint64_t frames_dropped_ipv6 = 0;
  std::uint64_t frames_dropped_other = 0;      // ethertypes we do not speak
  std::uint64_t frames_dropped_malformed = 0;  // refused by GuestFrame::parse() (guest_frame.h)
  std::uint64_t frames_dropped_spoofed = 0;    // IPv4 or IPv6 from a source that is not the guest
  std::uint64_t frames_dropped_fragment = 0;   // IPv4 and IPv6 fragments: no reassembly, by design
  // IPv6 routing headers, first fragments hiding the upper layer, next
  // headers abox-net does not handle (guest_frame.h, Ipv6Oddity)
  std::uint64_t frames_dropped_ipv6_extension = 0;
  std::uint64_t tcp_admitted = 0;
  std::uint64_t tcp_refused = 0;
  std::uint64_t tcp_brokered = 0;  // admitted flows handed to the broker
  std::uint64_t udp_admitted = 0;
  std::uint64_t udp_refused = 0;
  std::uint64_t limit_flows = 0;
  std::uint64_t limit_half_open = 0;
  std::uint64_t syn_dropped = 0;   // SYN verdicts (on_syn()): silence, the guest retries
  std::uint64_t syn_reset = 0;     //   and RST (refusals, limits, the gateway)
  std::uint64_t name_refused = 0;  // SNI/Host did not match
  std::uint64_t connect_failed = 0;
  std::uint64_t time_wait_dropped = 0;  // lwIP TIME_WAIT pcbs freed early (bound_time_wait())
  std::uint64_t dhcp_offers = 0;
  std::uint64_t dhcp_acks = 0;
  std::uint64_t dhcp_naks = 0;
  std::uint64_t dhcp_ignored = 0;    // DECLINE, RELEASE, to another server, relayed
  std::uint64_t dhcp_malformed = 0;  // UDP to port 67 that is not a valid client message
  // UDP flows whose ring receive kept ending without a datagram, read on
  // readiness from then on (udp_flow.cc).
  std::uint64_t udp_ring_receive_fallbacks = 0;
  // Live policy reloads (GuestStack::apply_policy()): applied, and live flows
  // (TCP and UDP) the new policy no longer allowed, cut (policy_revoked).
  std::uint64_t policy_reloads = 0;
  std::uint64_t flows_revoked = 0;
  std::uint64_t answers_forgotten = 0;  // answer-table names a reload revoked
  // Audit mode: flows and name checks the policy would have refused, let through.
  std::uint64_t audit_would_deny = 0;
  // Egress budgets: budgets crossed (a `budget` event each), new flows
  // refused past one, live flows cut when one was crossed.
  std::uint64_t budget_crossed = 0;
  std::uint64_t budget_refused = 0;
  std::uint64_t budget_cut = 0;
  // ICMP and ICMPv6 destination unreachable (administratively prohibited)
  // sent to the guest for refused UDP datagrams, and those the token bucket
  // held back (base/token_bucket.h).
  std::uint64_t icmp_unreachable_sent = 0;
  std::uint64_t icmp_unreachable_limited = 0;
  // ICMPv6 Packet Too Big and ICMP fragmentation needed sent to the guest
  // for its frames over the link's MTU (packet_too_big.h), and those the
  // same token bucket held back.
  std::uint64_t icmp_packet_too_big_sent = 0;
  std::uint64_t icmp_packet_too_big_limited = 0;
  // Published ports (inbound_ports.h): host connections taken and relayed
  // to the guest; refused past a port's limit of live connections, or with
  // the flow table full (accepted and closed at once); refused by the guest
  // (a reset, or no answer within connect_ms).
  std::uint64_t inbound_accepted = 0;
  std::uint64_t inbound_refused_limit = 0;
  std::uint64_t inbound_refused_guest = 0;
  // Echo (ping) flows (echo_flow.h): admitted, refused (admission, limits
  // and the rest count as for UDP), refused because ping sockets are not
  // permitted (net.ipv4.ping_group_range), echo requests relayed, replies
  // relayed to the guest, and replies dropped (not an echo reply to the
  // flow's id, too short, or no room on the link).
  std::uint64_t echo_admitted = 0;
  std::uint64_t echo_refused = 0;
  std::uint64_t echo_not_permitted = 0;
  std::uint64_t echo_requests = 0;
  std::uint64_t echo_replies = 0;
  std::uint64_t echo_replies_dropped = 0;
  // abox-net's host TCP sockets, read as each flow ends (host_tcp_info.h):
  // segments they sent again, and segments that reached them out of order
  // (lost or reordered between the server and this host; the server
  // retransmits them).
  std::uint64_t host_tcp_retransmits = 0;
  std::uint64_t host_tcp_out_of_order = 0;
};

struct StackCounterField {
  std::string_view name;  // in the stats output
  std::uint64_t StackCounters::*member;
};
inline constexpr std::array<StackCounterField, 47> kStackCounterFields = {{
    {"frames_dropped_ipv6", &StackCounters::frames_dropped_ipv6},
    {"frames_dropped_other", &StackCounters::frames_dropped_other},
    {"frames_dropped_malformed", &StackCounters::frames_dropped_malformed},
    {"frames_dropped_spoofed", &StackCounters::frames_dropped_spoofed},
    {"frames_dropped_fragment", &StackCounters::frames_dropped_fragment},
    {"frames_dropped_ipv6_extension", &StackCounters::frames_dropped_ipv6_extension},
    {"tcp_admitted", &StackCounters::tcp_admitted},
    {"tcp_refused", &StackCounters::tcp_refused},
    {"tcp_brokered", &StackCounters::tcp_brokered},
    {"udp_admitted", &StackCounters::udp_admitted},
    {"udp_refused", &StackCounters::udp_refused},
    {"limit_flows", &StackCounters::limit_flows},
    {"limit_half_open", &StackCounters::limit_half_open},
    {"syn_dropped", &StackCounters::syn_dropped},
    {"syn_reset", &StackCounters::syn_reset},
    {"name_refused", &StackCounters::name_refused},
    {"connect_failed", &StackCounters::connect_failed},
    {"tcp_time_wait_dropped", &StackCounters::time_wait_dropped},
    {"dhcp_offers", &StackCounters::dhcp_offers},
    {"dhcp_acks", &StackCounters::dhcp_acks},
    {"dhcp_naks", &StackCounters::dhcp_naks},
    {"dhcp_ignored", &StackCounters::dhcp_ignored},
    {"dhcp_malformed", &StackCounters::dhcp_malformed},
    {"udp_ring_receive_fallbacks", &StackCounters::udp_ring_receive_fallbacks},
    {"stack_frames_in", &StackCounters::frames_in},
    {"policy_reloads", &StackCounters::policy_reloads},
    {"flows_revoked", &StackCounters::flows_revoked},
    {"answers_forgotten", &StackCounters::answers_forgotten},
    {"audit_would_deny", &StackCounters::audit_would_deny},
    {"budget_crossed", &StackCounters::budget_crossed},
    {"budget_refused", &StackCounters::budget_refused},
    {"budget_cut", &StackCounters::budget_cut},
    {"icmp_unreachable_sent", &StackCounters::icmp_unreachable_sent},
    {"icmp_unreachable_limited", &StackCounters::icmp_unreachable_limited},
    {"icmp_packet_too_big_sent", &StackCounters::icmp_packet_too_big_sent},
    {"icmp_packet_too_big_limited", &StackCounters::icmp_packet_too_big_limited},
    {"inbound_accepted", &StackCounters::inbound_accepted},
    {"inbound_refused_limit", &StackCounters::inbound_refused_limit},
    {"inbound_refused_guest", &StackCounters::inbound_refused_guest},
    {"echo_admitted", &StackCounters::echo_admitted},
    {"echo_refused", &StackCounters::echo_refused},
    {"echo_not_permitted", &StackCounters::echo_not_permitted},
    {"echo_requests", &StackCounters::echo_requests},
    {"echo_replies", &StackCounters::echo_replies},
    {"echo_replies_dropped", &StackCounters::echo_replies_dropped},
    {"host_tcp_retransmits", &StackCounters::host_tcp_retransmits},
    {"host_tcp_out_of_order", &StackCounters::host_tcp_out_of_order},
}};
static_assert(sizeof(StackCounters) == kStackCounterFields.size() * sizeof(std::uint64_t),
              "every StackCounters field has its name in kStackCounterFields");

}  // namespace abox::netstack
