// RingWriter on a pipe: parts are written whole and in order, each write's
// result reaches on_done with its note, and what does not fit (too large,
// every slot in flight) is refused without doing anything.
#include "io/ring_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "tests/support/udp_pair.h"

namespace abox::io {
namespace {

struct Written {
  int res;
  std::size_t note;
};

class RingWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::array<int, 2> fds{};
    ASSERT_EQ(::pipe2(fds.data(), O_NONBLOCK | O_CLOEXEC), 0);
    read_end_ = base::UniqueFd(fds[0]);
    write_end_ = base::UniqueFd(fds[1]);
    ASSERT_GE(::fcntl(write_end_.get(), F_SETPIPE_SZ, 1 << 20), 1 << 20);
    writer_ = std::make_unique<RingWriter>(loop_, write_end_.get(), [this](int res, std::size_t note) {
      done_.push_back({res, note});
    });
  }
  std::vector<std::uint8_t> drain() {
    std::vector<std::uint8_t> out;
    std::array<std::uint8_t, 65536> buf{};
    for (;;) {
      const ssize_t n = ::read(read_end_.get(), buf.data(), buf.size());
      if (n <= 0) return out;
      out.insert(out.end(), buf.begin(), buf.begin() + n);
    }
  }
  void turn_until_done(std::size_t count) {
    for (int i = 0; i < 50 && done_.size() < count; ++i) loop_.run_once(base::Millis(20));
  }

  EventLoop loop_;
  base::UniqueFd read_end_;
  base::UniqueFd write_end_;
  std::unique_ptr<RingWriter> writer_;
  std::vector<Written> done_;
};

TEST_F(RingWriterTest, PartsArriveWholeAndInOrderWithTheirNotes) {
  const std::vector<std::uint8_t> a = {1, 2, 3};
  const std::vector<std::uint8_t> b = {4, 5};
  const std::vector<std::uint8_t> empty;
  const std::vector<std::uint8_t> c = {6};
  const std::array<std::span<const std::uint8_t>, 3> first = {a, empty, b};
  const std::array<std::span<const std::uint8_t>, 1> second = {c};
  ASSERT_TRUE(writer_->write(first, 11));
  ASSERT_TRUE(writer_->write(second, 22));
  EXPECT_EQ(writer_->in_flight(), 2u);
  EXPECT_TRUE(drain().empty()) << "written before the turn's submission";
  turn_until_done(2);
  ASSERT_EQ(done_.size(), 2u);
  EXPECT_EQ(done_[0].res, 5);
  EXPECT_EQ(done_[0].note, 11u);
  EXPECT_EQ(done_[1].res, 1);
  EXPECT_EQ(done_[1].note, 22u);
  EXPECT_EQ(writer_->in_flight(), 0u);
  EXPECT_EQ(drain(), (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(RingWriterTest, TooLargeForASlotIsRefused) {
  const std::vector<std::uint8_t> big(RingWriter::kSlotBytes + 1, 7);
  const std::array<std::span<const std::uint8_t>, 1> parts = {big};
  EXPECT_FALSE(writer_->write(parts, 1));
  const std::vector<std::uint8_t> exact(RingWriter::kSlotBytes, 8);
  const std::array<std::span<const std::uint8_t>, 1> fits = {exact};
  EXPECT_TRUE(writer_->write(fits, 2));
  turn_until_done(1);
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].res, static_cast<int>(RingWriter::kSlotBytes));
  EXPECT_EQ(drain().size(), RingWriter::kSlotBytes);
}

// Every slot in flight: the next write is refused (the caller writes it
// directly after submit_now()); once they complete the slots serve again,
// and the order of everything written is the order it was given.
TEST_F(RingWriterTest, AFullPoolRefusesUntilWritesComplete) {
  std::vector<std::uint8_t> byte(1);
  const std::array<std::span<const std::uint8_t>, 1> parts = {byte};
  for (std::size_t i = 0; i < RingWriter::kSlots; ++i) {
    byte[0] = static_cast<std::uint8_t>(i);
    ASSERT_TRUE(writer_->write(parts, i));
  }
  byte[0] = 0xEE;
  EXPECT_FALSE(writer_->write(parts, 99));
  loop_.submit_now();
  ASSERT_EQ(::write(write_end_.get(), byte.data(), 1), 1);  // the refused one, directly
  turn_until_done(RingWriter::kSlots);
  ASSERT_EQ(done_.size(), RingWriter::kSlots);
  byte[0] = 0xEF;
  EXPECT_TRUE(writer_->write(parts, 100));
  turn_until_done(RingWriter::kSlots + 1);
  const std::vector<std::uint8_t> got = drain();
  ASSERT_EQ(got.size(), RingWriter::kSlots + 2);
  for (std::size_t i = 0; i < RingWriter::kSlots; ++i) EXPECT_EQ(got[i], i);
  EXPECT_EQ(got[RingWriter::kSlots], 0xEE);
  EXPECT_EQ(got[RingWriter::kSlots + 1], 0xEF);
}

// A write that fails reports its errno (a pipe without a reader: EPIPE,
// with SIGPIPE ignored for the test, as abox-net's sockets never raise it).
TEST_F(RingWriterTest, FailedWriteReportsItsErrno) {
  struct IgnoreSigpipe {
    void (*old)(int) = std::signal(SIGPIPE, SIG_IGN);
    ~IgnoreSigpipe() { std::signal(SIGPIPE, old); }
  } ignore;
  read_end_.reset();
  const std::vector<std::uint8_t> a = {1};
  const std::array<std::span<const std::uint8_t>, 1> parts = {a};
  ASSERT_TRUE(writer_->write(parts, 5));
  turn_until_done(1);
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].res, -EPIPE);
  EXPECT_EQ(done_[0].note, 5u);
}

