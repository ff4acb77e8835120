// GuestStack's IPv6 frames (issue 21; see guest_stack.h for the whole path).
//
// Every IPv6 frame is checked first (ipv6_guest_checks.h): a header trick or
// a source that is not the guest's is dropped under its own reason. With
// GuestConfig::ipv6_neighbour_discovery, neighbour discovery goes to the
// NdpResponder and its answer straight to the link, and the guest's
// addresses in the instance's /64 are its own. Everything else (and all of
// it when the option is off) is dropped as not carried yet: lwIP is built
// without IPv6, so nothing of it may reach lwIP.
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/ipv6_guest_checks.h"

namespace abox::netstack {

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
    if (r.outcome != NdpOutcome::not_ndp) return;     // answered, or ignored and counted there
  }
  drop(DropReason::frame_ipv6, "ipv6");
}

}  // namespace abox::netstack
