// The ICMP "packet too big" answers (see packet_too_big.h).
#include "netstack/stack/packet_too_big.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace abox::netstack {
namespace {

constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint16_t kEtherIpv6 = 0x86DD;
constexpr std::uint8_t kIcmpv6PacketTooBig = 2;
constexpr std::uint8_t kIcmpDestinationUnreachable = 3;
constexpr std::uint8_t kIcmpFragmentationNeeded = 4;
constexpr std::uint8_t kHopLimit = 64;
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIcmpHeader = 8;

// push_back byte by byte: GCC 12's -Warray-bounds misreads a vector's
// range insert of a small array as an overflow (as in ndp_responder.cc).
void append(std::vector<std::uint8_t>& b, std::span<const std::uint8_t> bytes) {
  for (const std::uint8_t byte : bytes) b.push_back(byte);
}
void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
void put32(std::vector<std::uint8_t>& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v));
}
void set16(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t v) {
  b.at(at) = static_cast<std::uint8_t>(v >> 8);
  b.at(at + 1) = static_cast<std::uint8_t>(v);
}

void ethernet(std::vector<std::uint8_t>& out, const OversizeFrame& invoking,
              const std::array<std::uint8_t, 6>& gateway_mac, std::uint16_t ethertype) {
  out.clear();
  append(out, invoking.source_mac);
  append(out, gateway_mac);
  put16(out, ethertype);
}

}  // namespace

void build_icmpv6_packet_too_big(const OversizeFrame& invoking, const std::array<std::uint8_t, 16>& from,
                                 std::uint32_t mtu, const std::array<std::uint8_t, 6>& gateway_mac,
                                 std::vector<std::uint8_t>& out) {
  const auto quote = invoking.packet_head.first(std::min(invoking.packet_head.size(), kIcmpv6TooBigMaxQuote));
  const std::size_t icmp_size = kIcmpHeader + quote.size();
  const std::array<std::uint8_t, 16>& to = invoking.view.ipv6().source;
  ethernet(out, invoking, gateway_mac, kEtherIpv6);
  put32(out, 0x6000'0000);
  put16(out, static_cast<std::uint16_t>(icmp_size));
  out.push_back(GuestFrame::kProtoIcmpv6);
  out.push_back(kHopLimit);
  append(out, from);
  append(out, to);
  const std::size_t icmp_at = out.size();
  out.push_back(kIcmpv6PacketTooBig);
  out.push_back(0);
  put16(out, 0);  // the checksum, below
  put32(out, mtu);
  append(out, quote);
  // RFC 8200 section 8.1: addresses, the upper-layer length, the next header.
  std::uint32_t sum = sum16(from);
  sum = sum16(to, sum);
  sum += static_cast<std::uint32_t>(icmp_size);
  sum += GuestFrame::kProtoIcmpv6;
  sum = sum16(std::span<const std::uint8_t>(out).subspan(icmp_at), sum);
  set16(out, icmp_at + 2, fold_checksum(sum));
}

void build_icmp_fragmentation_needed(const OversizeFrame& invoking, std::uint16_t next_hop_mtu,
                                     const std::array<std::uint8_t, 6>& gateway_mac,
                                     std::vector<std::uint8_t>& out) {
  const auto quote = invoking.packet_head.first(std::min(invoking.packet_head.size(), kIcmpv4ErrorMaxQuote));
  const Ipv4Fields& ip = invoking.view.ipv4();
  ethernet(out, invoking, gateway_mac, kEtherIpv4);
  const std::size_t ip_at = out.size();
  out.push_back(0x45);  // version 4, a 20-byte header
  out.push_back(0);
  put16(out, static_cast<std::uint16_t>(kIpv4Header + kIcmpHeader + quote.size()));
  put32(out, 0);  // identification, flags, fragment offset
  out.push_back(kHopLimit);
  out.push_back(GuestFrame::kProtoIcmp);
  put16(out, 0);  // the header checksum, below
  // Network order in memory, as parse() copied them: bytes as they stand.
  std::array<std::uint8_t, 4> address{};
  std::memcpy(address.data(), &ip.destination_net, 4);
  append(out, address);
  std::memcpy(address.data(), &ip.source_net, 4);
  append(out, address);
  set16(out, ip_at + 10, fold_checksum(sum16(std::span<const std::uint8_t>(out).subspan(ip_at))));
  const std::size_t icmp_at = out.size();
  out.push_back(kIcmpDestinationUnreachable);
  out.push_back(kIcmpFragmentationNeeded);
  put16(out, 0);  // the checksum, below
  put16(out, 0);  // unused
  put16(out, next_hop_mtu);
  append(out, quote);
  set16(out, icmp_at + 2, fold_checksum(sum16(std::span<const std::uint8_t>(out).subspan(icmp_at))));
}

}  // namespace abox::netstack