// A writer destroyed with a write in the ring takes it back: nothing
// completes into it afterwards.
TEST_F(RingWriterTest, DestroyedWithQueuedWritesCompletesNothingAfterwards) {
  const std::vector<std::uint8_t> a = {1};
  const std::array<std::span<const std::uint8_t>, 1> parts = {a};
  ASSERT_TRUE(writer_->write(parts, 5));
  loop_.submit_now();
  writer_.reset();
  const std::size_t seen = done_.size();
  loop_.run_once(base::Millis(0));
  EXPECT_EQ(done_.size(), seen);
}

// write_to(): the same writer serves other fds, such as a connected UDP
// socket (each write one datagram).
TEST_F(RingWriterTest, WriteToAnotherFdSendsADatagramEach) {
  const testing::LoopbackUdpPair sockets;
  const std::vector<std::uint8_t> head = {'a', 'b'};
  const std::vector<std::uint8_t> tail = {'c'};
  const std::array<std::span<const std::uint8_t>, 2> first = {head, tail};
  const std::array<std::span<const std::uint8_t>, 1> second = {tail};
  ASSERT_TRUE(writer_->write_to(sockets.out.get(), first, 1));
  ASSERT_TRUE(writer_->write_to(sockets.out.get(), second, 2));
  turn_until_done(2);
  ASSERT_EQ(done_.size(), 2u);
  EXPECT_EQ(done_[0].res, 3);
  EXPECT_EQ(done_[1].res, 1);
  std::array<char, 16> buf{};
  ASSERT_EQ(::recv(sockets.in.get(), buf.data(), buf.size(), 0), 3);
  EXPECT_EQ(std::string(buf.data(), 3), "abc");
  ASSERT_EQ(::recv(sockets.in.get(), buf.data(), buf.size(), 0), 1);
  EXPECT_EQ(buf[0], 'c');
  EXPECT_TRUE(drain().empty()) << "nothing went to the writer's own fd";
}

}  // namespace
}  // namespace abox::io
