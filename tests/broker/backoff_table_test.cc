// BackoffTable (broker/backoff_table.h): per binding, what starts, holds,
// extends and ends a provider backoff, the events and counters it leaves,
// and a binding with backoff = false. Time is driven by hand.
#include "broker/backoff_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/broker/broker_test_support.h"

namespace abox::broker {
namespace {

constexpr std::string_view kPolicy = R"(
[[broker]]
name = "api.example.test"
credential = "k"
header = "x-api-key"
nonce_env = "API_KEY"

[[broker]]
name = "free.example.test"
credential = "k"
header = "x-api-key"
nonce_env = "FREE_KEY"
backoff = false
)";

class BackoffTableTest : public ::testing::Test {
 protected:
  BackoffTableTest()
      : policy_(broker_test::load(kPolicy)),
        accounting_(policy_),
        events_("dev",
                [this](std::string_view line) {
                  lines_.emplace_back(line);
                  return true;
                }),
        table_(policy_, accounting_, events_, [this](base::MonoTime at) { scheduled_.push_back(at); }) {}

  base::MonoTime at(int seconds) const { return t0_ + base::Seconds(seconds); }
  std::string last_line() const { return lines_.empty() ? std::string() : lines_.back(); }

  policy::Policy policy_;
  Accounting accounting_;
  std::vector<std::string> lines_;
  base::EventLog events_;
  std::vector<base::MonoTime> scheduled_;
  BackoffTable table_;
  const base::MonoTime t0_{base::Seconds(1000)};
};

TEST_F(BackoffTableTest, A429WithRetryAfterHoldsTheBindingUntilThenAndThenEnds) {
  EXPECT_EQ(table_.held_back(0, at(0)), std::nullopt);
  table_.on_response(0, 429, "17", at(0), 0);
  EXPECT_TRUE(table_.active(0));
  ASSERT_EQ(scheduled_.size(), 1u);
  EXPECT_EQ(scheduled_[0], at(17));
  EXPECT_NE(last_line().find(R"("kind":"broker_backoff","binding":"api.example.test","port":443,)"
                             R"("event":"started","status":429,"retry_after":"17","seconds":17)"),
            std::string::npos)
      << last_line();
  EXPECT_EQ(table_.held_back(0, at(0)), 17u);
  EXPECT_EQ(table_.held_back(0, at(16)), 1u);
  EXPECT_EQ(accounting_.binding(0).backoff_answered, 2u);
  EXPECT_EQ(accounting_.binding(0).backoffs, 1u);
  EXPECT_TRUE(accounting_.binding(0).backoff_active);

  table_.expire(at(16));  // early: nothing ends
  EXPECT_TRUE(table_.active(0));
  table_.expire(at(17));
  EXPECT_FALSE(table_.active(0));
  EXPECT_FALSE(accounting_.binding(0).backoff_active);
  EXPECT_NE(last_line().find(R"("event":"ended","answered":2)"), std::string::npos) << last_line();
  EXPECT_EQ(table_.held_back(0, at(17)), std::nullopt);
  const auto lines = lines_.size();
  table_.expire(at(30));  // an extra call ends nothing twice
  EXPECT_EQ(lines_.size(), lines);
}

TEST_F(BackoffTableTest, A503WithAnHttpDateCountsToo) {
  // 1994-11-06 08:49:37 UTC, 30 s after "now".
  table_.on_response(0, 503, "Sun, 06 Nov 1994 08:49:37 GMT", at(0), 784111777 - 30);
  EXPECT_EQ(table_.held_back(0, at(0)), 30u);
}

TEST_F(BackoffTableTest, WhatStartsNothing) {
  table_.on_response(0, 200, "17", at(0), 0);
  table_.on_response(0, 500, "17", at(0), 0);
  table_.on_response(0, 429, "", at(0), 0);
  table_.on_response(0, 429, "later", at(0), 0);
  table_.on_response(0, 429, "0", at(0), 0);
  EXPECT_EQ(table_.held_back(0, at(0)), std::nullopt);
  EXPECT_TRUE(lines_.empty());
  EXPECT_TRUE(scheduled_.empty());
  EXPECT_EQ(accounting_.binding(0).backoffs, 0u);
}

TEST_F(BackoffTableTest, ALaterTimeExtendsAnEarlierOneDoesNot) {
  table_.on_response(0, 429, "10", at(0), 0);
  table_.on_response(0, 429, "5", at(2), 0);  // ends at 7, before 10: no change
  EXPECT_EQ(lines_.size(), 1u);
  table_.on_response(0, 429, "20", at(2), 0);  // ends at 22
  EXPECT_NE(last_line().find(R"("event":"extended")"), std::string::npos) << last_line();
  EXPECT_EQ(accounting_.binding(0).backoffs, 2u);
  table_.expire(at(10));  // the first end's timer: still held
  EXPECT_TRUE(table_.active(0));
  EXPECT_EQ(table_.held_back(0, at(21)), 1u);
  table_.expire(at(22));
  EXPECT_FALSE(table_.active(0));
}

TEST_F(BackoffTableTest, ABindingWithBackoffOffIsNeverHeld) {
  table_.on_response(1, 429, "17", at(0), 0);
  table_.on_response(1, 503, "17", at(0), 0);
  EXPECT_FALSE(table_.active(1));
  EXPECT_EQ(table_.held_back(1, at(1)), std::nullopt);
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(accounting_.binding(1).backoffs, 0u);
}

TEST_F(BackoffTableTest, BindingsAreHeldApart) {
  table_.on_response(0, 429, "17", at(0), 0);
  EXPECT_EQ(table_.held_back(1, at(1)), std::nullopt);
  EXPECT_EQ(accounting_.binding(1).backoff_answered, 0u);
}

TEST_F(BackoffTableTest, TheCapHoldsAgainstAHugeRetryAfter) {
  table_.on_response(0, 429, "99999999999999999999", at(0), 0);
  EXPECT_EQ(table_.held_back(0, at(0)), kMaxProviderBackoffSeconds);
  ASSERT_EQ(scheduled_.size(), 1u);
  EXPECT_EQ(scheduled_[0], at(static_cast<int>(kMaxProviderBackoffSeconds)));
}

TEST_F(BackoffTableTest, TheStatsCarryTheCounters) {
  table_.on_response(0, 429, "17", at(0), 0);
  (void)table_.held_back(0, at(1));
  const std::string json = accounting_.to_json("dev", 0, 0);
  EXPECT_NE(json.find(R"("backoff":true,"backoffs":1,"backoff_answered":1,"backoff_active":true)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("backoff":false,"backoffs":0,"backoff_answered":0,"backoff_active":false)"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace abox::broker
