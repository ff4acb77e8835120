// read_private_file and read_all_bounded (base/private_file.h): the one
// reader of a secret file, with every file it must refuse made for real in a
// private temporary folder: a symlink (to a good file), another owner,
// group or world access, one byte too many, a FIFO with no writer (refused,
// never waited on), a folder, a device.
#include "base/private_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <string>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace abox::base {
namespace {

using Fault = PrivateFileError::Fault;

class PrivateFileTest : public ::testing::Test {
 protected:
  std::string write(std::string_view name, std::string_view text, mode_t mode) {
    const std::string path = dir_.file(name);
    { std::ofstream(path) << text; }
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  // The fault reading `path` gives (or "read" when it is read).
  static std::string fault_of(const std::string& path, std::size_t max = 64,
                              Readers readers = Readers::owner_only) {
    auto r = read_private_file(path, max, readers);
    if (r.ok()) return "read";
    EXPECT_EQ(r.error().message.rfind(path + ": ", 0), 0u) << "names the path first: " << r.error().message;
    switch (r.error().fault) {
      case Fault::missing:
        return "missing";
      case Fault::symlink:
        return "symlink";
      case Fault::not_regular:
        return "not_regular";
      case Fault::wrong_owner:
        return "wrong_owner";
      case Fault::too_open:
        return "too_open";
      case Fault::too_large:
        return "too_large";
      case Fault::unreadable:
        return "unreadable";
    }
    return "?";
  }
  abox::testing::TempDir dir_{"abox-private"};
};

TEST_F(PrivateFileTest, ReadsAPrivateFileWhole) {
  const std::string path = write("key", "secret", 0600);
  auto r = read_private_file(path, 64);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "secret");
  EXPECT_EQ(fault_of(write("empty", "", 0600)), "read");
  EXPECT_EQ(fault_of(write("owner-read-only", "k", 0400)), "read");
}

TEST_F(PrivateFileTest, AMissingFileIsMissingSoTheCallerMayCreateIt) {
  EXPECT_EQ(fault_of(dir_.file("nothing-here")), "missing");
}

TEST_F(PrivateFileTest, ASymlinkIsRefusedEvenToAGoodFile) {
  const std::string good = write("good", "k", 0600);
  const std::string link = dir_.file("link");
  ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
  EXPECT_EQ(fault_of(link), "symlink");
  EXPECT_EQ(fault_of(link, 64, Readers::anyone), "symlink") << "for a public file too";
  auto r = read_private_file(link, 64);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("give the file itself"), std::string::npos) << r.error().message;
}

TEST_F(PrivateFileTest, GroupOrWorldAccessIsRefusedWithTheChmodToRun) {
  for (const mode_t mode : {0640, 0620, 0604, 0602, 0660, 0644, 0666, 0610}) {
    const std::string path = write("open", "k", mode);
    EXPECT_EQ(fault_of(path), "too_open") << std::oct << mode;
    auto r = read_private_file(path, 64);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("chmod 600 " + path), std::string::npos) << r.error().message;
    ::unlink(path.c_str());
  }
  // A public file (a certificate) may be read by anyone, never through a link.
  EXPECT_EQ(fault_of(write("cert", "k", 0644), 64, Readers::anyone), "read");
}

TEST_F(PrivateFileTest, AFileOfAnotherOwnerIsRefused) {
  std::string path;
  if (::geteuid() == 0) {
    path = write("theirs", "k", 0600);
    ASSERT_EQ(::chown(path.c_str(), 64999, 64999), 0);
  } else {
    path = "/etc/passwd";  // root's, and we are not root
  }
  EXPECT_EQ(fault_of(path, 1 << 20), "wrong_owner");
  auto r = read_private_file(path, 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not by you (uid " + std::to_string(::geteuid()) + ")"), std::string::npos)
      << r.error().message;
}

TEST_F(PrivateFileTest, OneByteOverTheCapIsRefusedAndTheCapItselfIsRead) {
  EXPECT_EQ(fault_of(write("at-cap", std::string(64, 'k'), 0600), 64), "read");
  EXPECT_EQ(fault_of(write("over-cap", std::string(65, 'k'), 0600), 64), "too_large");
  auto r = read_private_file(dir_.file("over-cap"), 1 << 20);
  EXPECT_TRUE(r.ok());
  std::string big(2u << 20, 'k');
  auto refused = read_private_file(write("big", big, 0600), 1 << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("larger than 1 MiB"), std::string::npos) << refused.error().message;
}

// No writer: opening a FIFO for reading would block without O_NONBLOCK.
TEST_F(PrivateFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(fault_of(fifo), "not_regular");
}

TEST_F(PrivateFileTest, AFolderOrADeviceIsRefused) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0700), 0);
  EXPECT_EQ(fault_of(dir_.path()), "not_regular");
  EXPECT_EQ(fault_of("/dev/null", 64, Readers::anyone), "not_regular");
}

TEST(ReadAllBounded, ReadsAPipeToItsEndUpToTheCap) {
  std::array<int, 2> p{};
  ASSERT_EQ(::pipe2(p.data(), O_CLOEXEC), 0);
  UniqueFd reader(p[0]);
  {
    UniqueFd writer(p[1]);
    ASSERT_EQ(::write(writer.get(), "0123456789", 10), 10);
  }
  auto r = read_all_bounded(reader.get(), 10);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "0123456789");
}

TEST(ReadAllBounded, OneByteOverTheCapIsRefused) {
  std::array<int, 2> p{};
  ASSERT_EQ(::pipe2(p.data(), O_CLOEXEC), 0);
  UniqueFd reader(p[0]);
  {
    UniqueFd writer(p[1]);
    ASSERT_EQ(::write(writer.get(), "0123456789", 10), 10);
  }
  auto r = read_all_bounded(reader.get(), 9);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().fault, Fault::too_large);
  EXPECT_EQ(r.error().message, "more than 9 bytes");
}

TEST(ReadAllBounded, AReadErrorIsUnreadable) {
  UniqueFd dir(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir);
  auto r = read_all_bounded(dir.get(), 16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().fault, Fault::unreadable);  // EISDIR
}

}  // namespace
}  // namespace abox::base
