#include "broker/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "policy/policy_file.h"
#include "tests/support/temp_dir.h"

namespace abox::broker {
namespace {

policy::Policy make_policy() {
  auto p = policy::parse_policy(R"(
[[broker]]
name = "api.example.test"
credential = "provider"
header = "x-api-key"
nonce_env = "PROVIDER_API_KEY"

[[broker]]
name = "other.example.test"
credential = "other"
header = "authorization"
nonce_env = "OTHER_API_KEY"
)",
                                "test.toml");
  EXPECT_TRUE(p.ok());
  return std::move(p).value();
}

class CredentialsFile : public ::testing::Test {
 protected:
  void write(std::string_view text, mode_t mode) {
    { std::ofstream(path_) << text; }
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
  }
  abox::testing::TempDir dir_{"abox-creds-test"};
  std::string path_ = dir_.file("credentials.toml");
};

constexpr std::string_view kGood =
    "[credentials]\nprovider = \"sk-one\"\nother = \"sk-two\"\nunused = \"x\"\n";

TEST_F(CredentialsFile, LoadsKeysInBindingOrder) {
  auto policy = make_policy();
  write(kGood, 0600);
  auto c = Credentials::load(path_, policy);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->key_for(0), "sk-one");
  EXPECT_EQ(c->key_for(1), "sk-two");
  EXPECT_EQ(c->all_keys().size(), 2u);
}

TEST_F(CredentialsFile, RefusesGroupOrOtherAccess) {
  auto policy = make_policy();
  for (mode_t mode : {0640, 0604, 0660, 0620, 0602}) {
    write(kGood, mode);
    auto c = Credentials::load(path_, policy);
    ASSERT_FALSE(c.ok()) << mode;
    EXPECT_NE(c.error().find("chmod 600"), std::string::npos) << c.error();
    // The message names the file but never a key.
    EXPECT_EQ(c.error().find("sk-one"), std::string::npos);
  }
  write(kGood, 0400);
  EXPECT_TRUE(Credentials::load(path_, policy).ok());
}

TEST_F(CredentialsFile, RefusesSymlinksAndNonFiles) {
  auto policy = make_policy();
  write(kGood, 0600);
  std::string link = dir_.file("link.toml");
  ASSERT_EQ(::symlink(path_.c_str(), link.c_str()), 0);
  auto c = Credentials::load(link, policy);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("symlink"), std::string::npos) << c.error();
  auto d = Credentials::load(dir_.path(), policy);
  ASSERT_FALSE(d.ok());
  EXPECT_FALSE(Credentials::load(dir_.file("missing.toml"), policy).ok());
}

TEST(Credentials, MissingCredentialIsNamed) {
  auto policy = make_policy();
  auto c = Credentials::parse("[credentials]\nprovider = \"sk-one\"\n", "c.toml", policy);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("'other'"), std::string::npos) << c.error();
}

TEST(Credentials, KeysThatCannotGoInAHeaderAreRefused) {
  auto policy = make_policy();
  for (std::string_view bad : {R"("")", R"("sk one")", R"("sk\r\nx-injected: 1")", R"("sk\u0000")",
                               R"("ключ")", R"("sk-*-masked")"}) {
    std::string text = "[credentials]\nprovider = " + std::string(bad) + "\nother = \"ok\"\n";
    auto c = Credentials::parse(text, "c.toml", policy);
    EXPECT_FALSE(c.ok()) << bad;
  }
  EXPECT_FALSE(Credentials::parse("[credentials]\nprovider = 5\nother = \"ok\"\n", "c.toml", policy).ok());
  EXPECT_FALSE(Credentials::parse("[other]\nprovider = \"a\"\n", "c.toml", policy).ok());
  EXPECT_FALSE(Credentials::parse("not toml = = \n", "c.toml", policy).ok());
}

}  // namespace
}  // namespace abox::broker
