#include "base/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <type_traits>
#include <utility>

namespace abox::base {
namespace {

// True when fd is an open descriptor in this process.
bool is_open(int fd) {
  errno = 0;
  return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

bool is_closed(int fd) {
  errno = 0;
  return ::fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

// A fresh open fd (one end of a pipe; the other end is closed here).
int open_fd() {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  ::close(fds[1]);
  return fds[0];
}

static_assert(!std::is_copy_constructible_v<UniqueFd>);
static_assert(!std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd>);
static_assert(std::is_nothrow_move_assignable_v<UniqueFd>);
static_assert(!std::is_convertible_v<int, UniqueFd>, "the int constructor must be explicit");

TEST(UniqueFdTest, DefaultIsInvalid) {
  UniqueFd fd;
  EXPECT_EQ(fd.get(), -1);
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(static_cast<bool>(fd));
  fd.reset();  // resetting nothing is harmless
  EXPECT_EQ(fd.release(), -1);
}

TEST(UniqueFdTest, ClosesOnDestruction) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(static_cast<bool>(fd));
    EXPECT_EQ(fd.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_TRUE(is_closed(raw));
}

// Closing exactly once: after the owner closes, POSIX hands the same number
// to the next open; a stale second close by a moved-from or reset owner would
// close that unrelated fd.
TEST(UniqueFdTest, ClosesExactlyOnce) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  int reused = -1;
  {
    UniqueFd a(raw);
    { UniqueFd b(std::move(a)); }
    EXPECT_TRUE(is_closed(raw));
    reused = open_fd();
    ASSERT_EQ(reused, raw);  // lowest free number
    a.reset();               // NOLINT(bugprone-use-after-move)
    UniqueFd c(open_fd());
    c.reset();
    c.reset();
  }
  EXPECT_TRUE(is_open(reused)) << "a second close hit fd " << reused;
  ::close(reused);
}

TEST(UniqueFdTest, MoveConstructTransfersOwnership) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  UniqueFd a(raw);
  {
    UniqueFd b(std::move(a));
    EXPECT_EQ(a.get(), -1);  // NOLINT(bugprone-use-after-move): moved-from is -1
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFdTest, MoveAssignClosesTheOldFd) {
  int first = open_fd();
  int second = open_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  UniqueFd a(first);
  {
    UniqueFd b(second);
    a = std::move(b);
    EXPECT_TRUE(is_closed(first));
    EXPECT_EQ(a.get(), second);
    EXPECT_EQ(b.get(), -1);  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_TRUE(is_open(second));  // b's destructor did not close it
  a.reset();
  EXPECT_TRUE(is_closed(second));
}

TEST(UniqueFdTest, MoveAssignFromEmpty) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  UniqueFd a(raw);
  UniqueFd empty;
  a = std::move(empty);
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFdTest, SelfMoveAssignKeepsTheFd) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  UniqueFd a(raw);
  UniqueFd& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.get(), raw);
  EXPECT_TRUE(is_open(raw));
  a.reset();
  EXPECT_TRUE(is_closed(raw));
}

TEST(UniqueFdTest, ReleaseHandsOutWithoutClosing) {
  int raw = open_fd();
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_EQ(fd.get(), -1);
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(UniqueFdTest, ResetToAnotherFd) {
  int first = open_fd();
  int second = open_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  {
    UniqueFd fd(first);
    fd.reset(second);
    EXPECT_TRUE(is_closed(first));
    EXPECT_TRUE(is_open(second));
    EXPECT_EQ(fd.get(), second);
  }
  EXPECT_TRUE(is_closed(second));
}

TEST(UniqueFdTest, NegativeFdIsNeverClosed) {
  UniqueFd fd(-1);
  EXPECT_FALSE(fd.valid());
  fd.reset(-5);
  EXPECT_FALSE(fd.valid());
}

}  // namespace
}  // namespace abox::base
