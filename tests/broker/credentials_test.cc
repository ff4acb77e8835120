#include "broker/credentials.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "base/unique_fd.h"
#include "broker/credential_file.h"
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

// The engine's side: only the names the policy's bindings use go to the
// broker, however many the store holds.
TEST(InstanceCredentials, TheTextHoldsOnlyTheBindingsKeys) {
  auto policy = make_policy();
  auto store = CredentialFile::parse(
      "[credentials]\nprovider = \"sk-one\"\nother = \"sk-two\"\nunused = \"sk-NOT-FOR-THIS-INSTANCE\"\n"
      "\"dotted.name\" = \"sk-also-not\"\n",
      "store.toml");
  ASSERT_TRUE(store.ok()) << store.error();
  auto text = Credentials::text_for_instance(*store, "store.toml", policy);
  ASSERT_TRUE(text.ok()) << text.error();
  EXPECT_EQ(*text, "[credentials]\nother = \"sk-two\"\nprovider = \"sk-one\"\n");
  EXPECT_EQ(text->find("NOT-FOR-THIS"), std::string::npos);
  // And the broker takes that text as it is, keys in binding order.
  auto c = Credentials::parse_instance_text(*text, policy);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->key_for(0), "sk-one");
  EXPECT_EQ(c->key_for(1), "sk-two");
}

TEST(InstanceCredentials, ANameBoundTwiceGoesOnceAndAMissingOneIsNamed) {
  auto twice = policy::parse_policy(R"(
[[broker]]
name = "a.example.test"
credential = "provider"
header = "x-api-key"
nonce_env = "A_KEY"

[[broker]]
name = "b.example.test"
credential = "provider"
header = "x-api-key"
nonce_env = "B_KEY"
)",
                                    "twice.toml");
  ASSERT_TRUE(twice.ok());
  auto store = CredentialFile::parse("[credentials]\nprovider = \"sk-one\"\n", "store.toml");
  ASSERT_TRUE(store.ok());
  auto text = Credentials::text_for_instance(*store, "store.toml", *twice);
  ASSERT_TRUE(text.ok()) << text.error();
  EXPECT_EQ(*text, "[credentials]\nprovider = \"sk-one\"\n");
  auto missing = Credentials::text_for_instance(*store, "store.toml", make_policy());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("'other'"), std::string::npos) << missing.error();
  EXPECT_NE(missing.error().find("abox credentials set other"), std::string::npos) << missing.error();
  EXPECT_EQ(missing.error().find("sk-one"), std::string::npos);
}

// The broker's side: a key no binding uses is refused, not ignored, so a
// broker never holds one (an engine that sent the whole store would fail here).
TEST(InstanceCredentials, TheBrokerRefusesAKeyNoBindingUses) {
  auto policy = make_policy();
  auto c = Credentials::parse_instance_text(
      "[credentials]\nprovider = \"sk-one\"\nother = \"sk-two\"\nunused = \"sk-NOT-FOR-THIS-INSTANCE\"\n",
      policy);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("'unused'"), std::string::npos) << c.error();
  EXPECT_EQ(c.error().find("sk-"), std::string::npos) << "no key in the message: " << c.error();
  EXPECT_FALSE(Credentials::parse_instance_text("[credentials]\nprovider = \"sk-one\"\n", policy).ok())
      << "every binding's key is needed";
  EXPECT_FALSE(Credentials::parse_instance_text("", policy).ok());
  EXPECT_FALSE(
      Credentials::parse_instance_text("[credentials]\nprovider = \"sk one\"\nother = \"x\"\n", policy).ok());
}

TEST(InstanceCredentials, ReadFromAPipeAndFromASealedMemfd) {
  auto policy = make_policy();
  const std::string text = "[credentials]\nprovider = \"sk-one\"\nother = \"sk-two\"\n";
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(p[1]);
  auto from_pipe = Credentials::read_fd(p[0], policy);
  ::close(p[0]);
  ASSERT_TRUE(from_pipe.ok()) << from_pipe.error();
  EXPECT_EQ(from_pipe->key_for(1), "sk-two");

  base::UniqueFd m(::memfd_create("test-keys", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(m);
  ASSERT_EQ(::write(m.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ASSERT_EQ(::fcntl(m.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK), 0);
  ASSERT_EQ(::lseek(m.get(), 0, SEEK_SET), 0);
  auto from_memfd = Credentials::read_fd(m.get(), policy);
  ASSERT_TRUE(from_memfd.ok()) << from_memfd.error();
  EXPECT_EQ(from_memfd->key_for(0), "sk-one");
}

TEST(InstanceCredentials, AnFdPastTheBoundIsRefused) {
  auto policy = make_policy();
  base::UniqueFd m(::memfd_create("test-keys", MFD_CLOEXEC));
  ASSERT_TRUE(m);
  const std::string big(kMaxCredentialFile + 1, '#');
  ASSERT_EQ(::write(m.get(), big.data(), big.size()), static_cast<ssize_t>(big.size()));
  ASSERT_EQ(::lseek(m.get(), 0, SEEK_SET), 0);
  auto c = Credentials::read_fd(m.get(), policy);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("more than"), std::string::npos) << c.error();
  EXPECT_FALSE(Credentials::read_fd(-1, policy).ok());
}

}  // namespace
}  // namespace abox::broker
