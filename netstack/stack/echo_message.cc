#include "netstack/stack/echo_message.h"

#include "base/byte_reader.h"
#include "netstack/stack/guest_frame.h"

namespace abox::netstack {

namespace {

constexpr std::uint8_t kProtoIcmp = 1;
constexpr std::uint8_t kIcmpUnreachable = 3;
constexpr std::uint8_t kIcmpProhibited = 13;  // communication administratively prohibited (RFC 1812)
constexpr std::uint8_t kIcmpv6Unreachable = 1;
constexpr std::uint8_t kIcmpv6Prohibited = 1;
constexpr std::size_t kIpv6MinimumMtu = 1280;
constexpr std::uint8_t kHopLimit = 64;

// In the enum's order.
constexpr std::array<std::string_view, static_cast<std::size_t>(EchoRefusal::count_)> kSentences = {{
    "echo message shorter than its 8-byte header",
    "not an echo message of its family",
    "echo message with a code other than 0",
    "echo request checksum is wrong",
    "echo reply for an id this socket does not have",
    "echo payload too long",
}};
static_assert(!kSentences.back().empty(), "every EchoRefusal has its sentence");

void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

void set16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t v) {
  out[at] = static_cast<std::uint8_t>(v >> 8);
  out[at + 1] = static_cast<std::uint8_t>(v);
}

// The ICMPv6 pseudo-header's sum (RFC 8200 section 8.1), unfolded.
std::uint32_t icmpv6_pseudo_sum(const policy::IpAddress& source, const policy::IpAddress& destination,
                                std::size_t length) {
  std::uint32_t sum = sum16(source.bytes());
  sum = sum16(destination.bytes(), sum);
  sum += static_cast<std::uint32_t>(length >> 16);
  sum += static_cast<std::uint32_t>(length & 0xFFFF);
  sum += GuestFrame::kProtoIcmpv6;
  return sum;
}

// Ethernet and the IP header for a packet of `upper_length` bytes of ICMP
// (IPv4) or ICMPv6 from `from` to `to`; the message is appended after.
std::vector<std::uint8_t> headers(const GuestLink& link, const policy::IpAddress& from,
                                  const policy::IpAddress& to, std::size_t upper_length) {
  std::vector<std::uint8_t> f;
  const bool v6 = from.is_v6();
  f.reserve(14 + (v6 ? 40 : 20) + upper_length);
  f.insert(f.end(), link.guest_mac.begin(), link.guest_mac.end());
  f.insert(f.end(), link.gateway_mac.begin(), link.gateway_mac.end());
  put16(f, v6 ? 0x86DD : 0x0800);
  if (v6) {
    f.insert(f.end(), {0x60, 0, 0, 0});
    put16(f, static_cast<std::uint16_t>(upper_length));
    f.push_back(GuestFrame::kProtoIcmpv6);
    f.push_back(kHopLimit);
    f.insert(f.end(), from.bytes().begin(), from.bytes().end());
    f.insert(f.end(), to.bytes().begin(), to.bytes().end());
    return f;
  }
  const std::size_t ip = f.size();
  f.insert(f.end(), {0x45, 0});
  put16(f, static_cast<std::uint16_t>(20 + upper_length));
  f.insert(f.end(), {0, 0, 0, 0, kHopLimit, kProtoIcmp, 0, 0});
  f.insert(f.end(), from.bytes().begin(), from.bytes().begin() + 4);
  f.insert(f.end(), to.bytes().begin(), to.bytes().begin() + 4);
  set16(f, ip + 10, fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(ip, 20))));
  return f;
}

// The checksum of the ICMP(v6) message that starts at `at` (to the end of
// `f`), written into its field.
void finish_checksum(std::vector<std::uint8_t>& f, std::size_t at, const policy::IpAddress& from,
                     const policy::IpAddress& to) {
  const std::span<const std::uint8_t> message = std::span<const std::uint8_t>(f).subspan(at);
  const std::uint32_t start = from.is_v6() ? icmpv6_pseudo_sum(from, to, message.size()) : 0;
  set16(f, at + 2, fold_checksum(sum16(message, start)));
}

}  // namespace

std::string_view describe(EchoRefusal r) {
  return kSentences.at(static_cast<std::size_t>(r));
}

