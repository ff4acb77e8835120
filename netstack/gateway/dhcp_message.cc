// parse_dhcp_client_message (see dhcp_message.h for what it checks).
#include "netstack/gateway/dhcp_message.h"

#include "base/byte_reader.h"

namespace abox::netstack {
namespace {

using base::Err;

constexpr std::uint8_t kBootRequest = 1;
constexpr std::uint8_t kHtypeEthernet = 1;
constexpr std::uint8_t kEthernetAddressSize = 6;
constexpr std::size_t kChaddrSize = 16;
constexpr std::size_t kSnameAndFileSize = 64 + 128;
constexpr std::uint32_t kMagicCookie = 0x6382'5363;

constexpr std::uint8_t kOptionPad = 0;
constexpr std::uint8_t kOptionEnd = 255;
constexpr std::uint8_t kOptionRequestedAddress = 50;
constexpr std::uint8_t kOptionOverload = 52;
constexpr std::uint8_t kOptionMessageType = 53;
constexpr std::uint8_t kOptionServerId = 54;

std::uint32_t be32(std::span<const std::uint8_t> b) {
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

bool is_client_type(std::uint8_t t) {
  switch (static_cast<DhcpMessageType>(t)) {
    case DhcpMessageType::discover:
    case DhcpMessageType::request:
    case DhcpMessageType::decline:
    case DhcpMessageType::release:
    case DhcpMessageType::inform:
      return true;
  }
  return false;
}

}  // namespace

const char* to_string(DhcpParseError e) {
  switch (e) {
    case DhcpParseError::not_a_request:
      return "not a BOOTREQUEST";
    case DhcpParseError::not_ethernet:
      return "hardware type is not Ethernet";
    case DhcpParseError::hardware_length_over_16:
      return "hardware address length over 16";
    case DhcpParseError::hardware_length_not_6:
      return "hardware address length is not 6";
    case DhcpParseError::truncated_header:
      return "shorter than the BOOTP header";
    case DhcpParseError::no_magic_cookie:
      return "no DHCP magic cookie";
    case DhcpParseError::option_runs_past_end:
      return "an option runs past the end";
    case DhcpParseError::no_end_option:
      return "no end option";
    case DhcpParseError::option_overload:
      return "option overload (52) is refused";
    case DhcpParseError::no_message_type:
      return "no message type option";
    case DhcpParseError::duplicate_option:
      return "an option that must be single appears twice";
    case DhcpParseError::bad_option_length:
      return "an option has the wrong length";
    case DhcpParseError::not_a_client_type:
      return "message type is not a client's";
  }
  return "unknown DHCP parse error";
}

base::Result<DhcpClientMessage, DhcpParseError> parse_dhcp_client_message(
    std::span<const std::uint8_t> bootp) {
  base::ByteReader r(bootp);
  if (r.size() < kDhcpFixedSize) return Err{DhcpParseError::truncated_header};
  DhcpClientMessage m;
  // The size check above makes every fixed-header read succeed; each is
  // still checked, so that the reader alone guards the bounds.
  const auto op = r.u8();
  const auto htype = r.u8();
  const auto hlen = r.u8();
  const auto hops = r.u8();
  const auto xid = r.u32be();
  const auto secs = r.u16be();
  const auto flags = r.u16be();
  const auto ciaddr = r.u32be();
  const auto yiaddr = r.u32be();
  const auto siaddr = r.u32be();
  const auto giaddr = r.u32be();
  const auto chaddr = r.bytes(kChaddrSize);
  const bool skipped = r.skip(kSnameAndFileSize);
  const auto cookie = r.u32be();
  if (!op || !htype || !hlen || !hops || !xid || !secs || !flags || !ciaddr || !yiaddr || !siaddr ||
      !giaddr || !chaddr || !skipped || !cookie) {
    return Err{DhcpParseError::truncated_header};
  }
  if (*op != kBootRequest) return Err{DhcpParseError::not_a_request};
  if (*htype != kHtypeEthernet) return Err{DhcpParseError::not_ethernet};
  if (*hlen > kChaddrSize) return Err{DhcpParseError::hardware_length_over_16};
  if (*hlen != kEthernetAddressSize) return Err{DhcpParseError::hardware_length_not_6};
  if (*cookie != kMagicCookie) return Err{DhcpParseError::no_magic_cookie};
  m.xid = *xid;
  m.flags = *flags;
  m.ciaddr = *ciaddr;
  m.giaddr = *giaddr;
  for (std::size_t i = 0; i < m.chaddr.size(); ++i) m.chaddr[i] = (*chaddr)[i];

  bool have_type = false;
  for (;;) {
    const auto code = r.u8();
    if (!code) return Err{DhcpParseError::no_end_option};
    if (*code == kOptionPad) continue;
    if (*code == kOptionEnd) break;
    const auto length = r.u8();
    if (!length) return Err{DhcpParseError::option_runs_past_end};
    const auto data = r.bytes(*length);
    if (!data) return Err{DhcpParseError::option_runs_past_end};
    switch (*code) {
      case kOptionMessageType:
        if (have_type) return Err{DhcpParseError::duplicate_option};
        if (data->size() != 1) return Err{DhcpParseError::bad_option_length};
        if (!is_client_type((*data)[0])) return Err{DhcpParseError::not_a_client_type};
        m.type = static_cast<DhcpMessageType>((*data)[0]);
        have_type = true;
        break;
      case kOptionRequestedAddress:
      case kOptionServerId: {
        auto& field = *code == kOptionServerId ? m.server_id : m.requested_address;
        if (field) return Err{DhcpParseError::duplicate_option};
        if (data->size() != 4) return Err{DhcpParseError::bad_option_length};
        field = be32(*data);
        break;
      }
      case kOptionOverload:
        return Err{DhcpParseError::option_overload};
      default:
        break;  // not needed to answer: skipped unread
    }
  }
  if (!have_type) return Err{DhcpParseError::no_message_type};
  return m;
}

}  // namespace abox::netstack
