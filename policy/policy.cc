#include "policy/policy.h"

#include <algorithm>

namespace abox::policy {

std::string SourceLocation::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

bool valid_credential_name(std::string_view name) {
  return !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string_view to_string(Protocol p) {
  switch (p) {
    case Protocol::tcp:
      return "tcp";
    case Protocol::udp:
      return "udp";
    case Protocol::icmp:
      return "icmp";
  }
  return "tcp";
}

std::string PortRange::to_string() const {
  if (first == last) return std::to_string(first);
  return std::to_string(first) + "-" + std::to_string(last);
}

bool AllowRule::allows(std::uint16_t port, Protocol p) const {
  if (p == Protocol::icmp) return icmp;  // ports do not apply to echo
  if ((p == Protocol::tcp && !tcp) || (p == Protocol::udp && !udp)) return false;
  for (const auto& r : ports)
    if (r.contains(port)) return true;
  return false;
}

bool AllowRule::requires_name(std::uint16_t port) const {
  // HTTP and TLS are what ports 80 and 443 carry; elsewhere a protocol may
  // carry no name (SSH) or the server may speak first, so checking is opt-in.
  if (verify_name) return *verify_name;
  return port == 80 || port == 443;
}

const AllowRule* Policy::admits(std::string_view canonical, std::uint16_t port, Protocol p) const {
  const AllowRule* found = nullptr;
  for_each_rule_matching(canonical, [&](const AllowRule& rule, bool) {
    if (!rule.allows(port, p)) return false;
    found = &rule;
    return true;
  });
  return found;
}

const BrokerBinding* Policy::broker_for(std::string_view canonical, std::uint16_t port) const {
  const BrokerBinding* found = nullptr;
  matcher_.for_each_match(canonical, [&](std::uint32_t id, bool) {
    if (!(id & kBrokerBit)) return false;
    const auto& b = brokers_[id & ~kBrokerBit];
    if (b.port != port) return false;
    found = &b;
    return true;
  });
  return found;
}

AddressVerdict Policy::check_address(const IpAddress& a, const HostAddresses& host) const {
  if (host.contains(a)) {
    AddressVerdict v;
    v.reserved = &HostAddresses::range();
    return v;  // never lifted
  }
  return check_address(a);
}

AddressVerdict Policy::check_address(const IpAddress& a) const {
  AddressVerdict v;
  v.reserved = find_reserved(a);
  if (v.reserved == nullptr) return v;
  for (const auto& lifted : unsafe_.allow_reserved) {
    if (lifted.contains(a)) {
      v.lifted_by = &lifted;
      break;
    }
  }
  return v;
}

}  // namespace abox::policy
