// read_whole_file / read_whole_fd: the one reader of a policy's text. The
// nasty cases: missing, a folder, a FIFO nobody writes (refused, never
// waited on), a socket, over the cap (by size, and by one byte), empty, and
// an fd read again whole.
#include "base/whole_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <string>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace abox::base {
namespace {

using Kind = WholeFileError::Kind;

class WholeFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_.file(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  abox::testing::TempDir dir_{"abox-whole-file"};
};

TEST_F(WholeFileTest, ReadsAWholeFileUpToTheCap) {
  const std::string text(4096, 'x');
  auto got = read_whole_file(write("p.toml", text), 4096);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, text);
  auto empty = read_whole_file(write("empty.toml", ""), 4096);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST_F(WholeFileTest, OneByteOverTheCapIsTooLarge) {
  auto got = read_whole_file(write("big.toml", std::string(4097, 'x')), 4096);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, Kind::kTooLarge);
  EXPECT_EQ(got.error().message, "larger than 4096 bytes");
  auto mib = read_whole_file(write("huge.toml", std::string((1u << 20) + 1, 'x')), 1u << 20);
  ASSERT_FALSE(mib.ok());
  EXPECT_EQ(mib.error().message, "larger than 1 MiB");
}

TEST_F(WholeFileTest, MissingIsCannotOpenWithTheErrnoText) {
  auto got = read_whole_file(dir_.file("nothing.toml"), 4096);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, Kind::kCannotOpen);
  EXPECT_EQ(got.error().message, std::strerror(ENOENT));
}

TEST_F(WholeFileTest, AFolderIsRefused) {
  auto got = read_whole_file(dir_.path(), 4096);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, Kind::kFolder);
  EXPECT_EQ(got.error().message, "it is a folder, not a file");
}

// A FIFO with no writer: open(2) without O_NONBLOCK would wait for one for
// ever. Asked on another thread, bounded; should it block, a writer is
// opened to set it free and the test fails.
TEST_F(WholeFileTest, AFifoIsRefusedWithoutWaiting) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto asked = std::async(std::launch::async, [&] { return read_whole_file(fifo, 4096); });
  if (asked.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    UniqueFd writer(::open(fifo.c_str(), O_WRONLY | O_CLOEXEC));
    ADD_FAILURE() << "read_whole_file waited on a FIFO";
    asked.wait();
    return;
  }
  auto got = asked.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, Kind::kNotRegular);
  EXPECT_EQ(got.error().message, "it is not a regular file");
}

TEST_F(WholeFileTest, ASocketAndAPipeFdAreRefused) {
  const std::string path = dir_.file("s.sock");
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  auto got = read_whole_file(path, 4096);
  ASSERT_FALSE(got.ok());
  // open(2) of a socket file fails (ENXIO) before it could be read.
  EXPECT_EQ(got.error().kind, Kind::kCannotOpen);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd r(fds[0]);
  UniqueFd w(fds[1]);
  auto piped = read_whole_fd(r.get(), 4096);
  ASSERT_FALSE(piped.ok());
  EXPECT_EQ(piped.error().kind, Kind::kNotRegular);
}

// An fd kept open (abox-net's policy file, for SIGHUP) is read whole each
// time, from its start, whatever its offset, and sees a rewrite in place.
TEST_F(WholeFileTest, AnFdIsReadWholeEachTime) {
  const std::string path = write("kept.toml", "first\n");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  char c;
  ASSERT_EQ(::read(fd.get(), &c, 1), 1);
  auto once = read_whole_fd(fd.get(), 4096);
  ASSERT_TRUE(once.ok());
  EXPECT_EQ(*once, "first\n");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "second, longer\n";
  auto again = read_whole_fd(fd.get(), 4096);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, "second, longer\n");
}

}  // namespace
}  // namespace abox::base
