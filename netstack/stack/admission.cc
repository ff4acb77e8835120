#include "netstack/stack/admission.h"

namespace abox::netstack {

std::string_view describe(Refusal r) {
  switch (r) {
    case Refusal::none:
      return "admitted";
    case Refusal::reserved:
      return "destination in a reserved range";
    case Refusal::host_address:
      return "destination is an address of this host";
    case Refusal::not_answered:
      return "destination not answered by the DNS gate for an allowed name";
    case Refusal::port_not_allowed:
      return "port not allowed for the names this destination was answered for";
  }
  return "unknown";
}

std::string_view describe(NameCheck c) {
  switch (c) {
    case NameCheck::ok:
      return "name matches";
    case NameCheck::not_answered_for_address:
      return "SNI/Host names a host this address was not answered for";
    case NameCheck::not_allowed_on_port:
      return "SNI/Host names a host whose rule does not allow this port";
  }
  return "unknown";
}

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

  auto names = table.names_for(dst, now);
  if (names.empty()) {
    a.refusal = Refusal::not_answered;
    return a;
  }
  // A brokered name takes the flow before any direct rule: its HTTPS must
  // never leave without the broker's gate.
  if (protocol == policy::Protocol::tcp) {
    for (auto n : names) {
      if (const auto* b = policy.broker_for(n, port)) {
        a.broker = b;
        a.name = n;
        return a;
      }
    }
  }
  auto decision = table.admits(dst, port, protocol, now);
  if (!decision.admitted()) {
    a.refusal = Refusal::port_not_allowed;
    return a;
  }
  a.rule = decision.rule;
  a.name = decision.name;
  a.answer_expires = decision.expires;
  a.needs_name = protocol == policy::Protocol::tcp && decision.rule->requires_name(port);
  return a;
}

NameCheck check_peeked_name(const policy::Policy& policy, const dns::AnswerTable& table,
                            const policy::IpAddress& dst, std::uint16_t port, std::string_view peeked,
                            base::MonoTime now) {
  bool answered = false;
  for (auto n : table.names_for(dst, now)) {
    if (n == peeked) {
      answered = true;
      break;
    }
  }
  if (!answered) return NameCheck::not_answered_for_address;
  if (policy.admits(peeked, port, policy::Protocol::tcp) == nullptr) return NameCheck::not_allowed_on_port;
  return NameCheck::ok;
}

}  // namespace abox::netstack