namespace {
// The 8-byte header an echo request and reply share (RFC 792, RFC 4443
// section 4): type, code 0, checksum (checked by the caller that needs it),
// id, sequence; the payload is the rest.
base::Result<EchoMessage, EchoRefusal> read_echo_header(std::span<const std::uint8_t> message,
                                                        std::uint8_t expected_type) {
  using base::Err;
  base::ByteReader r(message);
  const auto type = r.u8();
  const auto code = r.u8();
  const bool checksum = r.skip(2);
  const auto id = r.u16be();
  const auto sequence = r.u16be();
  if (!type || !code || !checksum || !id || !sequence) return Err{EchoRefusal::short_message};
  if (*type != expected_type) return Err{EchoRefusal::wrong_type};
  if (*code != 0) return Err{EchoRefusal::wrong_code};
  return EchoMessage{*id, *sequence, r.rest()};
}
}  // namespace

base::Result<EchoMessage, EchoRefusal> parse_echo_request(std::span<const std::uint8_t> message,
                                                          const policy::IpAddress& source,
                                                          const policy::IpAddress& destination) {
  using base::Err;
  const bool v6 = destination.is_v6();
  auto echo = read_echo_header(message, v6 ? kIcmpv6EchoRequest : kIcmpEchoRequest);
  if (!echo.ok()) return echo;
  if (echo->payload.size() > kMaxEchoPayload) return Err{EchoRefusal::too_long};
  const std::uint32_t start = v6 ? icmpv6_pseudo_sum(source, destination, message.size()) : 0;
  if (fold_checksum(sum16(message, start)) != 0) return Err{EchoRefusal::checksum};
  return echo;
}

base::Result<EchoMessage, EchoRefusal> parse_echo_reply(std::span<const std::uint8_t> message, bool v6,
                                                        std::uint16_t expected_id) {
  using base::Err;
  auto echo = read_echo_header(message, v6 ? kIcmpv6EchoReply : kIcmpEchoReply);
  if (!echo.ok()) return echo;
  if (expected_id != 0 && echo->id != expected_id) return Err{EchoRefusal::wrong_id};
  if (echo->payload.size() > kMaxEchoPayload) return Err{EchoRefusal::too_long};
  return echo;
}

std::vector<std::uint8_t> echo_request_message(bool v6, std::uint16_t sequence,
                                               std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> m;
  m.reserve(kEchoHeader + payload.size());
  m.insert(m.end(), {v6 ? kIcmpv6EchoRequest : kIcmpEchoRequest, 0, 0, 0, 0, 0});
  put16(m, sequence);
  m.insert(m.end(), payload.begin(), payload.end());
  return m;
}

std::vector<std::uint8_t> echo_reply_frame(const GuestLink& link, const policy::IpAddress& from,
                                           const policy::IpAddress& to, std::uint16_t id,
                                           std::uint16_t sequence, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> f = headers(link, from, to, kEchoHeader + payload.size());
  const std::size_t at = f.size();
  f.insert(f.end(), {from.is_v6() ? kIcmpv6EchoReply : kIcmpEchoReply, 0, 0, 0});
  put16(f, id);
  put16(f, sequence);
  f.insert(f.end(), payload.begin(), payload.end());
  finish_checksum(f, at, from, to);
  return f;
}

std::vector<std::uint8_t> prohibited_frame(const GuestLink& link, const policy::IpAddress& from,
                                           const policy::IpAddress& to,
                                           std::span<const std::uint8_t> refused_packet) {
  const bool v6 = from.is_v6();
  std::span<const std::uint8_t> quote = refused_packet;
  if (v6) {
    // The whole error within the IPv6 minimum MTU.
    quote = quote.first(std::min(quote.size(), kIpv6MinimumMtu - 40 - kEchoHeader));
  } else {
    // The header (its length from the packet, bounded by it) and 8 bytes.
    base::ByteReader r(refused_packet);
    const std::size_t header = std::size_t{r.u8().value_or(0) & 0x0Fu} * 4;
    quote = quote.first(std::min(quote.size(), header + 8));
  }
  std::vector<std::uint8_t> f = headers(link, from, to, kEchoHeader + quote.size());
  const std::size_t at = f.size();
  f.insert(f.end(), {v6 ? kIcmpv6Unreachable : kIcmpUnreachable, v6 ? kIcmpv6Prohibited : kIcmpProhibited, 0,
                     0, 0, 0, 0, 0});
  f.insert(f.end(), quote.begin(), quote.end());
  finish_checksum(f, at, from, to);
  return f;
}

}  // namespace abox::netstack
