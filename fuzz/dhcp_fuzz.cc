// Fuzz target: netstack/stack/guest_frame (the one view of a guest frame),
// netstack/gateway/dhcp_server and dhcp_message. Every frame from the guest
// is parsed once into a GuestFrame, and a datagram to UDP port 67 goes to
// DhcpServer::handle() as its payload, before lwIP, so whatever the bytes:
// no crash, no read past the input, and:
//   - as an Ethernet frame: the view's fields lie inside the frame and agree
//     with its bytes (lengths, checksum, ports, the UDP payload's place);
//     routed to the server, a reply exactly when the outcome is offer, ack
//     or nak, and then a well-formed one (at least 300 bytes of BOOTP, from
//     UDP 67 to 68, the IPv4 header checksum and lengths right, the gateway
//     as source, the guest or 0 as yiaddr); a reason exactly when ignored
//     or malformed;
//   - as a bare BOOTP message: parse_dhcp_client_message() succeeds only
//     with a client message type, the server calls it malformed exactly
//     when the parse fails, and the same bytes wrapped in a valid
//     Ethernet/IPv4/UDP frame to port 67 reach the server unchanged.
// Seeds (fuzz/corpus/dhcp/): a DISCOVER and a REQUEST captured from busybox
// udhcpc talking to abox-net, and hand-made nasty messages.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "netstack/gateway/dhcp_message.h"
#include "netstack/gateway/dhcp_server.h"
#include "netstack/stack/guest_frame.h"

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

// The stack's routing (guest_stack.cc, take_frame()): the one view of the
// frame, and a datagram to port 67 goes to the server as its UDP payload.
// The view's fields must lie inside the frame and agree with its bytes.
void route(DhcpServer& server, std::span<const std::uint8_t> frame) {
  const auto view = GuestFrame::parse(frame);
  if (!view.ok()) {
    check(!describe(view.error()).empty());
    return;
  }
  if (!view->is_ipv4()) return;
  check(frame.size() >= 14 + 20 && be(frame, 12, 2) == 0x0800 && (frame[14] >> 4) == 4);
  const std::size_t ihl = std::size_t{frame[14] & 0x0Fu} * 4;
  const std::size_t total = be(frame, 16, 2);
  check(ihl >= 20 && total >= ihl && 14 + total <= frame.size());
  check(ip_checksum_fold(frame.subspan(14, ihl)) == 0);
  if (!view->is_udp() && !view->is_tcp()) return;
  check(!view->ipv4().fragment && view->transport().source_port == be(frame, 14 + ihl, 2));
  if (!view->is_udp()) return;
  const auto payload = view->transport().udp_payload;
  check(payload.data() == frame.data() + 14 + ihl + 8);
  check(payload.size() + 8 == be(frame, 14 + ihl + 4, 2) && ihl + 8 + payload.size() <= total);
  if (view->transport().destination_port == DhcpServer::kServerPort) check_result(server.handle(payload));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  static DhcpServer server(config());

  route(server, input);

  const auto parsed = parse_dhcp_client_message(input);
  if (parsed.ok()) {
    const auto t = parsed->type;
    check(t == DhcpMessageType::discover || t == DhcpMessageType::request || t == DhcpMessageType::decline ||
          t == DhcpMessageType::release || t == DhcpMessageType::inform);
  }
  const DhcpResult bare = server.handle(input);
  check_result(bare);
  check((bare.outcome == DhcpOutcome::malformed) == !parsed.ok());
  if (size <= 65000) {
    // Wrapped in a valid frame, the same bytes reach the server as they are.
    const std::vector<std::uint8_t> frame = wrap(input);
    const auto view = GuestFrame::parse(frame);
    check(view.ok() && view->is_udp() && view->transport().destination_port == DhcpServer::kServerPort);
    check(view->transport().udp_payload.size() == size &&
          std::equal(input.begin(), input.end(), view->transport().udp_payload.begin()));
    route(server, frame);
  }
  return 0;
}
