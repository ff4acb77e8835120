// CredentialFile: the store's one reader and writer (broker/credential_file.h).
#include "broker/credential_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace abox::broker {
namespace {

class CredentialFileTest : public ::testing::Test {
 protected:
  void write(std::string_view text, mode_t mode) {
    { std::ofstream(path_) << text; }
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
  }
  abox::testing::TempDir dir_{"abox-credfile"};
  std::string path_ = dir_.file("credentials.toml");
};

TEST_F(CredentialFileTest, WhatIsWrittenReadsBackTheSame) {
  CredentialFile f;
  // Keys with every byte TOML's basic strings escape or treat specially.
  const std::pair<std::string, std::string> entries[] = {
      {"plain", "sk-ant-0123456789"},
      {"with.dots", "a\"quote"},
      {"under_score-dash", "back\\slash\\\\"},
      {"Z9", "#not-a-comment='x'=[y]{z}"},
  };
  for (const auto& [n, k] : entries) ASSERT_TRUE(f.set(n, k).ok()) << n;
  ASSERT_TRUE(f.write(path_).ok());
  auto back = CredentialFile::read(path_);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->entries().size(), 4u);
  for (const auto& [n, k] : entries) {
    ASSERT_NE(back->find(n), nullptr) << n;
    EXPECT_EQ(*back->find(n), k) << n;
  }
  EXPECT_EQ(back->format(), f.format());
  // A dotted name is quoted, not a nested table.
  EXPECT_NE(f.format().find("\"with.dots\" = "), std::string::npos) << f.format();
}

TEST_F(CredentialFileTest, WrittenMode0600WhateverTheUmaskAndNoTemporaryLeft) {
  const mode_t old = ::umask(0);
  CredentialFile f;
  ASSERT_TRUE(f.set("a", "k1").ok());
  auto w = f.write(path_);
  ::umask(old);
  ASSERT_TRUE(w.ok()) << w.error();
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()), {}), 1);
}

TEST_F(CredentialFileTest, SetReplacesAndRemoveRemoves) {
  CredentialFile f;
  ASSERT_TRUE(f.set("a", "old").ok());
  ASSERT_TRUE(f.set("a", "new").ok());
  EXPECT_EQ(*f.find("a"), "new");
  EXPECT_TRUE(f.remove("a"));
  EXPECT_FALSE(f.remove("a"));
  EXPECT_EQ(f.find("a"), nullptr);
  EXPECT_EQ(f.format(), "[credentials]\n");
}

TEST_F(CredentialFileTest, SetRefusesBadNamesAndKeysWithoutQuotingTheKey) {
  CredentialFile f;
  for (std::string_view name : {"", "a b", "a/b", "a\"b", "naïve", "x=y"}) {
    auto r = f.set(name, "key");
    EXPECT_FALSE(r.ok()) << name;
  }
  EXPECT_FALSE(f.set(std::string(129, 'a'), "key").ok());
  EXPECT_TRUE(f.set(std::string(128, 'a'), "key").ok());
  using std::string_view_literals::operator""sv;
  for (std::string_view key : {""sv, "has space"sv, "tab\there"sv, "line\nbreak"sv, "star*"sv, "nul\0x"sv}) {
    auto r = f.set("n", key);
    ASSERT_FALSE(r.ok()) << key;
    if (key.size() > 3) {
      EXPECT_EQ(r.error().find(key), std::string::npos) << r.error();
    }
  }
  EXPECT_FALSE(f.set("n", std::string(4097, 'k')).ok());
  EXPECT_TRUE(f.set("n", std::string(4096, 'k')).ok());
}

TEST_F(CredentialFileTest, ReadRefusesWhatTheBrokerRefuses) {
  write("[credentials]\na = \"k\"\n", 0640);
  auto r = CredentialFile::read(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().missing);
  EXPECT_NE(r.error().message.find("chmod 600"), std::string::npos);

  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  const std::string link = dir_.file("link.toml");
  ASSERT_EQ(::symlink(path_.c_str(), link.c_str()), 0);
  r = CredentialFile::read(link);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("symlink"), std::string::npos);

  r = CredentialFile::read(dir_.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos);

  r = CredentialFile::read(dir_.file("missing.toml"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().missing);

  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path_.c_str(), 64999, 64999), 0);
    r = CredentialFile::read(path_);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("owned by uid 64999, not by you"), std::string::npos)
        << r.error().message;
  }
}

TEST_F(CredentialFileTest, ReadRefusesAFileOverOneMiB) {
  write("[credentials]\na = \"" + std::string(kMaxCredentialFile, 'k') + "\"\n", 0600);
  auto r = CredentialFile::read(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("larger than 1 MiB"), std::string::npos);
}

TEST_F(CredentialFileTest, ParseRefusesEachBrokenShapeWithoutTheKey) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"[credentials]\n\"a b\" = \"secret-1\"\n", "the name 'a b'"},
      {"[credentials]\na.b = \"secret-2\"\n", "credentials.a must be a string"},
      {"[credentials]\na = 5\n", "credentials.a must be a string"},
      {"[credentials]\na = \"secret 3\"\n", "credentials.a is not 1-4096"},
      {"[other]\na = \"secret-4\"\n", "unknown key 'other'"},
      {"credentials = \"secret-5\"\n", "[credentials] must be a table"},
      {"[credentials]\na = \"secret-6\n", "c.toml:2:"},
  };
  for (const auto& [text, want] : cases) {
    auto r = CredentialFile::parse(text, "c.toml");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().find(want), std::string::npos) << r.error();
    EXPECT_EQ(r.error().find("secret"), std::string::npos) << r.error();
  }
  EXPECT_TRUE(CredentialFile::parse("", "c.toml").ok());
  EXPECT_TRUE(CredentialFile::parse("# just a comment\n[credentials]\n", "c.toml").ok());
}

}  // namespace
}  // namespace abox::broker
