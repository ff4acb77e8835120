// DropReason: why the guest side of abox-net dropped a frame or refused a
// flow. One enum, one table (name, sentence, how it is logged), and one
// function that counts and logs a drop (GuestStack::drop()), so a drop is
// never counted without its line or logged without its counter.
//
// The table is indexed by the enum and sized by its last value (count_),
// checked at compile time: a value without a row does not build.
//
// How each is logged:
//   none   counted only (per-frame drops a guest can send at line rate; the
//          counters show them);
//   once   the first one is logged, the rest counted (IPv6 not carried yet);
//   deny   a `deny` event whose `reason` is the sentence, with the
//          destination and protocol;
//   limit  a `limit` event whose `reason` is the name, with the limit, the
//          destination and protocol.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "netstack/stack/stack_counters.h"

namespace abox::netstack {

enum class DropReason : std::uint8_t {
  // Frames, before lwIP (take_frame()).
  frame_malformed,  // refused by GuestFrame::parse()
  frame_ipv6,
  frame_ethertype,  // neither IPv4, ARP nor IPv6
  frame_fragment,
  frame_spoofed,  // IPv4 from a source that is not the guest
  // IPv6 frames (issue 21): what GuestFrame marks as an Ipv6Oddity, and the
  // source rule of guest_ipv6_source.h.
  frame_ipv6_routing_header,
  frame_ipv6_fragment,
  frame_ipv6_hidden_upper_layer,
  frame_ipv6_next_header,
  frame_ipv6_spoofed,
  gateway_dns_half_open,  // handshakes to the gateway's DNS over their bound
  // Flows: limits.
  flows,
  half_open,
  // Flows: admission's refusals (admission.h).
  reserved,
  host_address,
  not_answered,
  port_not_allowed,
  // Flows: refusals of the stack itself.
  no_broker,           // a brokered name, and no broker attached
  answer_expired,      // the answer expired between a flow's SYN and its ACK
  gateway_udp,         // UDP to the gateway, not DNS
  host_socket_failed,  // a UDP flow's host socket could not be made
  // Live flows a reloaded policy no longer allows (name, port, or an
  // [unsafe] lift withdrawn): cut, RST to the guest (GuestStack::apply_policy()).
  policy_revoked,
  // Egress budgets ([[allow]] max_bytes_out / max_flows per window): a new
  // flow past its rule's budget, and a live flow cut when it was crossed.
  budget_spent,
  budget_cut,
  no_route,  // an IPv6 TCP flow: the host has no route to the destination
  // Echo (ping) flows (echo_flow.h): answered, but no rule for the names
  // allows icmp; and ping sockets not permitted to abox-net's group
  // (net.ipv4.ping_group_range), logged once with how to enable them.
  icmp_not_allowed,
  echo_not_permitted,
  count_,  // not a reason: the number of them
};

enum class DropLog : std::uint8_t { none, once, deny, limit };

struct DropReasonInfo {
  std::string_view name;      // short, stable: the `reason` of a limit event
  std::string_view sentence;  // the `reason` of a deny event
  DropLog log = DropLog::none;
  // The counter it goes to, for a TCP flow (and every frame) and for a UDP
  // flow. An echo flow ("icmp") counts as a UDP flow would, but udp_refused
  // goes to echo_refused (GuestStack::drop()).
  std::uint64_t StackCounters::*tcp_counter = nullptr;
  std::uint64_t StackCounters::*udp_counter = nullptr;
};

inline constexpr std::size_t kDropReasons = static_cast<std::size_t>(DropReason::count_);

const DropReasonInfo& info(DropReason r);
inline std::string_view describe(DropReason r) {
  return info(r).sentence;
}

}  // namespace abox::netstack
