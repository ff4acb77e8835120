// `abox policy apply` in-process (engine/cli/policy_apply.h) on an instance
// that is not running (its folder only: the reload of a running one is the
// e2e's, tests/e2e/policy_apply_e2e.py): validation first, the policy of
// record written only when valid, the exit codes, the diff it reports.
#include "engine/cli/policy_apply.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/instance/state_folder.h"
#include "policy/policy_file.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

constexpr std::string_view kOld = R"([[allow]]
names = ["a.example.test", "*.b.example.test"]
ports = [443]

[[broker]]
name = "api.example.test"
credential = "provider"
header = "x-api-key"
nonce_env = "PROVIDER_API_KEY"
)";

constexpr std::string_view kNew = R"([[allow]]
names = ["a.example.test", "c.example.test"]
ports = [443]
)";

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class PolicyApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("XDG_STATE_HOME", (dir_.path() + "/state").c_str(), 1);
    auto root = default_instances_root();
    ASSERT_TRUE(root.ok());
    auto folder = StateFolder::create(*root, "box1");
    ASSERT_TRUE(folder.ok()) << folder.error();
    record_ = folder->policy();
    ASSERT_TRUE(folder->write_file("policy.toml", kOld).ok());
  }
  void TearDown() override { ::unsetenv("XDG_STATE_HOME"); }

  std::string file(std::string_view name, std::string_view text) {
    std::string p = dir_.path() + "/" + std::string(name);
    std::ofstream(p) << text;
    return p;
  }
  int run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    std::vector<std::string_view> views(args.begin(), args.end());
    return run_policy_apply(views, out_, err_);
  }

  abox::testing::TempDir dir_{"abox-policy-apply"};
  std::string record_;
  std::ostringstream out_, err_;
};

TEST_F(PolicyApplyTest, AValidFileBecomesThePolicyOfRecordOfAStoppedInstance) {
  const std::string f = file("new.toml", kNew);
  ASSERT_EQ(run({"box1", f}), 0) << err_.str();
  EXPECT_EQ(read(record_), kNew);
  EXPECT_NE(out_.str().find("recorded " + f + " to box1 (not running"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("names allowed: c.example.test\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("names no longer allowed: *.b.example.test\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("bindings removed: api.example.test:443\n"), std::string::npos) << out_.str();
}

TEST_F(PolicyApplyTest, JsonSaysTheSame) {
  const std::string f = file("new.toml", kNew);
  ASSERT_EQ(run({"--json", "box1", f}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "{\"instance\":\"box1\",\"policy\":\"" + f +
                "\",\"running\":false,\"applied\":false,\"names_added\":[\"c.example.test\"],"
                "\"names_removed\":[\"*.b.example.test\"],\"bindings_added\":[],"
                "\"bindings_removed\":[\"api.example.test:443\"],\"network\":null,\"broker\":null}\n");
}

TEST_F(PolicyApplyTest, AnInvalidFileChangesNothingAndNamesLineAndColumn) {
  const std::string f = file("bad.toml", "[[allow]]\nnames = [\"a.example.test\"]\nports = [70000]\n");
  EXPECT_EQ(run({"box1", f}), 1);
  EXPECT_NE(err_.str().find(f + ":3:"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("nothing changed"), std::string::npos) << err_.str();
  EXPECT_EQ(read(record_), kOld);
}

TEST_F(PolicyApplyTest, ExitCodes) {
  const std::string f = file("new.toml", kNew);
  EXPECT_EQ(run({"box1"}), 2);
  EXPECT_NE(err_.str().find("NAME and FILE are required"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"box1", f, "extra"}), 2);
  EXPECT_EQ(run({"-bad", f}), 2);
  EXPECT_EQ(run({"--nope", "box1", f}), 2);
  EXPECT_EQ(run({"nobox", f}), 3);
  EXPECT_NE(err_.str().find("no instance 'nobox'"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"box1", dir_.path() + "/missing.toml"}), 3);
  EXPECT_EQ(run({"box1", dir_.path()}), 3) << "a folder is not a policy";
  EXPECT_EQ(read(record_), kOld);
  EXPECT_EQ(run({"--help"}), 0);
  EXPECT_NE(out_.str().find("usage: abox policy apply"), std::string::npos);
}

TEST(PolicyDiff, NamesAndBindingsAddedAndRemoved) {
  auto a = policy::parse_policy(kOld, "a.toml");
  auto b = policy::parse_policy(kNew, "b.toml");
  ASSERT_TRUE(a.ok() && b.ok());
  PolicyDiff d = diff_policies(*a, *b);
  EXPECT_EQ(d.names_added, (std::vector<std::string>{"c.example.test"}));
  EXPECT_EQ(d.names_removed, (std::vector<std::string>{"*.b.example.test"}));
  EXPECT_TRUE(d.bindings_added.empty());
  EXPECT_EQ(d.bindings_removed, (std::vector<std::string>{"api.example.test:443"}));
  PolicyDiff same = diff_policies(*a, *a);
  EXPECT_TRUE(same.names_added.empty() && same.names_removed.empty() && same.bindings_added.empty() &&
              same.bindings_removed.empty());
}

}  // namespace
}  // namespace abox::engine
