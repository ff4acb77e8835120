// The instance state folder: made private, never reused, written atomically,
// removed without following a symlink out of it.
#include "engine/instance/state_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

TEST(StateFolder, PrivateAndNeverReused) {
  abox::testing::TempDir tmp("state_folder");
  std::string root = tmp.path() + "/a/b/instances";
  auto f = StateFolder::create(root, "dev");
  ASSERT_TRUE(f.ok()) << f.error();
  struct stat st {};
  ASSERT_EQ(::stat(f->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto again = StateFolder::create(root, "dev");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("an instance named 'dev' exists"), std::string::npos);
}

TEST(StateFolder, NamesAndPathLengths) {
  abox::testing::TempDir tmp("state_folder");
  // Strings, not c_str() of temporaries: an initializer_list of pointers would
  // outlive the 65-character string it points into.
  const std::vector<std::string> bad_names{"", ".hidden", "-x", "a/b", "a b", "..", std::string(65, 'a')};
  for (const auto& bad : bad_names) EXPECT_FALSE(StateFolder::create(tmp.path(), bad).ok()) << bad;
  std::string deep = tmp.path() + "/" + std::string(90, 'd');
  auto f = StateFolder::create(deep, "name");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("too long for its unix sockets"), std::string::npos);
}

// stage_file: nothing at the final name until commit(); then the staged
// file's read fd is the file at the final name (what abox-net is handed by
// `abox policy apply`, and rereads on SIGHUP). Uncommitted, it leaves nothing.
TEST(StateFolder, AStagedFileIsInPlaceOnlyOnceCommitted) {
  abox::testing::TempDir tmp("state_folder");
  auto f = StateFolder::create(tmp.path(), "dev");
  ASSERT_TRUE(f.ok()) << f.error();
  ASSERT_TRUE(f->write_file("policy.toml", "old\n").ok());
  auto read_all = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    auto staged = f->stage_file("policy.toml", "dropped\n");
    ASSERT_TRUE(staged.ok()) << staged.error();
    EXPECT_EQ(read_all(f->policy()), "old\n");
  }
  EXPECT_EQ(read_all(f->policy()), "old\n");
  EXPECT_NE(::access((f->policy() + ".tmp").c_str(), F_OK), 0) << "an uncommitted file was left";
  auto staged = f->stage_file("policy.toml", "new\n");
  ASSERT_TRUE(staged.ok()) << staged.error();
  struct stat held {};
  ASSERT_EQ(::fstat(staged->read(), &held), 0);
  ASSERT_TRUE(staged->commit().ok());
  EXPECT_EQ(read_all(f->policy()), "new\n");
  struct stat now {};
  ASSERT_EQ(::stat(f->policy().c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, held.st_ino);
  EXPECT_EQ(now.st_mode & 0777, 0600u);
  EXPECT_FALSE(staged->commit().ok()) << "committed twice";
}

TEST(StateFolder, WritesAtomicallyAndRemovesWithoutFollowingLinks) {
  abox::testing::TempDir tmp("state_folder");
  std::string outside = tmp.path() + "/outside";
  ASSERT_EQ(::mkdir(outside.c_str(), 0700), 0);
  std::ofstream(outside + "/keep") << "precious";
  auto f = StateFolder::create(tmp.path() + "/instances", "x");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->write_file("instance.json", "{\"a\":1}\n").ok());
  ASSERT_TRUE(f->write_file("instance.json", "{\"a\":2}\n").ok());
  std::ifstream in(f->instance_json());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"a\":2}\n");
  EXPECT_NE(::access((f->instance_json() + ".tmp").c_str(), F_OK), 0);
  // A link the guest side could never make, but a careless tool might: removal stays inside.
  ASSERT_EQ(::symlink(outside.c_str(), f->file("link").c_str()), 0);
  ASSERT_TRUE(f->remove().ok());
  EXPECT_NE(::access(f->path().c_str(), F_OK), 0);
  EXPECT_EQ(::access((outside + "/keep").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace abox::engine
