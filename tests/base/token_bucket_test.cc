#include "base/token_bucket.h"

#include <gtest/gtest.h>

namespace abox::base {
namespace {

using std::chrono::milliseconds;

const base::MonoTime kStart = base::MonoTime{} + std::chrono::hours(1);

TEST(TokenBucket, BurstThenOnePerInterval) {
  TokenBucket b(10, 3);  // one every 100 ms
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.take(kStart));
  EXPECT_FALSE(b.take(kStart));
  EXPECT_FALSE(b.take(kStart + milliseconds(99)));
  EXPECT_TRUE(b.take(kStart + milliseconds(100)));
  EXPECT_FALSE(b.take(kStart + milliseconds(150)));
  // The 50 ms past the last whole token count toward the next one.
  EXPECT_TRUE(b.take(kStart + milliseconds(200)));
}

TEST(TokenBucket, RefillsToBurstAndNoFurther) {
  TokenBucket b(10, 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.take(kStart));
  // An hour idle earns 3, not 36000.
  const base::MonoTime later = kStart + std::chrono::hours(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.take(later));
  EXPECT_FALSE(b.take(later));
}

TEST(TokenBucket, TimeFullEarnsNothing) {
  TokenBucket b(1, 2);
  EXPECT_TRUE(b.take(kStart));                      // 1 left
  EXPECT_TRUE(b.take(kStart + milliseconds(999)));  // 0 left: 999 ms earned no whole token
  EXPECT_FALSE(b.take(kStart + milliseconds(999)));
  EXPECT_TRUE(b.take(kStart + milliseconds(1000)));
}

TEST(TokenBucket, ClockGoingBackEarnsNothing) {
  TokenBucket b(10, 1);
  EXPECT_TRUE(b.take(kStart));
  EXPECT_FALSE(b.take(kStart - std::chrono::seconds(5)));
  EXPECT_FALSE(b.take(kStart + milliseconds(50)));
  EXPECT_TRUE(b.take(kStart + milliseconds(100)));
}

TEST(TokenBucket, ZeroRatesAreRaisedToOne) {
  TokenBucket b(0, 0);
  EXPECT_TRUE(b.take(kStart));
  EXPECT_FALSE(b.take(kStart + milliseconds(500)));
  EXPECT_TRUE(b.take(kStart + std::chrono::seconds(1)));
}

}  // namespace
}  // namespace abox::base
