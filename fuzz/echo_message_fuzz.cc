// Fuzz target: netstack/stack/echo_message. The guest's echo requests and a
// ping socket's replies are read by parse_echo_request() and
// parse_echo_reply(); whatever the bytes: no crash, no read past the input,
// and:
//   - a parse succeeds only with the 8-byte header there, the family's type,
//     code 0, and (a reply) the expected id; its payload is the input's
//     bytes after the header, exactly;
//   - the reply frame written from a parsed reply reads back through
//     GuestFrame::parse() with the same id, sequence and payload and an ICMP
//     checksum that adds up; the prohibited error written quoting the input
//     parses as a frame too.
// The first input byte picks the family and the expected id's low byte.
// Seeds (fuzz/corpus/echo_message/): an echo request and reply of each
// family, and short ones.
#include <cstdint>
#include <span>
#include <vector>

#include "base/byte_reader.h"
#include "netstack/stack/echo_message.h"
#include "netstack/stack/guest_frame.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
using abox::policy::IpAddress;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const GuestLink kLink{{0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02}, {0x02, 0, 0, 0, 0x0F, 0x0F}};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool v6 = (data[0] & 1) != 0;
  const std::uint16_t expected_id = static_cast<std::uint16_t>(data[0] >> 1);
  const std::span<const std::uint8_t> message(data + 1, size - 1);
  const IpAddress guest = v6 ? *IpAddress::parse("fd00::15") : IpAddress::v4(0x0A00'020F);
  const IpAddress remote = v6 ? *IpAddress::parse("2606:4700::1") : IpAddress::v4(0x0101'0101);

  if (auto request = parse_echo_request(message, guest, remote); request.ok()) {
    check(message.size() >= kEchoHeader);
    check(message[1] == 0 && message[0] == (v6 ? kIcmpv6EchoRequest : kIcmpEchoRequest));
    check(request->payload.data() == message.data() + kEchoHeader);
    check(request->payload.size() == message.size() - kEchoHeader);
  }
  auto reply = parse_echo_reply(message, v6, expected_id);
  if (!reply.ok()) return 0;
  check(message.size() >= kEchoHeader && message[1] == 0);
  check(expected_id == 0 || reply->id == expected_id);
  check(reply->payload.size() == message.size() - kEchoHeader);

  const std::vector<std::uint8_t> frame =
      echo_reply_frame(kLink, remote, guest, 0x4242, reply->sequence, reply->payload);
  auto view = GuestFrame::parse(frame);
  check(view.ok());
  const std::span<const std::uint8_t> back = v6 ? view->ipv6().upper_layer : view->ipv4().payload;
  std::uint32_t start = 0;
  if (v6) {
    start = sum16(remote.bytes());
    start = sum16(guest.bytes(), start);
    start += static_cast<std::uint32_t>(back.size()) + GuestFrame::kProtoIcmpv6;
  }
  check(fold_checksum(sum16(back, start)) == 0);
  auto again = parse_echo_reply(back, v6, 0x4242);
  check(again.ok() && again->sequence == reply->sequence && again->payload.size() == reply->payload.size());
  check(GuestFrame::parse(prohibited_frame(kLink, remote, guest, message)).ok());
  return 0;
}
