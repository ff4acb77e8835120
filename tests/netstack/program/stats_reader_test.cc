// parse_stats_json: what stats.h writes is read back exactly; everything
// else (other JSON shapes, overflow, escapes, truncation, too many or too
// long keys) is refused with a reason and never read past the end.
#include "netstack/program/stats_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"

namespace abox::netstack {
namespace {

base::Result<std::vector<StatsField>, std::string> parse(std::string_view s) {
  // A copy in its own allocation, so ASan sees a read past the end.
  std::vector<std::uint8_t> bytes(s.begin(), s.end());
  return parse_stats_json(bytes);
}

TEST(StatsReader, ReadsWhatStatsWrites) {
  auto r = parse("{\"frames_in\":12,\"frames_out\":0,\"memory_rss_bytes\":9375744}\n");
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "frames_in");
  EXPECT_EQ((*r)[0].value, 12u);
  EXPECT_EQ((*r)[1].name, "frames_out");
  EXPECT_EQ((*r)[1].value, 0u);
  EXPECT_EQ((*r)[2].value, 9375744u);
}

TEST(StatsReader, WhitespaceAndTheLargest64BitValue) {
  auto r = parse(" \t{ \"a\" : 1 ,\n \"B_2\":18446744073709551615 }\r\n");
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].name, "B_2");
  EXPECT_EQ((*r)[1].value, 18446744073709551615ull);
}

TEST(StatsReader, AnEmptyObjectIsNoFields) {
  auto r = parse("{}");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(StatsReader, RefusesEverythingElse) {
  const char* bad[] = {
      "",                               // nothing
      "\n",                             // only whitespace
      "[]",                             // not an object
      "{",                              // truncated
      "{\"a\"",                         // truncated after the key
      "{\"a\":",                        // truncated before the value
      "{\"a\":1",                       // no closing brace
      "{\"a\":1,}",                     // trailing comma
      "{,}",                            // no key
      "{\"\":1}",                       // empty key
      "{\"a\\u0041\":1}",               // escapes are not ours
      "{\"a b\":1}",                    // space in a key
      "{\"a\xff\":1}",                  // a byte outside the key alphabet
      "{\"a\":-1}",                     // negative
      "{\"a\":1.5}",                    // fraction
      "{\"a\":1e3}",                    // exponent
      "{\"a\":\"x\"}",                  // string value
      "{\"a\":true}",                   // boolean
      "{\"a\":null}",                   // null
      "{\"a\":{}}",                     // nested
      "{\"a\":18446744073709551616}",   // 2^64
      "{\"a\":99999999999999999999}",   // 20 digits, too large
      "{\"a\":000000000000000000001}",  // 21 digits
      "{\"a\":1}{\"b\":2}",             // two objects
      "{\"a\":1} x",                    // garbage after
      "{\"a\" 1}",                      // no colon
      "{\"a\":1 \"b\":2}",              // no comma
      "{'a':1}",                        // single quotes
  };
  for (const char* s : bad) {
    auto r = parse(s);
    EXPECT_FALSE(r.ok()) << "accepted: " << s;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("at byte"), std::string::npos) << r.error();
    }
  }
}

TEST(StatsReader, AKeyAtTheLengthLimitIsReadOneLongerIsNot) {
  std::string key(kMaxStatsKeyBytes, 'k');
  EXPECT_TRUE(parse("{\"" + key + "\":1}").ok());
  EXPECT_FALSE(parse("{\"" + key + "k\":1}").ok());
}

TEST(StatsReader, AtMostMaxFields) {
  auto object = [](std::size_t n) {
    std::string s = "{";
    for (std::size_t i = 0; i < n; ++i)
      s += (i ? ",\"f" : "\"f") + std::to_string(i) + "\":" + std::to_string(i);
    return s + "}";
  };
  auto ok = parse(object(kMaxStatsFields));
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok->size(), kMaxStatsFields);
  EXPECT_FALSE(parse(object(kMaxStatsFields + 1)).ok());
}

TEST(StatsReader, EveryPrefixOfAGoodReplyIsRefused) {
  const std::string good = "{\"frames_in\":12,\"x\":3}";
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(parse(good.substr(0, n)).ok()) << good.substr(0, n);
  }
  EXPECT_TRUE(parse(good).ok());
}

}  // namespace
}  // namespace abox::netstack
