// Fuzz target: netstack/gateway/dhcpv6_message and dhcpv6_server. A
// datagram from the guest to ff02::1:2 port 547 goes to Dhcpv6Server::
// handle() before lwIP, so whatever the bytes: no crash, no read past the
// input, and:
//   - as a bare DHCPv6 message: parse_dhcpv6_client_message() succeeds only
//     with a client type, its identifiers (when present) of 1 to 130 bytes
//     inside the input, and the transaction id its bytes 1-3;
//   - wrapped in a valid frame (UDP 546 to ff02::1:2 port 547, from a
//     link-local address, checksummed): the server replies exactly when the
//     parse gives an Information-Request without IA, and without a server
//     id or with the gateway's own, and the
//     reply is well formed (from fe80::1 port 547 to the sender port 546,
//     its UDP checksum right, the transaction id and client id echoed, and
//     exactly as write_dhcpv6_reply() writes it); malformed exactly when the
//     parse fails.
// Seeds (fuzz/corpus/dhcpv6_message/): an Information-Request as
// systemd-networkd and odhcp6c send one, a Solicit, and hand-made nasty ones.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "netstack/gateway/dhcpv6_message.h"
#include "netstack/gateway/dhcpv6_server.h"
#include "netstack/stack/guest_frame.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
using Address = std::array<std::uint8_t, 16>;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};
constexpr Address kGatewayLinkLocal = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kDns = {0xFD, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Address kClient = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xFF, 0xFE, 0, 0, 0x15};

std::uint32_t pseudo_sum(const Address& src, const Address& dst, std::size_t length) {
  std::uint32_t sum = sum16(src);
  sum = sum16(dst, sum);
  return sum + static_cast<std::uint32_t>(length) + GuestFrame::kProtoUdp;
}

std::vector<std::uint8_t> wrap(std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> f = {0x33, 0x33, 0, 1, 0, 2, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x86, 0xDD};
  const std::size_t udp_length = 8 + payload.size();
  const std::uint8_t ip[8] = {
      0x60, 0, 0, 0, static_cast<std::uint8_t>(udp_length >> 8), static_cast<std::uint8_t>(udp_length),
      17,   1};
  f.insert(f.end(), ip, ip + 8);
  f.insert(f.end(), kClient.begin(), kClient.end());
  f.insert(f.end(), Dhcpv6Server::kAllServers.begin(), Dhcpv6Server::kAllServers.end());
  const std::size_t udp_at = f.size();
  const std::uint8_t udp[8] = {0x02,
                               0x22,
                               0x02,
                               0x23,
                               static_cast<std::uint8_t>(udp_length >> 8),
                               static_cast<std::uint8_t>(udp_length),
                               0,
                               0};
  f.insert(f.end(), udp, udp + 8);
  f.insert(f.end(), payload.begin(), payload.end());
  std::uint16_t c = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(udp_at),
                                        pseudo_sum(kClient, Dhcpv6Server::kAllServers, udp_length)));
  if (c == 0) c = 0xFFFF;
  f[udp_at + 6] = static_cast<std::uint8_t>(c >> 8);
  f[udp_at + 7] = static_cast<std::uint8_t>(c);
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  // Time moves on a second per input, so the token bucket never runs dry here.
  static Dhcpv6Server server({kGatewayMac, kGatewayLinkLocal, kDns});
  static abox::base::MonoTime now{};
  now += std::chrono::seconds(1);

  const auto parsed = parse_dhcpv6_client_message(input);
  if (parsed.ok()) {
    check(size >= 4);
    check(parsed->transaction_id ==
          ((std::uint32_t{data[1]} << 16) | (std::uint32_t{data[2]} << 8) | data[3]));
    for (const auto id : {parsed->client_id, parsed->server_id}) {
      check(id.size() <= kDhcpv6MaxDuid);
      if (!id.empty()) check(id.data() >= data && id.data() + id.size() <= data + size);
    }
  }
  if (size > 65000) return 0;
  const std::vector<std::uint8_t> frame = wrap(input);
  const auto view = GuestFrame::parse(frame);
  check(view.ok() && Dhcpv6Server::is_for_server(*view));
  const Dhcpv6Result r = server.handle(frame, *view, now);
  check((r.outcome == Dhcpv6Outcome::malformed) == !parsed.ok());
  // No server id, or this server's own DUID (the seed own_server_id,
  // libFuzzer's first find: the oracle had forgotten that case).
  const auto duid = dhcpv6_duid_ll(kGatewayMac);
  const bool for_us = parsed.ok() && (parsed->server_id.empty() ||
                                      std::equal(parsed->server_id.begin(), parsed->server_id.end(),
                                                 duid.begin(), duid.end()));
  const bool answerable = parsed.ok() && parsed->type == Dhcpv6MessageType::information_request &&
                          !parsed->has_identity_association && for_us;
  check((r.outcome == Dhcpv6Outcome::reply) == answerable);
  check(r.reply.empty() == (r.outcome != Dhcpv6Outcome::reply));
  if (r.outcome != Dhcpv6Outcome::reply) return 0;
  const std::vector<std::uint8_t> reply(r.reply.begin(), r.reply.end());
  const auto back = GuestFrame::parse(reply);
  check(back.ok() && back->is_ipv6() && back->is_udp());
  check(back->ipv6().source == kGatewayLinkLocal && back->ipv6().destination == kClient);
  check(back->transport().source_port == 547 && back->transport().destination_port == 546);
  const auto udp = back->ipv6().upper_layer;
  check(fold_checksum(sum16(udp, pseudo_sum(kGatewayLinkLocal, kClient, udp.size()))) == 0);
  std::vector<std::uint8_t> expected;
  write_dhcpv6_reply(expected, parsed->transaction_id, dhcpv6_duid_ll(kGatewayMac), parsed->client_id, kDns);
  const auto payload = back->transport().udp_payload;
  check(std::equal(payload.begin(), payload.end(), expected.begin(), expected.end()));
  return 0;
}
