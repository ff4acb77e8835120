// NdpResponder (see ndp_responder.h for what it answers and why).
#include "netstack/gateway/ndp_responder.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>

#include "base/byte_reader.h"
#include "base/sha256.h"

namespace abox::netstack {
namespace {

using Address = std::array<std::uint8_t, 16>;

constexpr std::uint8_t kRouterSolicitation = 133;
constexpr std::uint8_t kRouterAdvertisement = 134;
constexpr std::uint8_t kNeighbourSolicitation = 135;
constexpr std::uint8_t kNeighbourAdvertisement = 136;
constexpr std::uint8_t kRedirect = 137;

// Option types (RFC 4861 section 4.6, RFC 8106).
constexpr std::uint8_t kOptSourceLinkLayer = 1;
constexpr std::uint8_t kOptTargetLinkLayer = 2;
constexpr std::uint8_t kOptPrefix = 3;
constexpr std::uint8_t kOptMtu = 5;
constexpr std::uint8_t kOptRdnss = 25;

constexpr std::size_t kRsFixed = 8;   // type, code, checksum, reserved
constexpr std::size_t kNsFixed = 24;  // ... and the target
constexpr std::uint8_t kNdpHopLimit = 255;
constexpr std::uint32_t kPrefixValidSeconds = 24 * 3600;
constexpr std::uint32_t kPrefixPreferredSeconds = 4 * 3600;

constexpr Address kAllNodes = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr std::array<std::uint8_t, 6> kAllNodesMac = {0x33, 0x33, 0, 0, 0, 1};

bool is_unspecified(const Address& a) {
  return std::all_of(a.begin(), a.end(), [](std::uint8_t b) { return b == 0; });
}

// ff02::1:ffXX:XXXX (RFC 4291 section 2.7.1).
bool is_solicited_node(const Address& a) {
  constexpr std::array<std::uint8_t, 13> kHead = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xFF};
  return std::equal(kHead.begin(), kHead.end(), a.begin());
}

// push_back byte by byte: GCC 12's -Warray-bounds misreads a vector's
// range insert of a small array as an overflow.
void append(std::vector<std::uint8_t>& b, std::span<const std::uint8_t> bytes) {
  for (const std::uint8_t byte : bytes) b.push_back(byte);
}
void append(std::vector<std::uint8_t>& b, std::initializer_list<std::uint8_t> bytes) {
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

// The ICMPv6 checksum's sum over the pseudo-header (RFC 8200 section 8.1)
// and the message.
std::uint32_t icmpv6_sum(const Address& src, const Address& dst, std::span<const std::uint8_t> msg) {
  std::uint32_t sum = sum16(src);
  sum = sum16(dst, sum);
  sum += static_cast<std::uint32_t>(msg.size() >> 16) + static_cast<std::uint32_t>(msg.size() & 0xFFFF);
  sum += GuestFrame::kProtoIcmpv6;
  return sum16(msg, sum);
}

// Options from `at` to the end: each of a non-zero length inside the
// message (RFC 4861 section 6.1.1). Tells whether a source link-layer
// address option is among them.
bool options_well_formed(std::span<const std::uint8_t> msg, std::size_t at, bool& has_source_link_layer) {
  has_source_link_layer = false;
  base::ByteReader r(msg);
  if (!r.seek(at)) return false;
  while (!r.empty()) {
    const auto type = r.u8();
    const auto units = r.u8();
    if (!type || !units || *units == 0) return false;
    if (!r.skip(std::size_t{*units} * 8 - 2)) return false;
    if (*type == kOptSourceLinkLayer) has_source_link_layer = true;
  }
  return true;
}

}  // namespace

Ipv6Prefix64 instance_ula_prefix(std::string_view instance) {
  const auto digest = base::sha256(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(instance.data()), instance.size()));
  return Ipv6Prefix64{0xFD, digest[0], digest[1], digest[2], digest[3], digest[4], 0, 0};
}

NdpResponder::NdpResponder(const NdpConfig& config) : config_(config) {
  link_local_ = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::copy(config_.prefix.begin(), config_.prefix.end(), global_.begin());
  global_[15] = 1;
  icmp_.reserve(128);
  reply_.reserve(14 + 40 + 128);
}

NdpResult NdpResponder::handle(std::span<const std::uint8_t> frame, const GuestFrame& view,
                               base::MonoTime now) {
  const Ipv6Fields& ip = view.ipv6();
  const std::span<const std::uint8_t> msg = ip.upper_layer;
  const std::uint8_t type = ip.icmp_type;
  if (type < kRouterSolicitation || type > kRedirect) return NdpResult{NdpOutcome::not_ndp, {}};
  // RFC 4861 sections 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1: a hop limit of 255
  // proves the message was not forwarded; code 0; a right checksum.
  if (ip.hop_limit != kNdpHopLimit || ip.icmp_code != 0 ||
      fold_checksum(icmpv6_sum(ip.source, ip.destination, msg)) != 0) {
    ++counters_.malformed;
    return NdpResult{NdpOutcome::malformed, {}};
  }
  switch (type) {
    case kRouterAdvertisement:
      ++counters_.guest_router_advertisements;
      return NdpResult{NdpOutcome::guest_router_advertisement, {}};
    case kNeighbourAdvertisement:
    case kRedirect:
      ++counters_.ignored;
      return NdpResult{NdpOutcome::ignored, {}};
    default:
      break;
  }
  // What is left is a router or a neighbour solicitation.
  static_assert(kNeighbourSolicitation == kRouterSolicitation + 2);
  NdpResult result = type == kRouterSolicitation ? answer_router_solicitation(frame, ip)
                                                 : answer_neighbour_solicitation(frame, ip);
  if (result.outcome == NdpOutcome::malformed) ++counters_.malformed;
  if (result.outcome == NdpOutcome::not_for_gateway) ++counters_.not_for_gateway;
  if (result.reply.empty()) return result;
  if (!answers_.take(now)) {
    ++counters_.rate_limited;
    return NdpResult{NdpOutcome::rate_limited, {}};
  }
  if (result.outcome == NdpOutcome::router_advertisement) ++counters_.router_advertisements;
  if (result.outcome == NdpOutcome::neighbour_advertisement) ++counters_.neighbour_advertisements;
  return result;
}

