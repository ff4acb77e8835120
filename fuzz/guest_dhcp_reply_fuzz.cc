// Fuzz target: box-guest's DHCP reply parser (guest/box_guest/dhcp_packet.h),
// which reads every IPv4 packet that reaches eth0 before it has an address.
// Whatever the bytes: no crash, no read past the input, and a reply that
// parses keeps the parser's promises: a server message type, a server id,
// a usable unicast address in an OFFER or ACK, a prefix of 1-32 from a
// contiguous mask, at most 3 DNS servers, an MTU of at least 68.
// Seeds (fuzz/corpus/guest_dhcp_reply/): the gateway's OFFER, ACK and NAK for
// the client identity below, and hand-made nasty replies.
#include <cstdint>
#include <span>

#include "guest/box_guest/dhcp_packet.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::guest;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
  const DhcpClientIdentity id{0x1234'5678, {0x52, 0x54, 0x00, 0x12, 0x34, 0x56}};
  auto r = parse_dhcp_reply(std::span(data, size), id);
  if (!r.ok()) {
    check(!dhcp_reply_error_name(r.error()).empty());
    return 0;
  }
  check(r->kind == DhcpReplyKind::kOffer || r->kind == DhcpReplyKind::kAck || r->kind == DhcpReplyKind::kNak);
  if (r->kind != DhcpReplyKind::kNak) {
    const std::uint32_t first = r->your_address >> 24;
    check(first != 0 && first != 127 && first < 224);
  }
  if (r->prefix_len) check(*r->prefix_len >= 1 && *r->prefix_len <= 32);
  check(r->dns_count <= r->dns.size());
  if (r->mtu) check(*r->mtu >= 68);
  check(size >= 20 + 8 + 240);
  return 0;
}
