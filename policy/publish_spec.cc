#include "policy/publish_spec.h"

#include "base/decimal.h"

namespace abox::policy {

namespace {

bool is_wildcard(const IpAddress& a) {
  return a == IpAddress{} || a == IpAddress::v6({});
}

}  // namespace

std::string_view describe(PublishError e) {
  switch (e) {
    case PublishError::empty:
      return "[HOST_ADDR:]HOST_PORT:GUEST_PORT[/udp], with no empty part";
    case PublishError::too_many_parts:
      return "[HOST_ADDR:]HOST_PORT:GUEST_PORT[/udp] (an IPv6 address goes in brackets)";
    case PublishError::bad_address:
      return "a host address: an IPv4 address, or an IPv6 address in brackets";
    case PublishError::bad_host_port:
      return "a host port from 1 to 65535";
    case PublishError::bad_guest_port:
      return "a guest port from 1 to 65535";
    case PublishError::bad_protocol:
      return "/tcp or /udp after the guest port";
    case PublishError::duplicate:
      return "a host address and port not already published (for that protocol)";
  }
  return "a valid published port";
}

// Appended to an empty string, never a literal prepended (GCC 12's -O3
// -Wrestrict false positive, docs/development.md).
std::string PublishSpec::host_endpoint() const {
  std::string out;
  if (host_address.is_v6()) out += '[';
  out += host_address.to_string();
  if (host_address.is_v6()) out += ']';
  out += ':';
  out += std::to_string(host_port);
  return out;
}

std::string PublishSpec::to_string() const {
  std::string out = host_endpoint();
  out += ':';
  out += std::to_string(guest_port);
  if (protocol == Protocol::udp) out += "/udp";
  return out;
}

base::Result<PublishSpec, PublishError> parse_publish_spec(std::string_view text) {
  PublishSpec spec;
  if (text.empty()) return base::Err{PublishError::empty};
  // The protocol suffix.
  if (auto slash = text.rfind('/'); slash != std::string_view::npos) {
    const std::string_view proto = text.substr(slash + 1);
    if (proto == "udp") {
      spec.protocol = PublishSpec::Protocol::udp;
    } else if (proto != "tcp") {
      return base::Err{PublishError::bad_protocol};
    }
    text = text.substr(0, slash);
    if (text.find('/') != std::string_view::npos) return base::Err{PublishError::bad_protocol};
  }
  // A bracketed IPv6 host address first: its colons are not separators.
  std::string_view address_text;
  bool has_address = false;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return base::Err{PublishError::bad_address};
    address_text = text.substr(1, close - 1);
    text = text.substr(close + 2);
    has_address = true;
    auto a = IpAddress::parse(address_text);
    if (!a || !a->is_v6()) return base::Err{PublishError::bad_address};
    spec.host_address = *a;
  }
  // What is left: [ADDR:]HOST:GUEST (ADDR only when no bracket came first).
  std::string_view parts[3];
  std::size_t n = 0;
  for (;;) {
    const auto colon = text.find(':');
    if (n == 3) return base::Err{PublishError::too_many_parts};
    parts[n++] = text.substr(0, colon);
    if (colon == std::string_view::npos) break;
    text = text.substr(colon + 1);
  }
  for (std::size_t i = 0; i < n; ++i)
    if (parts[i].empty()) return base::Err{PublishError::empty};
  if (n == 1) return base::Err{PublishError::empty};  // one port alone: which side is it?
  if (n == 3) {
    if (has_address) return base::Err{PublishError::too_many_parts};
    auto a = IpAddress::parse(parts[0]);
    if (!a) return base::Err{PublishError::bad_address};
    if (!a->is_v4()) return base::Err{PublishError::too_many_parts};  // unbracketed IPv6
    spec.host_address = *a;
  }
  auto host = base::parse_port(parts[n - 2], base::LeadingZeros::refused);
  if (!host) return base::Err{PublishError::bad_host_port};
  auto guest = base::parse_port(parts[n - 1], base::LeadingZeros::refused);
  if (!guest) return base::Err{PublishError::bad_guest_port};
  spec.host_port = *host;
  spec.guest_port = *guest;
  return spec;
}

int first_publish_clash(std::span<const PublishSpec> specs) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const PublishSpec& a = specs[i];
      const PublishSpec& b = specs[j];
      if (a.protocol != b.protocol || a.host_port != b.host_port) continue;
      // 0.0.0.0 and [::] each cover the other on Linux (dual-stack), and
      // every specific address of their port.
      if (a.host_address == b.host_address || is_wildcard(a.host_address) || is_wildcard(b.host_address))
        return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace abox::policy
