// Admission: may a guest's new flow go where it is going?
//
// Decided once, on a flow's first SYN (TCP) or first datagram (UDP), from the
// policy and the instance's AnswerTable, in this order:
//   1. a reserved destination is refused, whatever the table says (an address
//      lifted by [unsafe] passes this step and is marked for logging), and
//      so is an address of this host (policy/host_addresses.h), which
//      nothing lifts;
//   2. the destination must have been answered by the DNS gate, unexpired,
//      for some allowed name;
//   3. among those names (most recently answered first), one whose
//      [[broker]] binding covers this port takes the flow to the broker (TCP
//      only); otherwise one whose [[allow]] rule allows this port and
//      protocol admits it;
//   4. if that rule requires a name on this port, the flow is admitted
//      pending a peek: its TLS SNI or HTTP Host must then pass
//      check_peeked_name() before anything is sent upstream.
// Every refusal carries a reason that becomes the event's `reason`.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/clock.h"
#include "dns/answer_table.h"
#include "netstack/stack/drop_reason.h"
#include "policy/policy.h"

namespace abox::netstack {

// Admission's refusals are DropReasons (drop_reason.h): reserved (the
// destination is in a reserved range), host_address (an address of this
// host), not_answered (no unexpired answer for an allowed name carries it),
// port_not_allowed (answered, but no rule for its names allows this
// port/protocol), icmp_not_allowed (answered, but no rule for its names
// allows icmp: echo, where the port is 0 and not looked at).
using Refusal = DropReason;

struct Admission {
  std::optional<DropReason> refusal;              // empty: admitted
  std::string_view name;                          // the answered name that admits it
  const policy::AllowRule* rule = nullptr;        // set for a direct flow
  const policy::BrokerBinding* broker = nullptr;  // set for a brokered flow
  const policy::ReservedRange* lifted = nullptr;  // reserved but lifted by [unsafe]: log it
  bool needs_name = false;                        // peek SNI/Host before connecting
  base::MonoTime answer_expires{};                // when that answer stops admitting new flows
  // `name` refers to the AnswerTable's string: valid until its next record().
  bool admitted() const { return !refusal.has_value(); }
};

// `host`: this host's own addresses, kept current by its owner.
Admission admit_flow(const policy::Policy& policy, const policy::HostAddresses& host,
                     const dns::AnswerTable& table, const policy::IpAddress& dst, std::uint16_t port,
                     policy::Protocol protocol, base::MonoTime now);

// A live flow, judged again under a reloaded policy (GuestStack::apply_policy()).
// It stays when its destination is not refused (an [unsafe] lift withdrawn,
// or an address of this host, cut it) and its admitting name still takes it
// the same way: a brokered flow needs a [[broker]] binding for that name and
// port (the one it now follows); a direct flow needs an [[allow]] rule for the
// name, port and protocol, and no binding for them (a name that became
// brokered must never leave without the broker's gate). The answer table is
// not asked: the reload forgets the answers of the names it revokes.
struct Recheck {
  bool allowed = false;
  const policy::BrokerBinding* broker = nullptr;  // a brokered flow's binding under the new policy
};
Recheck recheck_flow(const policy::Policy& policy, const policy::HostAddresses& host,
                     const policy::IpAddress& dst, std::uint16_t port, policy::Protocol protocol,
                     std::string_view name, bool brokered);

enum class NameCheck : std::uint8_t {
  ok,
  not_answered_for_address,  // the SNI/Host names a host this address was not answered for
  not_allowed_on_port,       // it was, but that name's rule does not allow this port
  count_,                    // not a result: the number of them
};
inline constexpr std::size_t kNameChecks = static_cast<std::size_t>(NameCheck::count_);
std::string_view describe(NameCheck c);

// For a flow admitted with needs_name: is `peeked` (the canonical SNI or
// Host) one of the names `dst` was answered for (unexpired), and does its
// own rule allow this TCP port? This is what closes the shared-CDN-address
// hole: an address answered for an allowed name cannot carry a flow to a
// host the policy does not allow.
NameCheck check_peeked_name(const policy::Policy& policy, const dns::AnswerTable& table,
                            const policy::IpAddress& dst, std::uint16_t port, std::string_view peeked,
                            base::MonoTime now);

}  // namespace abox::netstack
