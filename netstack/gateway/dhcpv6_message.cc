// Dhcpv6ClientMessage parsing and the Reply writer (see dhcpv6_message.h).
#include "netstack/gateway/dhcpv6_message.h"

#include "base/byte_reader.h"

namespace abox::netstack {
namespace {

constexpr std::uint16_t kOptIaNa = 3;
constexpr std::uint16_t kOptIaTa = 4;
constexpr std::uint16_t kOptOptionRequest = 6;
constexpr std::uint16_t kOptElapsedTime = 8;
constexpr std::uint16_t kOptIaPd = 25;

bool is_client_type(std::uint8_t t) {
  switch (static_cast<Dhcpv6MessageType>(t)) {
    case Dhcpv6MessageType::solicit:
    case Dhcpv6MessageType::request:
    case Dhcpv6MessageType::confirm:
    case Dhcpv6MessageType::renew:
    case Dhcpv6MessageType::rebind:
    case Dhcpv6MessageType::release:
    case Dhcpv6MessageType::decline:
    case Dhcpv6MessageType::information_request:
      return true;
  }
  return false;
}

void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}

// push_back byte by byte: GCC 12's -Warray-bounds misreads a vector's range
// insert of a small array as an overflow (as in ndp_responder.cc).
void put_option(std::vector<std::uint8_t>& b, std::uint16_t code, std::span<const std::uint8_t> data) {
  put16(b, code);
  put16(b, static_cast<std::uint16_t>(data.size()));
  for (const std::uint8_t byte : data) b.push_back(byte);
}

}  // namespace

const char* to_string(Dhcpv6ParseError e) {
  switch (e) {
    case Dhcpv6ParseError::truncated_header:
      return "shorter than the DHCPv6 header";
    case Dhcpv6ParseError::not_a_client_type:
      return "not a client message type";
    case Dhcpv6ParseError::option_header_truncated:
      return "an option header is cut short";
    case Dhcpv6ParseError::option_runs_past_end:
      return "an option runs past the end";
    case Dhcpv6ParseError::duplicate_option:
      return "an option appears twice";
    case Dhcpv6ParseError::bad_option_length:
      return "an option has the wrong length";
  }
  return "unknown DHCPv6 parse error";
}

base::Result<Dhcpv6ClientMessage, Dhcpv6ParseError> parse_dhcpv6_client_message(
    std::span<const std::uint8_t> payload) {
  using Err = base::Err<Dhcpv6ParseError>;
  base::ByteReader r(payload);
  const auto type = r.u8();
  const auto xid = r.bytes(3);
  if (!type || !xid) return Err{Dhcpv6ParseError::truncated_header};
  if (!is_client_type(*type)) return Err{Dhcpv6ParseError::not_a_client_type};
  Dhcpv6ClientMessage m;
  m.type = static_cast<Dhcpv6MessageType>(*type);
  m.transaction_id = (std::uint32_t{(*xid)[0]} << 16) | (std::uint32_t{(*xid)[1]} << 8) | (*xid)[2];
  bool seen_client = false;
  bool seen_server = false;
  bool seen_oro = false;
  while (!r.empty()) {
    const auto code = r.u16be();
    const auto length = r.u16be();
    if (!code || !length) return Err{Dhcpv6ParseError::option_header_truncated};
    const auto data = r.bytes(*length);
    if (!data) return Err{Dhcpv6ParseError::option_runs_past_end};
    switch (*code) {
      case kDhcpv6OptClientId:
      case kDhcpv6OptServerId: {
        bool& seen = *code == kDhcpv6OptClientId ? seen_client : seen_server;
        if (seen) return Err{Dhcpv6ParseError::duplicate_option};
        seen = true;
        if (data->empty() || data->size() > kDhcpv6MaxDuid) return Err{Dhcpv6ParseError::bad_option_length};
        (*code == kDhcpv6OptClientId ? m.client_id : m.server_id) = *data;
        break;
      }
      case kOptOptionRequest: {
        if (seen_oro) return Err{Dhcpv6ParseError::duplicate_option};
        seen_oro = true;
        if (data->size() % 2 != 0) return Err{Dhcpv6ParseError::bad_option_length};
        base::ByteReader codes(*data);
        while (const auto requested = codes.u16be())
          if (*requested == kDhcpv6OptDnsServers) m.requests_dns_servers = true;
        break;
      }
      case kOptElapsedTime: {
        if (m.elapsed_centiseconds) return Err{Dhcpv6ParseError::duplicate_option};
        if (data->size() != 2) return Err{Dhcpv6ParseError::bad_option_length};
        m.elapsed_centiseconds = static_cast<std::uint16_t>(((*data)[0] << 8) | (*data)[1]);
        break;
      }
      case kOptIaNa:
      case kOptIaTa:
      case kOptIaPd:
        m.has_identity_association = true;
        break;
      default:
        break;  // skipped by its length, unread
    }
  }
  return m;
}

std::array<std::uint8_t, 10> dhcpv6_duid_ll(const std::array<std::uint8_t, 6>& mac) {
  return {0, 3, 0, 1, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]};
}

void write_dhcpv6_reply(std::vector<std::uint8_t>& out, std::uint32_t transaction_id,
                        std::span<const std::uint8_t> server_duid, std::span<const std::uint8_t> client_id,
                        const std::array<std::uint8_t, 16>& dns_server) {
  out.clear();
  out.push_back(kDhcpv6ReplyType);
  out.push_back(static_cast<std::uint8_t>(transaction_id >> 16));
  out.push_back(static_cast<std::uint8_t>(transaction_id >> 8));
  out.push_back(static_cast<std::uint8_t>(transaction_id));
  put_option(out, kDhcpv6OptServerId, server_duid);
  if (!client_id.empty()) put_option(out, kDhcpv6OptClientId, client_id);
  put_option(out, kDhcpv6OptDnsServers, dns_server);
}

}  // namespace abox::netstack
