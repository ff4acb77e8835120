// IPv6 frames from the guest, written by hand for the tests of GuestFrame's
// IPv6 walk and of the stack's IPv6 drops: an Ethernet + IPv6 header with
// its payload length right, and the extension headers and upper layers the
// tests chain behind it. No checksums, but for ndp(): nothing else that
// reads these checks one before the drops under test.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "netstack/stack/guest_frame.h"
#include "tests/support/big_endian.h"

namespace abox::netstack::ipv6_wire {

using Bytes = std::vector<std::uint8_t>;
using abox::testing::put16;
using abox::testing::put32;
using Address = std::array<std::uint8_t, 16>;

inline constexpr std::uint8_t kHopByHop = 0;
inline constexpr std::uint8_t kTcp = 6;
inline constexpr std::uint8_t kUdp = 17;
inline constexpr std::uint8_t kRouting = 43;
inline constexpr std::uint8_t kFragment = 44;
inline constexpr std::uint8_t kIcmpv6 = 58;
inline constexpr std::uint8_t kNoNext = 59;
inline constexpr std::uint8_t kDestOpts = 60;

inline constexpr Address kLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xFF, 0xFE, 0, 0, 0x15};
inline constexpr Address kServer = {0x26, 0x06, 0x28, 0,    0x02, 0x1F, 0xCB, 0x07,
                                    0x68, 0x20, 0x80, 0xDA, 0xAF, 0x6B, 0x8B, 0x2C};

inline constexpr std::size_t kIp = 14;  // the IPv6 header's offset in a frame

// Ethernet + IPv6 header (payload length right) + `payload`.
inline Bytes ipv6_frame(std::uint8_t next, const Bytes& payload, const Address& src = kLinkLocal,
                        const Address& dst = kServer) {
  Bytes f(12, 0x02);
  put16(f, 0x86DD);
  put32(f, 0x6000'0000);
  put16(f, static_cast<std::uint16_t>(payload.size()));
  f.push_back(next);
  f.push_back(64);
  f.insert(f.end(), src.begin(), src.end());
  f.insert(f.end(), dst.begin(), dst.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// An options-style extension header (Hop-by-Hop, Destination Options,
// Routing) of `units` 8-byte units past the first, followed by `rest`.
inline Bytes ext(std::uint8_t next, const Bytes& rest, std::uint8_t units = 0, std::uint8_t third = 0) {
  Bytes h{next, units, third};
  h.resize((std::size_t{units} + 1) * 8, 0);
  if (third == 0 && h.size() > 3) h[2] = 1;  // a PadN option, as a real header would carry
  h.insert(h.end(), rest.begin(), rest.end());
  return h;
}
inline Bytes routing(std::uint8_t next, std::uint8_t type, const Bytes& rest) {
  Bytes h{next, 2, type, 1};  // one segment left, a 16-byte address after the 8
  h.resize(24, 0);
  h.insert(h.end(), rest.begin(), rest.end());
  return h;
}
inline Bytes fragment(std::uint8_t next, std::uint16_t offset_units, bool more, const Bytes& rest) {
  Bytes h{next, 0};
  put16(h, static_cast<std::uint16_t>(offset_units << 3 | (more ? 1 : 0)));
  put32(h, 0x1234'5678);
  h.insert(h.end(), rest.begin(), rest.end());
  return h;
}
// Sized once, then filled (GCC 12 reports a false -Warray-bounds for a small
// vector grown by push_back when this is inlined: docs/development.md).
inline Bytes udp(std::uint16_t sport, std::uint16_t dport, const Bytes& payload) {
  const auto length = static_cast<std::uint16_t>(8 + payload.size());
  Bytes u(8, 0);
  u[0] = static_cast<std::uint8_t>(sport >> 8);
  u[1] = static_cast<std::uint8_t>(sport);
  u[2] = static_cast<std::uint8_t>(dport >> 8);
  u[3] = static_cast<std::uint8_t>(dport);
  u[4] = static_cast<std::uint8_t>(length >> 8);
  u[5] = static_cast<std::uint8_t>(length);
  u.insert(u.end(), payload.begin(), payload.end());
  return u;
}
inline Bytes tcp(std::uint16_t sport, std::uint16_t dport, std::uint8_t flags) {
  Bytes t;
  put16(t, sport);
  put16(t, dport);
  put32(t, 1000);
  put32(t, 0);
  t.push_back(5 << 4);
  t.push_back(flags);
  put16(t, 65535);
  put32(t, 0);
  return t;
}
inline Bytes icmpv6(std::uint8_t type, std::uint8_t code, std::size_t body = 4) {
  Bytes m{type, code, 0, 0};
  m.resize(4 + body, 0);
  return m;
}
inline std::uint16_t icmpv6_checksum_sum(const Address& src, const Address& dst,
                                         std::span<const std::uint8_t> msg) {
  std::uint32_t sum = sum16(src);
  sum = sum16(dst, sum);
  sum += static_cast<std::uint32_t>(msg.size());
  sum += 58;
  return fold_checksum(sum16(msg, sum));
}

inline Address solicited_node(const Address& a) {
  Address s = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xFF, a[13], a[14], a[15]};
  return s;
}

// An NDP message from the guest: hop limit 255 and a right checksum unless
// told otherwise.
inline Bytes ndp(std::uint8_t type, const Bytes& body, const Address& src, const Address& dst,
                 std::uint8_t hop_limit = 255, std::uint8_t code = 0, bool good_checksum = true) {
  Bytes msg{type, code, 0, 0};
  msg.insert(msg.end(), body.begin(), body.end());
  const std::uint16_t sum = icmpv6_checksum_sum(src, dst, msg);
  msg[2] = static_cast<std::uint8_t>(sum >> 8);
  msg[3] = static_cast<std::uint8_t>(sum ^ (good_checksum ? 0 : 1));
  Bytes f = ipv6_frame(kIcmpv6, msg, src, dst);
  f[kIp + 7] = hop_limit;
  return f;
}
}  // namespace abox::netstack::ipv6_wire
