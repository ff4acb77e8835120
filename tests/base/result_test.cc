#include "base/result.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace abox::base {
namespace {

enum class TestError { kNone, kTooShort, kBadValue };

Result<int, TestError> parse_digit(char c) {
  if (c < '0' || c > '9') return Err{TestError::kBadValue};
  return c - '0';
}

Result<void, TestError> check(bool good) {
  if (!good) return Err{TestError::kTooShort};
  return {};
}

Result<std::unique_ptr<int>, TestError> make_box(int v) {
  if (v < 0) return Err{TestError::kBadValue};
  return std::make_unique<int>(v);
}

TEST(ResultTest, HoldsValue) {
  auto r = parse_digit('7');
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(*r, 7);
  r.value() = 8;
  EXPECT_EQ(*r, 8);
}

TEST(ResultTest, HoldsError) {
  auto r = parse_digit('x');
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error(), TestError::kBadValue);
}

// T and E of the same type: Err picks the side, not the type.
TEST(ResultTest, SameTypeForValueAndError) {
  Result<int, int> value = 3;
  Result<int, int> error = Err{3};
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value.value(), 3);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error(), 3);
}

TEST(ResultTest, ErrConvertsToTheErrorType) {
  Result<int, std::string> r = Err{"too short"};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "too short");
}

TEST(ResultTest, ArrowAndConst) {
  const Result<std::string, TestError> r = std::string("abc");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(*r, "abc");
  EXPECT_EQ(r.value(), "abc");
  static_assert(std::is_same_v<decltype(r.value()), const std::string&>);
}

TEST(ResultTest, ValueOr) {
  EXPECT_EQ(parse_digit('4').value_or(-1), 4);
  EXPECT_EQ(parse_digit('?').value_or(-1), -1);
  const Result<std::string, TestError> bad = Err{TestError::kTooShort};
  EXPECT_EQ(bad.value_or("fallback"), "fallback");
  const Result<std::string, TestError> good = std::string("real");
  EXPECT_EQ(good.value_or("fallback"), "real");
}

TEST(ResultTest, VoidSuccessAndError) {
  auto good = check(true);
  EXPECT_TRUE(good.ok());
  EXPECT_TRUE(static_cast<bool>(good));
  auto bad = check(false);
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(bad.error(), TestError::kTooShort);

  Result<void, TestError> fresh;
  EXPECT_TRUE(fresh.ok());
}

// An error equal to the default E (0) is still an error.
TEST(ResultTest, VoidErrorWithDefaultValueIsStillAnError) {
  Result<void, TestError> r = Err{TestError::kNone};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), TestError::kNone);
}

TEST(ResultTest, MoveOnlyValue) {
  static_assert(!std::is_copy_constructible_v<Result<std::unique_ptr<int>, TestError>>);
  static_assert(std::is_move_constructible_v<Result<std::unique_ptr<int>, TestError>>);

  auto r = make_box(5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, 5);
  EXPECT_EQ(*r.value(), 5);

  // Moving the value out leaves the Result holding a moved-from (null) pointer.
  std::unique_ptr<int> owned = std::move(r).value();
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*owned, 5);
  EXPECT_TRUE(r.ok());  // NOLINT(bugprone-use-after-move): state is specified
  EXPECT_EQ(r.value(), nullptr);

  auto moved = make_box(9);
  auto target = std::move(moved);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(**target, 9);

  auto bad = make_box(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), TestError::kBadValue);
}

TEST(ResultTest, MoveOnlyError) {
  Result<int, std::unique_ptr<std::string>> r = Err{std::make_unique<std::string>("why")};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(*r.error(), "why");
  std::unique_ptr<std::string> why = std::move(r).error();
  ASSERT_NE(why, nullptr);
  EXPECT_EQ(*why, "why");
}

TEST(ResultTest, CopyKeepsSide) {
  Result<std::string, TestError> a = std::string("x");
  Result<std::string, TestError> b = a;  // copy, not the converting constructor
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "x");
  EXPECT_EQ(*a, "x");

  Result<std::string, TestError> e = Err{TestError::kTooShort};
  Result<std::string, TestError> f = e;
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error(), TestError::kTooShort);
}

using ResultDeathTest = ::testing::Test;

TEST_F(ResultDeathTest, ValueOnErrorAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto r = parse_digit('x');
  EXPECT_DEATH((void)r.value(), "value\\(\\) on an error");
  EXPECT_DEATH((void)*r, "value\\(\\) on an error");
  const auto& cr = r;
  EXPECT_DEATH((void)cr.value(), "value\\(\\) on an error");
  EXPECT_DEATH((void)std::move(r).value(), "value\\(\\) on an error");
}

TEST_F(ResultDeathTest, ErrorOnValueAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto r = parse_digit('1');
  EXPECT_DEATH((void)r.error(), "error\\(\\) on a value");
  auto ok = check(true);
  EXPECT_DEATH((void)ok.error(), "error\\(\\) on a success");
}

}  // namespace
}  // namespace abox::base
