#include "base/broker_handoff.h"

#include <gtest/gtest.h>

#include <string>

#include "base/byte_reader.h"

namespace abox::base {
namespace {

Result<ParsedHandoff, HandoffError> parse(std::string_view s) {
  return parse_handoff(as_bytes(s));
}

TEST(BrokerHandoff, RoundTrips) {
  BrokerHandoff h{"agent-1", "api.anthropic.com", 443, "93.184.215.14"};
  auto line = encode_handoff(h);
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line.value(), "ABOX/1 agent-1 api.anthropic.com 443 93.184.215.14\n");
  const std::string with_tls = line.value() + "\x16\x03\x01";
  auto p = parse(with_tls);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->handoff.instance, "agent-1");
  EXPECT_EQ(p->handoff.name, "api.anthropic.com");
  EXPECT_EQ(p->handoff.port, 443);
  EXPECT_EQ(p->handoff.address, "93.184.215.14");
  EXPECT_EQ(p->consumed, line->size());
}

TEST(BrokerHandoff, Ipv6Address) {
  auto p = parse("ABOX/1 i a.example 8443 2001:db8::1\n");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->handoff.address, "2001:db8::1");
}

TEST(BrokerHandoff, IncompleteUntilNewline) {
  EXPECT_EQ(parse("").error(), HandoffError::incomplete);
  EXPECT_EQ(parse("AB").error(), HandoffError::incomplete);
  EXPECT_EQ(parse("ABOX/1 i a.example 443 1.2.3.4").error(), HandoffError::incomplete);
}

TEST(BrokerHandoff, WrongStartRefusedAtOnce) {
  EXPECT_EQ(parse("\x16\x03").error(), HandoffError::bad_magic);  // TLS straight away
  EXPECT_EQ(parse("GET / HTTP/1.1\r\n").error(), HandoffError::bad_magic);
  EXPECT_EQ(parse("abox/1 i a.example 443 1.2.3.4\n").error(), HandoffError::bad_magic);
}

TEST(BrokerHandoff, TooLongWithoutNewline) {
  std::string s = "ABOX/1 ";
  s.append(kMaxHandoffLine, 'a');
  EXPECT_EQ(parse(s).error(), HandoffError::too_long);
  // A newline just past the limit is never looked at.
  std::string t = "ABOX/1 i a.example 443 1.2.3.4";
  t.append(kMaxHandoffLine - t.size(), ' ');
  t += '\n';
  EXPECT_EQ(parse(t).error(), HandoffError::too_long);
}

TEST(BrokerHandoff, NastyFields) {
  EXPECT_EQ(parse("ABOX/2 i a.example 443 1.2.3.4\n").error(), HandoffError::bad_version);
  EXPECT_EQ(parse("ABOX/1 i a.example 443 1.2.3.4 extra\n").error(), HandoffError::bad_syntax);
  EXPECT_EQ(parse("ABOX/1 i a.example 443\n").error(), HandoffError::bad_syntax);
  // Found by the fuzzer: a trailing space was taken as the end of the line.
  EXPECT_EQ(parse("ABOX/1 i a.example 8473 2001:db8:: \n").error(), HandoffError::bad_syntax);
  EXPECT_EQ(parse("ABOX/1\n").error(), HandoffError::bad_syntax);
  EXPECT_EQ(parse("ABOX/\n").error(), HandoffError::bad_version);
  EXPECT_EQ(parse("ABOX/1  i a.example 443 1.2.3.4\n").error(), HandoffError::bad_syntax);
  EXPECT_EQ(parse("ABOX/1 i a.example 443 1.2.3.4\r\n").error(), HandoffError::bad_address);
  EXPECT_EQ(parse("ABOX/1 i/x a.example 443 1.2.3.4\n").error(), HandoffError::bad_instance);
  EXPECT_EQ(parse("ABOX/1 " + std::string(65, 'i') + " a.example 443 1.2.3.4\n").error(),
            HandoffError::bad_instance);
  EXPECT_EQ(parse("ABOX/1 i A.example 443 1.2.3.4\n").error(), HandoffError::bad_name);
  EXPECT_EQ(parse("ABOX/1 i a.example. 443 1.2.3.4\n").error(), HandoffError::bad_name);
  EXPECT_EQ(parse("ABOX/1 i a..example 443 1.2.3.4\n").error(), HandoffError::bad_name);
  EXPECT_EQ(parse("ABOX/1 i a.ex\x01mple 443 1.2.3.4\n").error(), HandoffError::bad_name);
  EXPECT_EQ(parse("ABOX/1 i a.example 0 1.2.3.4\n").error(), HandoffError::bad_port);
  EXPECT_EQ(parse("ABOX/1 i a.example 0443 1.2.3.4\n").error(), HandoffError::bad_port);
  EXPECT_EQ(parse("ABOX/1 i a.example 65536 1.2.3.4\n").error(), HandoffError::bad_port);
  EXPECT_EQ(parse("ABOX/1 i a.example 99999999 1.2.3.4\n").error(), HandoffError::bad_port);
  EXPECT_EQ(parse("ABOX/1 i a.example 44x 1.2.3.4\n").error(), HandoffError::bad_port);
  EXPECT_EQ(parse("ABOX/1 i a.example 443 evil.com\n").error(), HandoffError::bad_address);
  EXPECT_EQ(parse(std::string("ABOX/1 i a.example 443 1.2.3.4\0\n", 32)).error(), HandoffError::bad_address);
}

TEST(BrokerHandoff, EncodeRefusesWhatParseWouldRefuse) {
  EXPECT_EQ(encode_handoff({"bad instance", "a.example", 443, "1.2.3.4"}).error(),
            HandoffError::bad_instance);
  EXPECT_EQ(encode_handoff({"i", "A.example", 443, "1.2.3.4"}).error(), HandoffError::bad_name);
  EXPECT_EQ(encode_handoff({"i", "a.example", 0, "1.2.3.4"}).error(), HandoffError::bad_port);
  EXPECT_EQ(encode_handoff({"i", "a.example", 443, "x"}).error(), HandoffError::bad_address);
}

}  // namespace
}  // namespace abox::base
