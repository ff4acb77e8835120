// The duration and size syntax of abox run (engine/cli/run_command.h).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

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

// --publish: checked here (policy/publish_spec.h), passed on to abox-net in
// its canonical spelling, the address always written out.
std::string publish_config(std::vector<std::string_view> args, InstanceConfig& c) {
  args.insert(args.begin(), {"--policy", "p.toml"});
  args.push_back("true");
  auto parsed = parse_options(args, run_options(), /*stop_at_positional=*/true);
  EXPECT_TRUE(parsed.ok());
  return parsed.ok() ? run_config_from_args(*parsed, c, /*local_terminal=*/false) : parsed.error();
}

TEST(RunSyntax, PublishedPortsArePassedOnCanonical) {
  InstanceConfig c;
  EXPECT_EQ(publish_config(
                {"--publish", "8080:80", "--publish", "[::1]:5353:53/udp", "--publish=0.0.0.0:9000:90"}, c),
            "");
  EXPECT_EQ(c.publish,
            (std::vector<std::string>{"127.0.0.1:8080:80", "[::1]:5353:53/udp", "0.0.0.0:9000:90"}));
}

TEST(RunSyntax, BadOrClashingPublishedPortsAreUsageErrors) {
  for (auto bad : {"0:80", "8080:", "localhost:8080:80", "8080:80/sctp", "8080:70000"}) {
    InstanceConfig c;
    EXPECT_EQ(publish_config({"--publish", bad}, c).rfind("--publish ", 0), 0u) << bad;
  }
  InstanceConfig c;
  const std::string clash = publish_config({"--publish", "8080:80", "--publish", "0.0.0.0:8080:81"}, c);
  EXPECT_NE(clash.find("already published"), std::string::npos) << clash;
}

}  // namespace
}  // namespace abox::engine
