// Fuzz target: netstack/gateway/dhcp_server and netstack/gateway/dhcp_message. Every IPv4
// frame from the guest goes through DhcpServer::handle() before lwIP, so
// whatever the bytes: no crash, no read past the input, and:
//   - as an Ethernet frame: a reply exactly when the outcome is offer, ack
//     or nak, and then a well-formed one (at least 300 bytes of BOOTP, from
//     UDP 67 to 68, the IPv4 header checksum and lengths right, the gateway
//     as source, the guest or 0 as yiaddr); a reason exactly when ignored
//     or malformed;
//   - as a bare BOOTP message: parse_dhcp_client_message() succeeds only
//     with a client message type, and the same bytes wrapped in a valid
//     Ethernet/IPv4/UDP frame to port 67 are malformed exactly when the
//     parse fails (the framing adds nothing to decide).
// Seeds (fuzz/corpus/dhcp/): a DISCOVER and a REQUEST captured from busybox
// udhcpc talking to abox-net, and hand-made nasty messages.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "netstack/gateway/dhcp_message.h"
#include "netstack/gateway/dhcp_server.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr std::uint32_t kGateway = 0x0A00'0202;
constexpr std::uint32_t kGuest = 0x0A00'020F;

DhcpServerConfig config() {
  DhcpServerConfig c;
  c.gateway = kGateway;
  c.guest = kGuest;
  c.prefix_len = 24;
  c.gateway_mac = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
  c.mtu = 1500;
  return c;
}

std::uint32_t be(std::span<const std::uint8_t> b, std::size_t at, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | b[at + i];
  return v;
}

std::uint16_t ip_checksum_fold(std::span<const std::uint8_t> header) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < header.size(); i += 2) sum += be(header, i, 2);
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void check_result(const DhcpResult& r) {
  const bool answered =
      r.outcome == DhcpOutcome::offer || r.outcome == DhcpOutcome::ack || r.outcome == DhcpOutcome::nak;
  check(answered == !r.reply.empty());
  const bool explained = r.outcome == DhcpOutcome::ignored || r.outcome == DhcpOutcome::malformed;
  check(explained == (r.reason[0] != '\0'));
  if (!answered) return;
  const auto f = r.reply;
  check(f.size() >= 14 + 20 + 8 + 300);
  check(be(f, 12, 2) == 0x0800 && f[14] == 0x45 && f[23] == 17);
  check(be(f, 16, 2) == f.size() - 14);
  check(ip_checksum_fold(f.subspan(14, 20)) == 0);
  check(be(f, 26, 4) == kGateway);
  check(be(f, 34, 2) == 67 && be(f, 36, 2) == 68 && be(f, 38, 2) == f.size() - 34);
  check(f[42] == 2);
  const std::uint32_t yiaddr = be(f, 42 + 16, 4);
  check(yiaddr == kGuest || yiaddr == 0);
  check(be(f, 42 + 236, 4) == 0x6382'5363);
}

// The bytes as the BOOTP payload of a valid frame from the guest to port 67.
std::vector<std::uint8_t> wrap(std::span<const std::uint8_t> bootp) {
  std::vector<std::uint8_t> f = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x15, 0x08, 0x00};
  const std::size_t ip_length = 20 + 8 + bootp.size();
  const std::uint8_t ip[20] = {0x45,
                               0,
                               static_cast<std::uint8_t>(ip_length >> 8),
                               static_cast<std::uint8_t>(ip_length),
                               0,
                               0,
                               0,
                               0,
                               64,
                               17,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0xff,
                               0xff,
                               0xff,
                               0xff};
  f.insert(f.end(), ip, ip + 20);
  const std::uint16_t sum = ip_checksum_fold(std::span(f).subspan(14, 20));
  f[24] = static_cast<std::uint8_t>(sum >> 8);
  f[25] = static_cast<std::uint8_t>(sum);
  const std::size_t udp_length = 8 + bootp.size();
  const std::uint8_t udp[8] = {
      0, 68, 0, 67, static_cast<std::uint8_t>(udp_length >> 8), static_cast<std::uint8_t>(udp_length), 0, 0};
  f.insert(f.end(), udp, udp + 8);
  f.insert(f.end(), bootp.begin(), bootp.end());
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  static DhcpServer server(config());

  check_result(server.handle(input));

  const auto parsed = parse_dhcp_client_message(input);
  if (parsed.ok()) {
    const auto t = parsed->type;
    check(t == DhcpMessageType::discover || t == DhcpMessageType::request || t == DhcpMessageType::decline ||
          t == DhcpMessageType::release || t == DhcpMessageType::inform);
  }
  if (size <= 65000) {
    const std::vector<std::uint8_t> frame = wrap(input);
    const DhcpResult wrapped = server.handle(frame);
    check_result(wrapped);
    check(wrapped.outcome != DhcpOutcome::not_dhcp);
    check((wrapped.outcome == DhcpOutcome::malformed) == !parsed.ok());
  }
  return 0;
}
