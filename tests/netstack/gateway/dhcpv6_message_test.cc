// parse_dhcpv6_client_message and write_dhcpv6_reply: what a client message
// yields, and the nasty cases (truncated headers and options, lengths past
// the end, huge option counts, zero-length and oversized identifiers,
// duplicates, server and unknown types): every one refused under its own
// error, never read past its end (the ASan build checks that).
#include "netstack/gateway/dhcpv6_message.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "tests/netstack/gateway/dhcpv6_wire.h"

namespace abox::netstack {
namespace {

using namespace dhcpv6_wire;  // NOLINT(google-build-using-namespace): the builders are this test's vocabulary

Dhcpv6ParseError error_of(const Bytes& m) {
  const auto r = parse_dhcpv6_client_message(m);
  EXPECT_FALSE(r.ok());
  return r.ok() ? Dhcpv6ParseError::truncated_header : r.error();
}

TEST(Dhcpv6MessageTest, AnInformationRequestIsReadWhole) {
  const Bytes m = information_request();
  const auto r = parse_dhcpv6_client_message(m);
  ASSERT_TRUE(r.ok()) << to_string(r.error());
  EXPECT_EQ(r->type, Dhcpv6MessageType::information_request);
  EXPECT_EQ(r->transaction_id, 0xABCDEFu);
  EXPECT_EQ(Bytes(r->client_id.begin(), r->client_id.end()), kClientDuid);
  EXPECT_TRUE(r->server_id.empty());
  EXPECT_TRUE(r->requests_dns_servers);
  EXPECT_FALSE(r->has_identity_association);
  ASSERT_TRUE(r->elapsed_centiseconds.has_value());
  EXPECT_EQ(*r->elapsed_centiseconds, 0);
}

TEST(Dhcpv6MessageTest, TheBareHeaderIsAMessageAndUnknownOptionsAreSkipped) {
  const auto bare = parse_dhcpv6_client_message(message(11, {}));
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->client_id.empty());
  EXPECT_FALSE(bare->requests_dns_servers);
  // Unknown options, of zero length too, and an IA_NA (noted, not read).
  const Bytes m = message(1, {option(0xFFFF, {}), option(39, {1, 2, 3}), option(3, {9}), option(6, {0, 24})});
  const auto r = parse_dhcpv6_client_message(m);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, Dhcpv6MessageType::solicit);
  EXPECT_TRUE(r->has_identity_association);
  EXPECT_FALSE(r->requests_dns_servers);
}

TEST(Dhcpv6MessageTest, TruncatedHeadersAndOptionsAreRefused) {
  EXPECT_EQ(error_of({}), Dhcpv6ParseError::truncated_header);
  EXPECT_EQ(error_of({11, 0, 0}), Dhcpv6ParseError::truncated_header);
  Bytes m = information_request();
  for (std::size_t cut = 1; cut <= 3; ++cut) {
    Bytes shorter(m.begin(), m.end() - static_cast<long>(cut));
    // The last option is elapsed time, 2 bytes of data: a cut of 1 or 2 leaves
    // its length past the end, a cut of 3 the length field itself short.
    const auto r = parse_dhcpv6_client_message(shorter);
    ASSERT_FALSE(r.ok()) << cut;
  }
  EXPECT_EQ(error_of(message(11, {Bytes{0, 1, 0}})), Dhcpv6ParseError::option_header_truncated);
  EXPECT_EQ(error_of(message(11, {Bytes{0}})), Dhcpv6ParseError::option_header_truncated);
}

TEST(Dhcpv6MessageTest, LengthsPastTheEndAreRefused) {
  // A client id claiming 0xFFFF bytes with 14 behind it.
  Bytes m = message(11, {option(1, kClientDuid)});
  m[6] = 0xFF;
  m[7] = 0xFF;
  EXPECT_EQ(error_of(m), Dhcpv6ParseError::option_runs_past_end);
  // An unknown option one byte longer than what is left.
  Bytes u = message(11, {option(99, {1, 2, 3})});
  u[7] = 4;
  EXPECT_EQ(error_of(u), Dhcpv6ParseError::option_runs_past_end);
}

