#include "netstack/stack/admission.h"

#include <array>

namespace abox::netstack {

namespace {
// In the enum's order.
constexpr std::array<std::string_view, kNameChecks> kNameCheckSentences = {{
    "name matches",
    "SNI/Host names a host this address was not answered for",
    "SNI/Host names a host whose rule does not allow this port",
}};
static_assert(!kNameCheckSentences.back().empty(), "every NameCheck has its sentence");
}  // namespace

std::string_view describe(NameCheck c) {
  return kNameCheckSentences.at(static_cast<std::size_t>(c));
}

Recheck recheck_flow(const policy::Policy& policy, const policy::HostAddresses& host,
                     const policy::IpAddress& dst, std::uint16_t port, policy::Protocol protocol,
                     std::string_view name, bool brokered) {
  Recheck r;
  if (policy.check_address(dst, host).refused()) return r;
  const policy::BrokerBinding* binding =
      protocol == policy::Protocol::tcp ? policy.broker_for(name, port) : nullptr;
  if (brokered) {
    r.allowed = binding != nullptr;
    r.broker = binding;
    return r;
  }
  r.allowed = binding == nullptr && policy.admits(name, port, protocol) != nullptr;
  return r;
}

// One reserved-range check, one table lookup (no allocation), then the
// names in the table's order: a broker binding first, then allow rules.
Admission admit_flow(const policy::Policy& policy, const policy::HostAddresses& host,
                     const dns::AnswerTable& table, const policy::IpAddress& dst, std::uint16_t port,
                     policy::Protocol protocol, base::MonoTime now) {
  Admission a;
  auto verdict = policy.check_address(dst, host);
  if (verdict.refused()) {
    a.refusal =
        verdict.reserved == &policy::HostAddresses::range() ? Refusal::host_address : Refusal::reserved;
    return a;
  }
  if (verdict.reserved != nullptr) a.lifted = verdict.reserved;

  const dns::AnswerTable::AnsweredNames names = table.names_for(dst, now);
  if (names.empty()) {
    a.refusal = Refusal::not_answered;
    return a;
  }
  // A brokered name takes the flow before any direct rule: its HTTPS must
  // never leave without the broker's gate.
  if (protocol == policy::Protocol::tcp) {
    for (const auto& n : names) {
      if (const auto* b = policy.broker_for(n.name, port)) {
        a.broker = b;
        a.name = n.name;
        a.answer_expires = n.expires;
        return a;
      }
    }
  }
  for (const auto& n : names) {
    if (const policy::AllowRule* rule = policy.admits(n.name, port, protocol)) {
      a.rule = rule;
      a.name = n.name;
      a.answer_expires = n.expires;
      a.needs_name = protocol == policy::Protocol::tcp && rule->requires_name(port);
      return a;
    }
  }
  a.refusal = protocol == policy::Protocol::icmp ? Refusal::icmp_not_allowed : Refusal::port_not_allowed;
  return a;
}

NameCheck check_peeked_name(const policy::Policy& policy, const dns::AnswerTable& table,
                            const policy::IpAddress& dst, std::uint16_t port, std::string_view peeked,
                            base::MonoTime now) {
  bool answered = false;
  for (const auto& n : table.names_for(dst, now)) {
    if (n.name == peeked) {
      answered = true;
      break;
    }
  }
  if (!answered) return NameCheck::not_answered_for_address;
  if (policy.admits(peeked, port, policy::Protocol::tcp) == nullptr) return NameCheck::not_allowed_on_port;
  return NameCheck::ok;
}

}  // namespace abox::netstack