NdpResult NdpResponder::answer_router_solicitation(std::span<const std::uint8_t> frame,
                                                   const Ipv6Fields& ip) {
  bool has_sllao = false;
  if (ip.upper_layer.size() < kRsFixed || !options_well_formed(ip.upper_layer, kRsFixed, has_sllao) ||
      (is_unspecified(ip.source) && has_sllao))
    return NdpResult{NdpOutcome::malformed, {}};
  const bool to_all = is_unspecified(ip.source);

  icmp_.clear();
  append(icmp_, {kRouterAdvertisement, 0, 0, 0});
  icmp_.push_back(64);  // current hop limit
  // No M: addresses by SLAAC. O: DNS by DHCPv6 too, for a guest that does
  // not read RDNSS.
  icmp_.push_back(config_.other_configuration ? 0x40 : 0);
  put16(icmp_, config_.router_lifetime_seconds);
  put32(icmp_, 0);  // reachable time: unspecified
  put32(icmp_, 0);  // retrans timer: unspecified
  append(icmp_, {kOptSourceLinkLayer, 1});
  append(icmp_, config_.gateway_mac);
  append(icmp_, {kOptMtu, 1, 0, 0});
  put32(icmp_, config_.mtu);
  append(icmp_, {kOptPrefix, 4, 64, 0xC0});  // /64, on-link, autonomous
  put32(icmp_, kPrefixValidSeconds);
  put32(icmp_, kPrefixPreferredSeconds);
  put32(icmp_, 0);
  append(icmp_, config_.prefix);
  append(icmp_, {0, 0, 0, 0, 0, 0, 0, 0});
  // RDNSS with a lifetime of 0 names no DNS server over IPv6 (sent rather
  // than left out, so that a guest forgets one it had).
  append(icmp_, {kOptRdnss, 3, 0, 0});
  put32(icmp_, config_.rdnss_lifetime_seconds);
  append(icmp_, global_);

  const std::span<const std::uint8_t, 6> guest_mac = frame.subspan<6, 6>();
  const auto reply = to_all ? build(kAllNodesMac, link_local_, kAllNodes, icmp_)
                            : build(guest_mac, link_local_, ip.source, icmp_);
  return NdpResult{NdpOutcome::router_advertisement, reply};
}

NdpResult NdpResponder::answer_neighbour_solicitation(std::span<const std::uint8_t> frame,
                                                      const Ipv6Fields& ip) {
  bool has_sllao = false;
  const std::span<const std::uint8_t> msg = ip.upper_layer;
  if (msg.size() < kNsFixed || !options_well_formed(msg, kNsFixed, has_sllao))
    return NdpResult{NdpOutcome::malformed, {}};
  Address target{};
  std::copy(msg.begin() + 8, msg.begin() + kNsFixed, target.begin());
  const bool dad = is_unspecified(ip.source);
  // RFC 4861 section 7.1.1: no multicast target; duplicate address detection
  // goes to a solicited-node address and carries no link-layer address.
  if (target[0] == 0xFF || (dad && (!is_solicited_node(ip.destination) || has_sllao)))
    return NdpResult{NdpOutcome::malformed, {}};
  if (target != link_local_ && target != global_) return NdpResult{NdpOutcome::not_for_gateway, {}};

  icmp_.clear();
  append(icmp_, {kNeighbourAdvertisement, 0, 0, 0});
  // Router, Solicited (only for a unicast answer: RFC 4861 section 7.2.4),
  // Override.
  icmp_.push_back(static_cast<std::uint8_t>(0x80 | (dad ? 0 : 0x40) | 0x20));
  append(icmp_, {0, 0, 0});
  append(icmp_, target);
  append(icmp_, {kOptTargetLinkLayer, 1});
  append(icmp_, config_.gateway_mac);

  const std::span<const std::uint8_t, 6> guest_mac = frame.subspan<6, 6>();
  const auto reply =
      dad ? build(kAllNodesMac, target, kAllNodes, icmp_) : build(guest_mac, target, ip.source, icmp_);
  return NdpResult{NdpOutcome::neighbour_advertisement, reply};
}

std::span<const std::uint8_t> NdpResponder::build(std::span<const std::uint8_t, 6> dst_mac,
                                                  const Address& src, const Address& dst,
                                                  std::span<const std::uint8_t> icmp) {
  // The checksum over a copy whose field is zero, then written in.
  const std::uint16_t checksum = fold_checksum(icmpv6_sum(src, dst, icmp));
  reply_.clear();
  append(reply_, dst_mac);
  append(reply_, config_.gateway_mac);
  put16(reply_, 0x86DD);
  put32(reply_, 0x6000'0000);
  put16(reply_, static_cast<std::uint16_t>(icmp.size()));
  reply_.push_back(GuestFrame::kProtoIcmpv6);
  reply_.push_back(kNdpHopLimit);
  append(reply_, src);
  append(reply_, dst);
  const std::size_t at = reply_.size();
  append(reply_, icmp);
  reply_[at + 2] = static_cast<std::uint8_t>(checksum >> 8);
  reply_[at + 3] = static_cast<std::uint8_t>(checksum);
  return reply_;
}

}  // namespace abox::netstack
