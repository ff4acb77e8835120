// ProviderBackoff and the Retry-After parser (broker/provider_backoff.h).
#include "broker/provider_backoff.h"

#include <gtest/gtest.h>

namespace abox::broker {
namespace {

// 1994-11-06 08:49:37 UTC, RFC 9110's example date.
constexpr std::int64_t kExample = 784111777;

TEST(RetryAfter, DelaySeconds) {
  EXPECT_EQ(retry_after_seconds("17", 0), 17u);
  EXPECT_EQ(retry_after_seconds("017", 0), 17u);
  EXPECT_EQ(retry_after_seconds("1", 0), 1u);
  EXPECT_EQ(retry_after_seconds("3600", 0), 3600u);
  EXPECT_EQ(retry_after_seconds("3601", 0), kMaxProviderBackoffSeconds);
  EXPECT_EQ(retry_after_seconds("999999999", 0), kMaxProviderBackoffSeconds);
  EXPECT_EQ(retry_after_seconds(std::string(400, '9'), 0), kMaxProviderBackoffSeconds);
  EXPECT_EQ(retry_after_seconds("0000000000000000000000001", 0), 1u);
  for (std::string_view bad : {"", "0", "000", "-5", "+5", " 5", "5 ", "5s", "1.5", "0x10", "１"}) {
    EXPECT_EQ(retry_after_seconds(bad, 0), std::nullopt) << bad;
  }
}

TEST(RetryAfter, ImfFixdate) {
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", kExample - 30), 30u);
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", kExample), std::nullopt);
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", kExample + 1), std::nullopt);
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", 0), kMaxProviderBackoffSeconds);
  // A leap day, and the day after the end of a month.
  EXPECT_EQ(retry_after_seconds("Thu, 29 Feb 2024 00:00:10 GMT", 1709164800), 10u);
  EXPECT_EQ(retry_after_seconds("Fri, 29 Feb 2023 00:00:10 GMT", 0), std::nullopt);
  for (std::string_view bad : {
           "Mon, 06 Nov 1994 08:49:37 GMT",   // the wrong day name for the date
           "Sun, 06 Nov 1994 08:49:37 gmt",   // GMT is case-sensitive
           "Sun, 06 Nov 1994 08:49:37 UTC",   //
           "Sun, 6 Nov 1994 08:49:37 GMT",    // 2DIGIT day
           "Sun, 06 nov 1994 08:49:37 GMT",   //
           "Sun, 31 Nov 1994 08:49:37 GMT",   // no such day
           "Sun, 06 Nov 1994 24:00:00 GMT",   //
           "Sun, 06 Nov 1994 08:60:00 GMT",   //
           "Sunday, 06-Nov-94 08:49:37 GMT",  // rfc850-date: obsolete, not taken
           "Sun Nov  6 08:49:37 1994",        // asctime-date: likewise
           "Sun, 06 Nov 1994 08:49:37 GMT ",  //
           "Sun, 06 Nov 1994 08:4a:37 GMT",   //
       }) {
    EXPECT_EQ(retry_after_seconds(bad, 0), std::nullopt) << bad;
  }
}

TEST(ProviderBackoff, OnlyA429Or503WithRetryAfterStartsIt) {
  ProviderBackoff b;
  const base::MonoTime t0{};
  EXPECT_EQ(b.on_response(200, "17", t0, 0), std::nullopt);
  EXPECT_EQ(b.on_response(500, "17", t0, 0), std::nullopt);
  EXPECT_EQ(b.on_response(429, "", t0, 0), std::nullopt);
  EXPECT_EQ(b.on_response(429, "soon", t0, 0), std::nullopt);
  EXPECT_EQ(b.seconds_left(t0), std::nullopt);
  EXPECT_EQ(b.on_response(503, "5", t0, 0), 5u);
  EXPECT_EQ(b.seconds_left(t0), 5u);
}

TEST(ProviderBackoff, HoldsUntilThenAndRoundsUp) {
  ProviderBackoff b;
  const base::MonoTime t0{};
  ASSERT_EQ(b.on_response(429, "17", t0, 0), 17u);
  EXPECT_EQ(b.seconds_left(t0 + base::Millis(1)), 17u);
  EXPECT_EQ(b.seconds_left(t0 + base::Millis(16001)), 1u);
  EXPECT_EQ(b.seconds_left(t0 + base::Millis(16999)), 1u);
  EXPECT_EQ(b.seconds_left(t0 + base::Seconds(17)), std::nullopt);
  EXPECT_EQ(b.seconds_left(t0 + base::Seconds(100)), std::nullopt);
}

TEST(ProviderBackoff, ExtendedNeverShortened) {
  ProviderBackoff b;
  const base::MonoTime t0{};
  ASSERT_EQ(b.on_response(429, "60", t0, 0), 60u);
  EXPECT_EQ(b.on_response(429, "10", t0 + base::Seconds(1), 0), std::nullopt);
  EXPECT_EQ(b.seconds_left(t0 + base::Seconds(1)), 59u);
  EXPECT_EQ(b.on_response(429, "120", t0 + base::Seconds(2), 0), 120u);
  EXPECT_EQ(b.seconds_left(t0 + base::Seconds(2)), 120u);
}

TEST(ProviderBackoff, NeverLongerThanTheCap) {
  ProviderBackoff b;
  const base::MonoTime t0{};
  EXPECT_EQ(b.on_response(429, "99999999999999999999", t0, 0), kMaxProviderBackoffSeconds);
  EXPECT_EQ(b.seconds_left(t0 + base::Seconds(kMaxProviderBackoffSeconds)), std::nullopt);
}

}  // namespace
}  // namespace abox::broker
