// The DropReason table (see drop_reason.h).
#include "netstack/stack/drop_reason.h"

namespace abox::netstack {
namespace {

// In the enum's order; the row count must match it.
constexpr std::array<DropReasonInfo, kDropReasons> kTable = {{
    {"frame_malformed", "frame headers that do not add up", DropLog::none,
     &StackCounters::frames_dropped_malformed, &StackCounters::frames_dropped_malformed},
    {"frame_ipv6", "IPv6 is not supported yet; IPv6 frames are dropped", DropLog::once,
     &StackCounters::frames_dropped_ipv6, &StackCounters::frames_dropped_ipv6},
    {"frame_ethertype", "an ethertype abox-net does not speak", DropLog::none,
     &StackCounters::frames_dropped_other, &StackCounters::frames_dropped_other},
    {"frame_fragment", "an IPv4 fragment (no reassembly, by design)", DropLog::none,
     &StackCounters::frames_dropped_fragment, &StackCounters::frames_dropped_fragment},
    {"frame_spoofed", "IPv4 from a source that is not the guest", DropLog::none,
     &StackCounters::frames_dropped_spoofed, &StackCounters::frames_dropped_spoofed},
    {"frame_ipv6_routing_header", "an IPv6 routing header (type 0 or any: a guest's packets go one hop)",
     DropLog::none, &StackCounters::frames_dropped_ipv6_extension,
     &StackCounters::frames_dropped_ipv6_extension},
    {"frame_ipv6_fragment", "an IPv6 fragment (no reassembly, by design)", DropLog::none,
     &StackCounters::frames_dropped_fragment, &StackCounters::frames_dropped_fragment},
    {"frame_ipv6_hidden_upper_layer", "an IPv6 first fragment without its whole header chain (RFC 7112)",
     DropLog::none, &StackCounters::frames_dropped_ipv6_extension,
     &StackCounters::frames_dropped_ipv6_extension},
    {"frame_ipv6_next_header", "an IPv6 next header abox-net does not handle", DropLog::none,
     &StackCounters::frames_dropped_ipv6_extension, &StackCounters::frames_dropped_ipv6_extension},
    {"frame_ipv6_spoofed", "IPv6 from a source that is not the guest's", DropLog::none,
     &StackCounters::frames_dropped_spoofed, &StackCounters::frames_dropped_spoofed},
    {"gateway_dns_half_open", "too many handshakes to the gateway's DNS", DropLog::none,
     &StackCounters::limit_half_open, &StackCounters::limit_half_open},
    {"flows", "too many flows", DropLog::limit, &StackCounters::limit_flows, &StackCounters::limit_flows},
    {"half_open", "too many TCP handshakes in progress", DropLog::limit, &StackCounters::limit_half_open,
     &StackCounters::limit_half_open},
    {"reserved", "destination in a reserved range", DropLog::deny, &StackCounters::tcp_refused,
     &StackCounters::udp_refused},
    {"host_address", "destination is an address of this host", DropLog::deny, &StackCounters::tcp_refused,
     &StackCounters::udp_refused},
    {"not_answered", "destination not answered by the DNS gate for an allowed name", DropLog::deny,
     &StackCounters::tcp_refused, &StackCounters::udp_refused},
    {"port_not_allowed", "port not allowed for the names this destination was answered for", DropLog::deny,
     &StackCounters::tcp_refused, &StackCounters::udp_refused},
    {"no_broker", "brokered name: no broker attached to this abox-net", DropLog::deny,
     &StackCounters::tcp_refused, &StackCounters::udp_refused},
    {"answer_expired", "answer expired during the handshake", DropLog::deny, &StackCounters::tcp_refused,
     &StackCounters::udp_refused},
    {"gateway_udp", "no UDP service on the gateway but DNS", DropLog::deny, &StackCounters::tcp_refused,
     &StackCounters::udp_refused},
    {"host_socket_failed", "cannot open a host socket for the flow", DropLog::deny,
     &StackCounters::connect_failed, &StackCounters::connect_failed},
    {"policy_revoked", "policy_revoked: the reloaded policy no longer allows this flow", DropLog::deny,
     &StackCounters::flows_revoked, &StackCounters::flows_revoked},
    {"budget_spent", "budget_spent: the rule's egress budget for this window is spent", DropLog::deny,
     &StackCounters::budget_refused, &StackCounters::budget_refused},
    {"budget_cut", "budget_cut: the rule's egress budget was crossed", DropLog::deny,
     &StackCounters::budget_cut, &StackCounters::budget_cut},
    {"no_route", "this host has no route to the destination", DropLog::deny, &StackCounters::connect_failed,
     &StackCounters::connect_failed},
    {"icmp_not_allowed", "icmp (echo) not allowed for the names this destination was answered for",
     DropLog::deny, &StackCounters::echo_refused, &StackCounters::echo_refused},
    {"echo_not_permitted",
     "ping sockets are not permitted to abox-net's group in its network namespace "
     "(net.ipv4.ping_group_range): echo is refused; enable it there with "
     "sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"",
     DropLog::once, &StackCounters::echo_not_permitted, &StackCounters::echo_not_permitted},
}};

constexpr bool every_row_filled() {
  for (const DropReasonInfo& row : kTable) {
    if (row.name.empty() || row.sentence.empty() || row.tcp_counter == nullptr || row.udp_counter == nullptr)
      return false;
  }
  return true;
}
static_assert(every_row_filled(), "every DropReason has its row, in the enum's order");

}  // namespace

const DropReasonInfo& info(DropReason r) {
  return kTable.at(static_cast<std::size_t>(r));
}

}  // namespace abox::netstack
