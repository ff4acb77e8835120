// DHCPv6 client messages from the guest, written by hand for the tests of
// the stateless DHCPv6 server (dhcpv6_server_test.cc, and the stack's
// routing in guest_stack_ipv6_test.cc): options, a message, and the frame
// around it, UDP 546 to ff02::1:2 port 547 with a right checksum.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "tests/netstack/stack/ipv6_wire.h"

namespace abox::netstack::dhcpv6_wire {

using ipv6_wire::Address;
using ipv6_wire::Bytes;

inline constexpr Address kAllServers = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
// A DUID-LLT as ISC's and systemd's clients send (type 1, Ethernet, a time, the MAC).
inline const Bytes kClientDuid = {0, 1, 0, 1, 0x2A, 0x2B, 0x2C, 0x2D, 2, 2, 2, 2, 2, 2};

inline Bytes option(std::uint16_t code, const Bytes& data) {
  Bytes o;
  ipv6_wire::put16(o, code);
  ipv6_wire::put16(o, static_cast<std::uint16_t>(data.size()));
  o.insert(o.end(), data.begin(), data.end());
  return o;
}

// type, transaction id 0xABCDEF, then `options` in order.
inline Bytes message(std::uint8_t type, std::initializer_list<Bytes> options) {
  Bytes m{type, 0xAB, 0xCD, 0xEF};
  for (const Bytes& o : options) m.insert(m.end(), o.begin(), o.end());
  return m;
}

// What a client sends: client id, option request for DNS servers (23) and
// the domain search list (24), elapsed time 0.
inline Bytes information_request() {
  return message(11, {option(1, kClientDuid), option(6, {0, 23, 0, 24}), option(8, {0, 0})});
}

// The frame: UDP `sport` to `dport`, from `src` to `dst`, checksummed.
inline Bytes frame(const Bytes& payload, const Address& src = ipv6_wire::kLinkLocal,
                   const Address& dst = kAllServers, std::uint16_t sport = 546, std::uint16_t dport = 547) {
  // The header written in place, not by ipv6_wire::udp(): GCC 12's
  // -Wstringop-overread misreads its push_backs into an empty vector here.
  const std::size_t length = 8 + payload.size();
  Bytes u = {static_cast<std::uint8_t>(sport >> 8),
             static_cast<std::uint8_t>(sport),
             static_cast<std::uint8_t>(dport >> 8),
             static_cast<std::uint8_t>(dport),
             static_cast<std::uint8_t>(length >> 8),
             static_cast<std::uint8_t>(length),
             0,
             0};
  u.insert(u.end(), payload.begin(), payload.end());
  std::uint32_t sum = sum16(src);
  sum = sum16(dst, sum);
  sum += static_cast<std::uint32_t>(u.size());
  sum += ipv6_wire::kUdp;
  std::uint16_t c = fold_checksum(sum16(u, sum));
  if (c == 0) c = 0xFFFF;
  u[6] = static_cast<std::uint8_t>(c >> 8);
  u[7] = static_cast<std::uint8_t>(c);
  return ipv6_wire::ipv6_frame(ipv6_wire::kUdp, u, src, dst);
}

}  // namespace abox::netstack::dhcpv6_wire
