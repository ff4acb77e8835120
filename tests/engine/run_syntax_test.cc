// The duration and size syntax of abox run (engine/cli/run_command.h).
#include <gtest/gtest.h>

#include "engine/cli/run_command.h"

namespace abox::engine {
namespace {

TEST(RunSyntax, Durations) {
  EXPECT_EQ(parse_duration("30s"), std::chrono::milliseconds(30000));
  EXPECT_EQ(parse_duration("2"), std::chrono::milliseconds(2000));
  EXPECT_EQ(parse_duration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(parse_duration("5m"), std::chrono::milliseconds(300000));
  EXPECT_EQ(parse_duration("1h"), std::chrono::milliseconds(3600000));
  for (auto bad : {"", "0", "s", "1d", "-1s", "1.5s", "10 s"}) EXPECT_FALSE(parse_duration(bad)) << bad;
}

TEST(RunSyntax, Sizes) {
  EXPECT_EQ(parse_mebibytes("512"), 512u);
  EXPECT_EQ(parse_mebibytes("512M"), 512u);
  EXPECT_EQ(parse_mebibytes("2G"), 2048u);
  for (auto bad : {"", "0", "1T", "M", "-5", "1.5G"}) EXPECT_FALSE(parse_mebibytes(bad)) << bad;
}

}  // namespace
}  // namespace abox::engine
