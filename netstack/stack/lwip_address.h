// Conversions between policy::IpAddress and lwIP's ip_addr_t, both families.
// lwIP keeps addresses in network order, as IpAddress's bytes are; it is
// built without IPv6 scopes (lwipopts.h), so an IPv6 ip_addr_t has no zone.
#pragma once

#include <cstring>

#include "lwip/ip_addr.h"
#include "policy/ip_address.h"

namespace abox::netstack {

inline ip_addr_t to_ip_addr(const policy::IpAddress& a) {
  ip_addr_t out;
  if (a.is_v6()) {
    ip_addr_set_zero_ip6(&out);
    std::memcpy(ip_2_ip6(&out)->addr, a.bytes().data(), 16);
  } else {
    std::uint32_t net = 0;
    std::memcpy(&net, a.bytes().data(), 4);
    ip_addr_set_ip4_u32(&out, net);
  }
  return out;
}

inline policy::IpAddress from_ip_addr(const ip_addr_t* a) {
  if (IP_IS_V6(a)) {
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), ip_2_ip6(a)->addr, 16);
    return policy::IpAddress::v6(b);
  }
  std::uint8_t b[4];
  std::memcpy(b, &ip_2_ip4(a)->addr, 4);
  return policy::IpAddress::v4_bytes(b);
}

}  // namespace abox::netstack
