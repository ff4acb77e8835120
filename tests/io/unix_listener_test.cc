// listen_unix() against real sockets and files: a stale socket file is
// replaced, a live listener (stream or datagram) is refused without its
// accept queue seeing the check, anything that is not a socket is refused
// and kept, bad paths are clear errors, and the new file is mode 0600.
#include "io/unix_listener.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace abox::io {
namespace {

class UnixListenerTest : public ::testing::Test {
 protected:
  sockaddr_un address() const {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    return addr;
  }
  // A socket of `type` bound at path_; closed at once unless kept.
  base::UniqueFd bind_at(int type) const {
    base::UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = address();
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  }
  bool connects() const {
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = address();
    return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  }

  abox::testing::TempDir dir_{"abox-unix-listener-test"};
  std::string path_ = dir_.file("s.sock");
};

TEST_F(UnixListenerTest, AFreePathGetsAListeningSocketMode0600) {
  auto fd = listen_unix(path_, 4, "test socket");
  ASSERT_TRUE(fd.ok()) << fd.error();
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(connects());
}

TEST_F(UnixListenerTest, AStaleSocketFileIsReplaced) {
  { base::UniqueFd gone = bind_at(SOCK_STREAM); }  // the file a dead process left
  EXPECT_FALSE(connects());
  auto fd = listen_unix(path_, 4, "test socket");
  ASSERT_TRUE(fd.ok()) << fd.error();
  EXPECT_TRUE(connects());
}

TEST_F(UnixListenerTest, ALiveStreamListenerIsRefusedAndItsQueueNeverSeesTheCheck) {
  auto first = listen_unix(path_, 4, "test socket");
  ASSERT_TRUE(first.ok()) << first.error();
  auto second = listen_unix(path_, 4, "test socket");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("something is already listening on " + path_), std::string::npos)
      << second.error();
  // Nothing is waiting to be accepted: the check did not connect.
  base::UniqueFd none(::accept4(first->get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_FALSE(none);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_TRUE(connects());  // and the file is still the first one's
}

TEST_F(UnixListenerTest, ALiveDatagramSocketIsRefused) {
  base::UniqueFd live = bind_at(SOCK_DGRAM);
  auto fd = listen_unix(path_, 4, "test socket");
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().find("already listening on " + path_), std::string::npos) << fd.error();
}

TEST_F(UnixListenerTest, AFileIsRefusedAndKept) {
  { std::ofstream(path_) << "precious\n"; }
  auto fd = listen_unix(path_, 4, "test socket");
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().find("test socket path " + path_ + " exists and is not a socket"), std::string::npos)
      << fd.error();
  std::ifstream in(path_);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "precious");
}

TEST_F(UnixListenerTest, ADirectoryOrSymlinkIsRefusedAndKept) {
  ASSERT_EQ(::mkdir(path_.c_str(), 0700), 0);
  auto dir = listen_unix(path_, 4, "test socket");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().find("is not a socket"), std::string::npos) << dir.error();
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_EQ(::rmdir(path_.c_str()), 0);
  // A symlink to a stale socket is not followed, not removed.
  const std::string target = dir_.file("target.sock");
  {
    base::UniqueFd gone(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, target.data(), target.size());
    ASSERT_EQ(::bind(gone.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  }
  ASSERT_EQ(::symlink(target.c_str(), path_.c_str()), 0);
  auto link = listen_unix(path_, 4, "test socket");
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.error().find("is not a socket"), std::string::npos) << link.error();
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ::unlink(target.c_str());
}

TEST_F(UnixListenerTest, BadPathsAreClearErrors) {
  auto empty = listen_unix("", 4, "test socket");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error(), "test socket path is empty");
  auto long_path = listen_unix("/tmp/" + std::string(200, 'x'), 4, "test socket");
  ASSERT_FALSE(long_path.ok());
  EXPECT_NE(long_path.error().find("longer than 107 bytes"), std::string::npos) << long_path.error();
  auto no_dir = listen_unix(dir_.file("missing/s.sock"), 4, "test socket");
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.error().find("No such file or directory"), std::string::npos) << no_dir.error();
}

}  // namespace
}  // namespace abox::io
