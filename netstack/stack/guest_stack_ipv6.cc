// GuestStack's IPv6 frames (issue 21; see guest_stack.h for the whole path).
//
// Every IPv6 frame is checked first (ipv6_guest_checks.h): a header trick or
// a source that is not the guest's is dropped under its own reason. With
// GuestConfig::ipv6_neighbour_discovery, neighbour discovery goes to the
// NdpResponder and its answer straight to the link, and the guest's
// addresses in the instance's /64 are its own. Everything else (and all of
// it when the option is off) is dropped as not carried yet. lwIP is built
// with IPv6 (lwipopts.h) but takes no IPv6 flow yet: the only IPv6 it sees is
// the guest's neighbour advertisements to the gateway, for its ND.
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/ipv6_guest_checks.h"

namespace abox::netstack {

namespace {
constexpr std::uint8_t kNeighbourAdvertisementType = 136;  // RFC 4861 section 4.4
}  // namespace

void GuestStack::take_ipv6(std::span<const std::uint8_t> bytes, const GuestFrame& frame) {
  const bool ndp_on = config_.ipv6_neighbour_discovery;
  const std::optional<Ipv6Prefix64> own_prefix =
      ndp_on ? std::optional<Ipv6Prefix64>(ndp_.prefix()) : std::nullopt;
  if (const auto refusal = ipv6_guest_refusal(frame.ipv6(), own_prefix)) {
    drop(*refusal, "ipv6");
    return;
  }
  if (ndp_on && frame.ipv6().upper_protocol == GuestFrame::kProtoIcmpv6) {
    const NdpResult r = ndp_.handle(bytes, frame, loop_.now());
    if (!r.reply.empty()) (void)link_.send(r.reply);  // a full link loses it; the guest asks again
    // lwIP's own solicitation for the guest (from PREFIX::1 or fe80::1, when
    // it has a segment for it) is answered to one of the gateway's addresses:
    // lwIP's ND takes the answer and learns the guest's MAC. The input hook
    // lets ICMPv6 to those addresses in only (abox_lwip.h).
    if (r.outcome == NdpOutcome::ignored && frame.ipv6().icmp_type == kNeighbourAdvertisementType &&
        (frame.ipv6().destination == ndp_.link_local() || frame.ipv6().destination == ndp_.global())) {
      to_lwip(bytes);
      return;
    }
    if (r.outcome != NdpOutcome::not_ndp) return;  // answered, or ignored and counted there
  }
  drop(DropReason::frame_ipv6, "ipv6");
}

}  // namespace abox::netstack
