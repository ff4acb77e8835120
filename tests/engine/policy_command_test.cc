// `abox policy check` and `abox policy explain` as a script sees them: the
// exit codes of docs/cli.md, the JSON, and one-line usage errors.
#include "engine/cli/policy_command.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

Run policy(std::vector<std::string_view> args) {
  std::ostringstream out, err;
  Run r;
  r.code = run_policy_command(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

class PolicyCommand : public ::testing::Test {
 protected:
  std::string write(std::string_view name, std::string_view text) {
    std::string path = dir_.file(name);
    std::ofstream(path) << text;
    return path;
  }
  abox::testing::TempDir dir_{"abox-policy-cli-test"};
};

constexpr std::string_view kTcp443 = "[[allow]]\nnames = [\"github.com\"]\nports = [443]\n";

TEST_F(PolicyCommand, ExplainAnAddressOnAPortNoRuleAllowsIsRefused) {
  auto p = write("p.toml", kTcp443);
  auto r = policy({"explain", p, "140.82.112.3:9999"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("140.82.112.3:9999/tcp: refused: no rule allows 9999/tcp"), std::string::npos)
      << r.out;
  auto j = policy({"explain", "--json", p, "140.82.112.3:9999"});
  EXPECT_EQ(j.code, 1);
  EXPECT_NE(j.out.find("\"verdict\":\"refused\",\"allowed\":false"), std::string::npos) << j.out;
  // UDP to 53 on a TCP-only policy.
  auto u = policy({"explain", "--udp", p, "140.82.112.3:53"});
  EXPECT_EQ(u.code, 1) << u.out;
  EXPECT_NE(u.out.find("refused"), std::string::npos);
}

// --icmp: echo to a name or an address, never with a port.
TEST_F(PolicyCommand, ExplainIcmpTakesNoPort) {
  auto p = write("p.toml",
                 std::string(kTcp443) + "[[allow]]\nnames = [\"ping.example\"]\nprotocols = [\"icmp\"]\n");
  auto yes = policy({"explain", "--icmp", p, "ping.example"});
  EXPECT_EQ(yes.code, 0) << yes.out << yes.err;
  EXPECT_NE(yes.out.find("allows icmp echo"), std::string::npos) << yes.out;
  EXPECT_EQ(policy({"explain", "--icmp", p, "github.com"}).code, 1);
  auto j = policy({"explain", "--json", "--icmp", p, "140.82.112.3"});
  EXPECT_EQ(j.code, 4) << j.out;
  EXPECT_NE(j.out.find("\"protocol\":\"icmp\""), std::string::npos) << j.out;
  auto port = policy({"explain", "--icmp", p, "ping.example:443"});
  EXPECT_EQ(port.code, 2);
  EXPECT_NE(port.err.find("--icmp takes NAME or ADDRESS without a port"), std::string::npos) << port.err;
}

// "Needs an answer" is its own exit code (4), and allowed:false.
TEST_F(PolicyCommand, ExplainAnswerRequiredDoesNotReadAsAllowed) {
  auto p = write("p.toml", kTcp443);
  for (auto target : {"140.82.112.3:443", "140.82.112.3"}) {
    auto r = policy({"explain", "--json", p, target});
    EXPECT_EQ(r.code, 4) << target << ": " << r.out;
    EXPECT_NE(r.out.find("\"verdict\":\"answer-required\",\"allowed\":false"), std::string::npos) << r.out;
  }
  EXPECT_EQ(policy({"explain", p, "github.com:443"}).code, 0);
  EXPECT_EQ(policy({"explain", p, "github.com"}).code, 0);  // resolvable
  EXPECT_EQ(policy({"explain", p, "github.com:80"}).code, 1);
}

// docs/cli.md: 3 for a file that cannot be read, with the errno, and no
// advice to run `check` (which would only say the same).
TEST_F(PolicyCommand, AFileThatCannotBeReadIsExit3WithTheReason) {
  const std::string missing = dir_.file("missing.toml");
  auto c = policy({"check", missing});
  EXPECT_EQ(c.code, 3);
  EXPECT_EQ(c.err, missing + ": cannot open the policy file: No such file or directory\n" + missing +
                       ": cannot be read\n");
  auto d = policy({"check", dir_.path()});
  EXPECT_EQ(d.code, 3);
  EXPECT_NE(d.err.find("it is a folder"), std::string::npos) << d.err;
  auto e = policy({"explain", missing, "github.com:443"});
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.err, missing + ": cannot open the policy file: No such file or directory\n");
  // An invalid file is still 1 for check.
  auto bad = write("bad.toml", "[[allow]]\nnames = [\"a.com\"]\nports = [0]\n");
  EXPECT_EQ(policy({"check", bad}).code, 1);
  // One unreadable among valid ones: 3.
  auto good = write("good.toml", kTcp443);
  EXPECT_EQ(policy({"check", good, missing}).code, 3);
}

TEST_F(PolicyCommand, CheckJsonSaysWhenAProblemHasNoLine) {
  auto empty = write("empty.toml", "# nothing\n");
  auto j = policy({"check", "--json", empty, dir_.file("missing.toml")});
  EXPECT_EQ(j.code, 3);
  EXPECT_NE(j.out.find("\"errors\":[{\"file_level\":true,\"message\":\"the policy allows nothing"),
            std::string::npos)
      << j.out;
  EXPECT_NE(
      j.out.find("\"readable\":false,\"problems\":1,\"errors_omitted\":0,\"errors\":[{\"file_level\":true,"
                 "\"message\":\"cannot open the policy file: No such file or directory\"}]"),
      std::string::npos)
      << j.out;
  EXPECT_EQ(j.out.find("\"line\":0"), std::string::npos) << j.out;
}

TEST_F(PolicyCommand, CheckSaysWhenTheListWasCut) {
  std::string text = "[[allow]]\nports = [443]\nnames = [";
  for (int i = 0; i < 55; ++i) text += "\"bad..n" + std::to_string(i) + "\", ";
  text += "\"ok.example\"]\n";
  auto p = write("many.toml", text);
  auto r = policy({"check", p});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(p + ": 5 more problems not listed (only the first 50 are)\n" + p +
                       ": invalid (55 problems)"),
            std::string::npos)
      << r.err;
  auto j = policy({"check", "--json", p});
  EXPECT_NE(j.out.find("\"problems\":55,\"errors_omitted\":5"), std::string::npos);
}

TEST_F(PolicyCommand, UsageErrorsAreOneLine) {
  auto p = write("p.toml", kTcp443);
  auto r = policy({"check", "--bogus", p});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "abox policy check: unknown option '--bogus' (see 'abox policy check --help')\n");
  auto e = policy({"explain", p});
  EXPECT_EQ(e.code, 2);
  EXPECT_EQ(e.err, "abox policy explain: expected FILE and TARGET (see 'abox policy explain --help')\n");
  auto n = policy({"nope"});
  EXPECT_EQ(n.code, 2);
  EXPECT_EQ(n.err, "abox policy: unknown command 'nope' (see 'abox policy --help')\n");
  // --opt=value spellings and -- work too.
  EXPECT_EQ(policy({"check", "-q", "--", p}).code, 0);
  EXPECT_EQ(policy({"explain", "--json", "-u", p, "--", "github.com:443"}).code, 1);  // 443 is tcp only
}

}  // namespace
}  // namespace abox::engine
