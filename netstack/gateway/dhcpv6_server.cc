// Dhcpv6Server (see dhcpv6_server.h for what it answers and why).
#include "netstack/gateway/dhcpv6_server.h"

#include <algorithm>
#include <chrono>

#include "netstack/gateway/dhcpv6_message.h"

namespace abox::netstack {
namespace {

using Address = std::array<std::uint8_t, 16>;

constexpr std::uint8_t kHopLimit = 64;
constexpr std::size_t kUdpHeader = 8;

bool is_link_local(const Address& a) {
  return a[0] == 0xFE && (a[1] & 0xC0) == 0x80;
}

// The UDP checksum's sum over the pseudo-header (RFC 8200 section 8.1) and
// the datagram.
std::uint32_t udp6_sum(const Address& src, const Address& dst, std::span<const std::uint8_t> datagram) {
  std::uint32_t sum = sum16(src);
  sum = sum16(dst, sum);
  sum += static_cast<std::uint32_t>(datagram.size() >> 16) +
         static_cast<std::uint32_t>(datagram.size() & 0xFFFF);
  sum += GuestFrame::kProtoUdp;
  return sum16(datagram, sum);
}

void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
// Byte by byte: see put_option() in dhcpv6_message.cc.
void append(std::vector<std::uint8_t>& b, std::span<const std::uint8_t> bytes) {
  for (const std::uint8_t byte : bytes) b.push_back(byte);
}

}  // namespace

Dhcpv6Server::Dhcpv6Server(const Dhcpv6ServerConfig& config)
    : config_(config), duid_(dhcpv6_duid_ll(config.gateway_mac)) {
  message_.reserve(4 + 4 + duid_.size() + 4 + kDhcpv6MaxDuid + 4 + 16);
  reply_.reserve(14 + 40 + kUdpHeader + message_.capacity());
}

bool Dhcpv6Server::is_for_server(const GuestFrame& view) {
  return view.is_ipv6() && view.is_udp() && view.ipv6().extension_headers == 0 &&
         view.ipv6().destination == kAllServers && view.transport().source_port == kClientPort &&
         view.transport().destination_port == kServerPort;
}

Dhcpv6Result Dhcpv6Server::handle(std::span<const std::uint8_t> frame, const GuestFrame& view,
                                  base::MonoTime now, bool checksum_trusted) {
  const Ipv6Fields& ip = view.ipv6();
  const std::span<const std::uint8_t> payload = view.transport().udp_payload;
  // The datagram is the upper layer up to the UDP length (GuestFrame checked
  // that it fits); IPv6 has no "no checksum" (RFC 8200 section 8.1).
  const std::size_t datagram_size = kUdpHeader + payload.size();
  if (ip.upper_layer.size() < datagram_size || frame.size() < 14) {
    ++counters_.malformed;
    return Dhcpv6Result{Dhcpv6Outcome::malformed, {}};
  }
  const std::span<const std::uint8_t> datagram = ip.upper_layer.first(datagram_size);
  if (!checksum_trusted && ((datagram[6] == 0 && datagram[7] == 0) ||
                            fold_checksum(udp6_sum(ip.source, ip.destination, datagram)) != 0)) {
    ++counters_.malformed;
    return Dhcpv6Result{Dhcpv6Outcome::malformed, {}};
  }
  const auto message = parse_dhcpv6_client_message(payload);
  if (!message.ok()) {
    ++counters_.malformed;
    return Dhcpv6Result{Dhcpv6Outcome::malformed, {}};
  }
  // RFC 8415 sections 16.12 and 18.4: a client speaks from its link-local
  // address; an Information-Request with an IA, or for another server, is
  // discarded.
  const bool ours =
      message->server_id.empty() ||
      std::equal(message->server_id.begin(), message->server_id.end(), duid_.begin(), duid_.end());
  if (message->type != Dhcpv6MessageType::information_request || !is_link_local(ip.source) ||
      message->has_identity_association || !ours) {
    ++counters_.ignored;
    return Dhcpv6Result{Dhcpv6Outcome::ignored, {}};
  }
  if (!answers_.take(now)) {
    ++counters_.rate_limited;
    return Dhcpv6Result{Dhcpv6Outcome::rate_limited, {}};
  }

  write_dhcpv6_reply(message_, message->transaction_id, duid_, message->client_id, config_.dns_server);
  const std::size_t udp_length = kUdpHeader + message_.size();
  reply_.clear();
  append(reply_, frame.subspan(6, 6));  // the guest's MAC
  append(reply_, config_.gateway_mac);
  put16(reply_, 0x86DD);
  put16(reply_, 0x6000);
  put16(reply_, 0);
  put16(reply_, static_cast<std::uint16_t>(udp_length));
  reply_.push_back(GuestFrame::kProtoUdp);
  reply_.push_back(kHopLimit);
  append(reply_, config_.gateway_link_local);
  append(reply_, ip.source);
  const std::size_t udp_at = reply_.size();
  put16(reply_, kServerPort);
  put16(reply_, kClientPort);
  put16(reply_, static_cast<std::uint16_t>(udp_length));
  put16(reply_, 0);  // the checksum, written below
  append(reply_, message_);
  std::uint16_t checksum = fold_checksum(
      udp6_sum(config_.gateway_link_local, ip.source, std::span<const std::uint8_t>(reply_).subspan(udp_at)));
  if (checksum == 0) checksum = 0xFFFF;  // 0 means "none", which IPv6 forbids
  reply_[udp_at + 6] = static_cast<std::uint8_t>(checksum >> 8);
  reply_[udp_at + 7] = static_cast<std::uint8_t>(checksum);
  ++counters_.answered;
  return Dhcpv6Result{Dhcpv6Outcome::reply, reply_};
}

}  // namespace abox::netstack
