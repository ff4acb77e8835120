#include "base/decimal.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace abox::base {
namespace {

TEST(Decimal, ReadsTheWholeTextAsDigits) {
  EXPECT_EQ(parse_decimal<std::uint32_t>("0"), 0u);
  EXPECT_EQ(parse_decimal<std::uint32_t>("4294967295"), 4294967295u);
  EXPECT_EQ(parse_decimal<std::uint64_t>("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_decimal<std::uint16_t>("007"), 7u);
}

TEST(Decimal, RefusesAnythingButDigits) {
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "0x10", "1e3", "1.0", "12a", "a12", "1_000"}) {
    EXPECT_FALSE(parse_decimal<std::uint32_t>(bad)) << bad;
  }
  // A NUL inside is a byte like any other, not an end.
  EXPECT_FALSE(
      parse_decimal<std::uint32_t>(std::string("12\0"
                                               "3",
                                               4)));
}

TEST(Decimal, RefusesAValuePastTheTypeInsteadOfWrapping) {
  EXPECT_FALSE(parse_decimal<std::uint32_t>("4294967296"));
  EXPECT_FALSE(parse_decimal<std::uint64_t>("18446744073709551616"));
  EXPECT_FALSE(parse_decimal<std::uint8_t>("256"));
  EXPECT_FALSE(parse_decimal<std::uint64_t>(std::string(400, '9')));
}

TEST(Decimal, LeadingZerosWhenTheCallerRefusesThem) {
  EXPECT_EQ(parse_decimal<unsigned>("0", LeadingZeros::refused), 0u);
  EXPECT_EQ(parse_decimal<unsigned>("10", LeadingZeros::refused), 10u);
  EXPECT_FALSE(parse_decimal<unsigned>("01", LeadingZeros::refused));
  EXPECT_FALSE(parse_decimal<unsigned>("00", LeadingZeros::refused));
}

TEST(Decimal, InRangeChecksBothEnds) {
  EXPECT_FALSE(parse_decimal_in<unsigned>("575", 576, 65520));
  EXPECT_EQ(parse_decimal_in<unsigned>("576", 576, 65520), 576u);
  EXPECT_EQ(parse_decimal_in<unsigned>("65520", 576, 65520), 65520u);
  EXPECT_FALSE(parse_decimal_in<unsigned>("65521", 576, 65520));
}

TEST(Decimal, Ports) {
  EXPECT_FALSE(parse_port("0"));
  EXPECT_EQ(parse_port("1"), 1u);
  EXPECT_EQ(parse_port("65535"), 65535u);
  EXPECT_FALSE(parse_port("65536"));
  EXPECT_FALSE(parse_port("4294967297"));  // would wrap to 1 in 32 bits
  EXPECT_EQ(parse_port("0443"), 443u);
  EXPECT_FALSE(parse_port("0443", LeadingZeros::refused));
}

TEST(Decimal, Hex) {
  EXPECT_EQ(parse_hex<std::uint8_t>("ff"), 0xFFu);
  EXPECT_EQ(parse_hex<std::uint8_t>("A0"), 0xA0u);
  EXPECT_FALSE(parse_hex<std::uint8_t>("100"));
  EXPECT_FALSE(parse_hex<std::uint32_t>("0x10"));
  EXPECT_FALSE(parse_hex<std::uint32_t>(""));
  EXPECT_FALSE(parse_hex<std::uint32_t>("g"));
}

}  // namespace
}  // namespace abox::base