TEST(Dhcpv6MessageTest, HugeOptionCountsAreBoundedByTheMessage) {
  // 16000 zero-length unknown options: read, each skipped, and the message
  // still parses; the count cannot exceed the bytes.
  std::vector<Bytes> many(16000, option(99, {}));
  Bytes m{11, 1, 2, 3};
  for (const Bytes& o : many) m.insert(m.end(), o.begin(), o.end());
  EXPECT_TRUE(parse_dhcpv6_client_message(m).ok());
  // An option request naming 23 among 30000 codes, the last one cut.
  Bytes codes;
  for (int i = 0; i < 30000; ++i) ipv6_wire::put16(codes, static_cast<std::uint16_t>(i % 100));
  const auto r = parse_dhcpv6_client_message(message(11, {option(6, codes)}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->requests_dns_servers);
  codes.pop_back();
  EXPECT_EQ(error_of(message(11, {option(6, codes)})), Dhcpv6ParseError::bad_option_length);
}

TEST(Dhcpv6MessageTest, IdentifiersOfZeroOrTooManyBytesAreRefused) {
  EXPECT_EQ(error_of(message(11, {option(1, {})})), Dhcpv6ParseError::bad_option_length);
  EXPECT_EQ(error_of(message(11, {option(2, {})})), Dhcpv6ParseError::bad_option_length);
  EXPECT_EQ(error_of(message(11, {option(1, Bytes(131, 7))})), Dhcpv6ParseError::bad_option_length);
  EXPECT_TRUE(parse_dhcpv6_client_message(message(11, {option(1, Bytes(130, 7))})).ok());
  EXPECT_EQ(error_of(message(11, {option(8, {0})})), Dhcpv6ParseError::bad_option_length);
  EXPECT_EQ(error_of(message(11, {option(8, {0, 0, 0})})), Dhcpv6ParseError::bad_option_length);
  EXPECT_EQ(error_of(message(11, {option(6, {0})})), Dhcpv6ParseError::bad_option_length);
}

TEST(Dhcpv6MessageTest, DuplicatesAreRefused) {
  for (const std::uint16_t code : {1, 2, 6, 8}) {
    const Bytes data = code == 8 ? Bytes{0, 0} : code == 6 ? Bytes{0, 23} : kClientDuid;
    EXPECT_EQ(error_of(message(11, {option(code, data), option(code, data)})),
              Dhcpv6ParseError::duplicate_option)
        << code;
  }
  // Unknown options may repeat (RFC 8415 lets some, and they are not read).
  EXPECT_TRUE(parse_dhcpv6_client_message(message(11, {option(99, {}), option(99, {})})).ok());
}

TEST(Dhcpv6MessageTest, ServerRelayAndUnknownTypesAreRefused) {
  for (const int t : {0, 2, 7, 10, 12, 13, 14, 20, 35, 255})
    EXPECT_EQ(error_of(message(static_cast<std::uint8_t>(t), {})), Dhcpv6ParseError::not_a_client_type) << t;
  for (const int t : {1, 3, 4, 5, 6, 8, 9, 11})
    EXPECT_TRUE(parse_dhcpv6_client_message(message(static_cast<std::uint8_t>(t), {})).ok()) << t;
}

TEST(Dhcpv6MessageTest, TheReplyHoldsTheIdsAndTheDnsServerAndNothingElse) {
  const std::array<std::uint8_t, 6> mac = {0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02};
  const std::array<std::uint8_t, 16> dns = {0xFD, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const auto duid = dhcpv6_duid_ll(mac);
  EXPECT_EQ(Bytes(duid.begin(), duid.end()), (Bytes{0, 3, 0, 1, 0x02, 0xAB, 0x0C, 0x5E, 0x00, 0x02}));
  Bytes out{9, 9, 9};  // cleared first
  write_dhcpv6_reply(out, 0xABCDEF, duid, kClientDuid, dns);
  Bytes expected = {7, 0xAB, 0xCD, 0xEF};
  for (const Bytes& o : {option(2, Bytes(duid.begin(), duid.end())), option(1, kClientDuid),
                         option(23, Bytes(dns.begin(), dns.end()))})
    expected.insert(expected.end(), o.begin(), o.end());
  EXPECT_EQ(out, expected);
  // Without a client id, none is echoed.
  write_dhcpv6_reply(out, 1, duid, {}, dns);
  EXPECT_EQ(out.size(), 4u + 14 + 20);
}

}  // namespace
}  // namespace abox::netstack
