// `abox broker`, `abox broker ca` and `abox broker nonces` as a user meets
// them: what they say when the state folder or the policy is not what the
// user thinks, and one-line usage errors.
#include "engine/cli/broker_command.h"

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

Run broker(std::vector<std::string_view> args) {
  std::ostringstream out, err;
  Run r;
  r.code = run_broker_command(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

class BrokerCommand : public ::testing::Test {
 protected:
  abox::testing::TempDir dir_{"abox-broker-cli-test"};
  std::string state_ = dir_.file("state");
};

TEST_F(BrokerCommand, CaOfAnotherInstanceSaysWhichInstanceTheFolderIsFor) {
  auto made = broker({"ca", "--state", state_, "--instance", "dev"});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_TRUE(made.out.starts_with("-----BEGIN CERTIFICATE-----"));
  auto again = broker({"ca", "--state=" + state_, "--instance=dev"});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, made.out);
  auto other = broker({"ca", "-s", state_, "--instance", "other"});
  EXPECT_EQ(other.code, 3);
  EXPECT_EQ(other.out, "");
  EXPECT_NE(other.err.find(state_ + " belongs to instance 'dev', not 'other'"), std::string::npos)
      << other.err;
}

TEST_F(BrokerCommand, NoncesOnAPolicyWithoutBindingsSaysSo) {
  const std::string policy = dir_.file("p.toml");
  std::ofstream(policy) << "[[allow]]\nnames = [\"github.com\"]\nports = [443]\n";
  auto r = broker({"nonces", "--policy", policy, "--state", state_});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(policy + " has no [[broker]] bindings, so the guest gets no nonces"),
            std::string::npos)
      << r.err;
  auto j = broker({"nonces", "-p", policy, "-s", state_, "--json"});
  EXPECT_EQ(j.out, "{\"nonces\":[]}\n");
  EXPECT_NE(j.err.find("no [[broker]] bindings"), std::string::npos);
}

TEST_F(BrokerCommand, APolicyThatCannotBeReadSaysWhy) {
  const std::string missing = dir_.file("missing.toml");
  auto r = broker({"-p", missing, "-c", dir_.file("c.toml"), "-s", state_, "-l", "127.0.0.1:0"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err,
            "abox broker: " + missing +
                ": cannot open the policy file: No such file or directory\nthe policy cannot be read\n");
  auto n = broker({"nonces", "-p", missing, "-s", state_});
  EXPECT_EQ(n.code, 3);
  EXPECT_NE(n.err.find(missing + ": cannot be read"), std::string::npos) << n.err;
}

TEST_F(BrokerCommand, UsageErrorsAreOneLine) {
  auto r = broker({"--policy", "p.toml", "--credentials", "c.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "abox broker: missing --state, --listen (see 'abox broker --help')\n");
  auto ca = broker({"ca", "--policy", "p.toml"});
  EXPECT_EQ(ca.code, 2);
  EXPECT_EQ(ca.err, "abox broker ca: unknown option '--policy' (see 'abox broker ca --help')\n");
  auto n = broker({"nonces", "--state", state_, "extra"});
  EXPECT_EQ(n.code, 2);
  EXPECT_EQ(n.err, "abox broker nonces: unexpected argument 'extra' (see 'abox broker nonces --help')\n");
  auto both =
      broker({"-p", "p.toml", "-c", "c.toml", "--credentials-fd", "3", "-s", state_, "-l", "127.0.0.1:0"});
  EXPECT_EQ(both.code, 2);
  EXPECT_EQ(
      both.err,
      "abox broker: give the keys with one of --credentials FILE and --credentials-fd N (see 'abox broker "
      "--help')\n");
  auto none = broker({"-p", "p.toml", "-s", state_, "-l", "127.0.0.1:0"});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err, both.err);
  for (std::string_view bad : {"x", "1", "-3", "3x", "999"}) {
    auto fd =
        broker({"-p", "p.toml", "--credentials-fd", std::string(bad), "-s", state_, "-l", "127.0.0.1:0"});
    EXPECT_EQ(fd.code, 2) << bad;
    EXPECT_NE(fd.err.find("not an open fd of 3 or more"), std::string::npos) << fd.err;
  }
  auto h = broker({"ca", "--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_TRUE(h.out.starts_with("usage: abox broker ca"));
}

}  // namespace
}  // namespace abox::engine
