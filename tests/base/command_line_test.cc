// The command-line parser every abox and abox-net command shares
// (base/command_line.h).
#include "base/command_line.h"

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace abox::base {
namespace {

constexpr OptionSpec kSpecs[] = {
    {"policy", 'p', true}, {"env", 'e', true}, {"json", 0, false}, {"interactive", 'i', false}};

base::Result<ParsedArgs, std::string> parse(std::vector<std::string_view> args, bool stop = true) {
  return parse_options(args, kSpecs, stop);
}

TEST(Options, LongShortAndInlineSpellings) {
  auto p =
      parse({"--policy", "a.toml", "--env=A=1", "-e", "B=2", "-eC=3", "-i", "--json", "--", "sh", "-c", "x"});
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->last("policy"), "a.toml");
  EXPECT_EQ(p->all("env"), (std::vector<std::string>{"A=1", "B=2", "C=3"}));
  EXPECT_TRUE(p->has("interactive"));
  EXPECT_TRUE(p->has("json"));
  EXPECT_EQ(p->positionals, (std::vector<std::string>{"sh", "-c", "x"}));
}

TEST(Options, TheFirstNonOptionStartsTheCommandWhenAsked) {
  auto p = parse({"-p", "a.toml", "echo", "--json"});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has("json"));  // it belongs to echo
  EXPECT_EQ(p->positionals, (std::vector<std::string>{"echo", "--json"}));
  auto q = parse({"ls", "--json"}, false);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->has("json"));
  EXPECT_EQ(q->positionals, (std::vector<std::string>{"ls"}));
}

TEST(Options, MistakesAreOneLine) {
  EXPECT_EQ(parse({"--nope"}).error(), "unknown option '--nope'");
  EXPECT_EQ(parse({"-x"}).error(), "unknown option '-x'");
  EXPECT_EQ(parse({"--policy"}).error(), "--policy needs a value");
  EXPECT_EQ(parse({"--json=yes"}).error(), "--json takes no value");
  EXPECT_EQ(parse({"-ix"}).error(), "unknown option '-ix'");
  EXPECT_TRUE(parse({"-h"})->help);
  EXPECT_TRUE(parse({"-p", "x", "--help", "--nope"})->help);
}

TEST(Options, AValueMayLookLikeAnOption) {
  auto p = parse({"--env", "--weird=1", "--", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->last("env"), "--weird=1");
}

TEST(Options, ReadingAnUndeclaredOptionIsAProgrammingError) {
  // The way --tty, --copy-in, --disk and --idle-timeout were once read by
  // abox run and refused as unknown: the parser's table lacked them.
  static constexpr OptionSpec kJsonOnly[] = {{"json", 0, false}};
  std::vector<std::string_view> args{"--json"};
  auto parsed = parse_options(args, kJsonOnly, false);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->has("json"));
  EXPECT_THROW((void)parsed->has("jsn"), std::logic_error);
  EXPECT_THROW((void)parsed->last("tty"), std::logic_error);
  EXPECT_THROW((void)parsed->all("copy-in"), std::logic_error);
}

TEST(Options, DashDashEndsTheOptionsWhateverFollows) {
  auto p = parse({"-p", "a.toml", "--", "--help", "-x"}, false);
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_FALSE(p->help);
  EXPECT_TRUE(p->dash_dash);
  EXPECT_EQ(p->positionals, (std::vector<std::string>{"--help", "-x"}));
  auto q = parse({"-p", "a.toml", "sh"});
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->dash_dash);
}

TEST(Options, AnInlineValueMayBeEmptyOrHoldEqualsSigns) {
  auto p = parse({"--policy=", "--env=A=B=C"});
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->last("policy"), "");
  EXPECT_EQ(p->last("env"), "A=B=C");
  EXPECT_EQ(parse({"--=x"}).error(), "unknown option '--'");
}

TEST(Options, AUsageErrorIsOneLineThatSaysWhereToReadMore) {
  EXPECT_EQ(usage_error_line("abox-net run", "unknown option '--x'"),
            "abox-net run: unknown option '--x' (see 'abox-net run --help')\n");
}

}  // namespace
TEST(StartCommand, AMistakePrintsTheUsageErrorLineAndExitsTwo) {
  std::ostringstream out, err;
  const std::string_view args[] = {"--nope"};
  auto r = start_command("abox-net stats", "usage: abox-net stats PATH\n", args, {}, out, err);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), 2);
  EXPECT_EQ(err.str(), "abox-net stats: unknown option '--nope' (see 'abox-net stats --help')\n");
  EXPECT_EQ(out.str(), "");
}

TEST(StartCommand, HelpPrintsTheUsageAndExitsZero) {
  std::ostringstream out, err;
  const std::string_view args[] = {"PATH", "--help"};
  auto r = start_command("abox-net stats", "usage: abox-net stats PATH\n", args, {}, out, err);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), 0);
  EXPECT_EQ(out.str(), "usage: abox-net stats PATH\n");
  EXPECT_EQ(err.str(), "");
}

TEST(StartCommand, OtherwiseHandsBackWhatWasParsed) {
  std::ostringstream out, err;
  static constexpr OptionSpec kSpecs[] = {{"json", 'j', false}};
  const std::string_view args[] = {"-j", "PATH"};
  auto r = start_command("abox-net stats", "usage\n", args, kSpecs, out, err);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->has("json"));
  EXPECT_EQ(r->positionals, std::vector<std::string>{"PATH"});
  EXPECT_EQ(out.str() + err.str(), "");
}

}  // namespace abox::base
