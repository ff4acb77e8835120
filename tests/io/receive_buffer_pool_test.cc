// ReceiveBufferPool on real UDP sockets over loopback: a multishot receive
// delivers each datagram whole in a pool buffer, in order; a pool smaller
// than a burst runs dry (-ENOBUFS ends the receive) and, posted again after
// the buffers are given back, delivers the rest with none lost; an empty
// datagram ends the receive with 0; a cancelled receive still completes
// through its owner; and a second pool on the same loop never sees the
// first one's buffers.
#include "io/receive_buffer_pool.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/event_loop.h"
#include "tests/support/udp_pair.h"

namespace abox::io {
namespace {

// Owns a receive the way UdpFlow does: takes each datagram, gives the
// buffer back at once, notes how the receive ended.
struct Receiver final : EventLoop::Completion {
  ReceiveBufferPool& pool;
  std::vector<std::string> got;
  std::vector<int> ends;  // results of completions without IORING_CQE_F_MORE
  std::size_t in_flight = 0;
  explicit Receiver(ReceiveBufferPool& p) : pool(p) {}
  void on_complete(int res, std::uint32_t flags) override {
    if (auto d = pool.bytes(res, flags)) got.emplace_back(d->begin(), d->end());
    pool.give_back(flags);
    if ((flags & IORING_CQE_F_MORE) == 0) {
      in_flight = 0;
      ends.push_back(res);
    }
  }
  void post(int fd) {
    pool.post_multishot_receive(this, fd);
    in_flight = 1;
  }
};

// One loop, one pair of sockets, and a receiver into a pool of the test's
// size; TearDown takes back whatever receive is still posted.
class ReceiveBufferPoolTest : public ::testing::Test {
 protected:
  void make_pool(std::uint16_t buffers, std::size_t bytes) {
    pool_ = std::make_unique<ReceiveBufferPool>(loop_, buffers, bytes);
    receiver_ = std::make_unique<Receiver>(*pool_);
  }
  void TearDown() override {
    if (receiver_) loop_.cancel_all(receiver_.get(), receiver_->in_flight);
  }
  // Turns the loop until done() or 50 turns of at most 10 ms.
  template <typename Done>
  void turn_until(Done done) {
    for (int i = 0; i < 50 && !done(); ++i) loop_.run_once(base::Millis(10));
  }
  void turn() { loop_.run_once(base::Millis(10)); }

  EventLoop loop_;
  testing::LoopbackUdpPair sockets_;
  std::unique_ptr<ReceiveBufferPool> pool_;
  std::unique_ptr<Receiver> receiver_;
};

TEST_F(ReceiveBufferPoolTest, DatagramsArriveWholeAndInOrderInPoolBuffers) {
  make_pool(4, 2048);
  Receiver& r = *receiver_;
  r.post(sockets_.in.get());
  turn();
  sockets_.send("one");
  sockets_.send(std::string(2048, 'x'));  // exactly a buffer
  sockets_.send("three");
  turn_until([&] { return r.got.size() >= 3; });
  ASSERT_EQ(r.got.size(), 3u);
  EXPECT_EQ(r.got[0], "one");
  EXPECT_EQ(r.got[1], std::string(2048, 'x'));
  EXPECT_EQ(r.got[2], "three");
  EXPECT_TRUE(r.ends.empty()) << "the receive stays posted";
  EXPECT_EQ(r.in_flight, 1u);
  EXPECT_EQ(pool_->usable(), 4u);
}

// A burst larger than the pool: the receive ends with -ENOBUFS once every
// buffer is taken; posted again, it delivers the rest, none lost or out of
// order (the datagrams waited in the socket).
TEST_F(ReceiveBufferPoolTest, ABurstLargerThanThePoolLosesNothing) {
  make_pool(2, 256);
  Receiver& r = *receiver_;
  r.post(sockets_.in.get());
  turn();
  constexpr std::size_t kBurst = 100;
  for (std::size_t i = 0; i < kBurst; ++i) sockets_.send("datagram " + std::to_string(i));
  for (int i = 0; i < 500 && r.got.size() < kBurst; ++i) {
    turn();
    if (r.in_flight == 0) r.post(sockets_.in.get());
  }
  ASSERT_EQ(r.got.size(), kBurst);
  for (std::size_t i = 0; i < kBurst; ++i) EXPECT_EQ(r.got[i], "datagram " + std::to_string(i));
  EXPECT_FALSE(r.ends.empty()) << "two buffers never ran dry under a burst of 100";
  for (int e : r.ends) EXPECT_EQ(e, -ENOBUFS);
}

TEST_F(ReceiveBufferPoolTest, AnEmptyDatagramEndsTheReceiveWithZero) {
  make_pool(2, 256);
  Receiver& r = *receiver_;
  r.post(sockets_.in.get());
  turn();
  sockets_.send("");
  turn_until([&] { return !r.ends.empty(); });
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0], 0);
  EXPECT_TRUE(r.got.empty());
  r.post(sockets_.in.get());  // and the next datagram comes as usual
  sockets_.send("after");
  turn_until([&] { return !r.got.empty(); });
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0], "after");
}

// EventLoop::cancel(): no wait; the cancelled receive's last completion
// still reaches its owner (which must therefore outlive it).
TEST_F(ReceiveBufferPoolTest, ACancelledReceiveCompletesThroughItsOwner) {
  make_pool(2, 256);
  Receiver& r = *receiver_;
  r.post(sockets_.in.get());
  turn();
  loop_.cancel(&r);
  turn_until([&] { return r.in_flight == 0; });
  ASSERT_EQ(r.in_flight, 0u);
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0], -ECANCELED);
  sockets_.send("late");  // nobody receives it now
  turn();
  turn();
  EXPECT_TRUE(r.got.empty());
}

// Pools come and go on one loop (one per GuestStack): the second one's
// receives use its own memory, and the first one's buffers were taken
// back from the kernel before its memory went (ASan would see a write).
TEST_F(ReceiveBufferPoolTest, ASecondPoolOnTheSameLoopGetsItsOwnBuffers) {
  make_pool(2, 256);
  receiver_->post(sockets_.in.get());
  sockets_.send("to the first");
  turn_until([&] { return !receiver_->got.empty(); });
  ASSERT_EQ(receiver_->got.size(), 1u);
  loop_.cancel_all(receiver_.get(), receiver_->in_flight);
  make_pool(2, 256);  // the first pool goes here
  receiver_->post(sockets_.in.get());
  sockets_.send("to the second");
  turn_until([&] { return !receiver_->got.empty(); });
  ASSERT_EQ(receiver_->got.size(), 1u);
  EXPECT_EQ(receiver_->got[0], "to the second");
}

TEST_F(ReceiveBufferPoolTest, BytesRefusesWhatNoBufferHolds) {
  make_pool(2, 256);
  EXPECT_FALSE(pool_->bytes(10, 0)) << "no IORING_CQE_F_BUFFER";
  EXPECT_FALSE(pool_->bytes(10, IORING_CQE_F_BUFFER)) << "no memory yet";
  receiver_->post(sockets_.in.get());  // makes the memory
  EXPECT_FALSE(pool_->bytes(-EIO, IORING_CQE_F_BUFFER));
  EXPECT_FALSE(pool_->bytes(257, IORING_CQE_F_BUFFER)) << "longer than a buffer";
  EXPECT_FALSE(pool_->bytes(1, IORING_CQE_F_BUFFER | (2u << IORING_CQE_BUFFER_SHIFT))) << "no buffer 2";
  EXPECT_TRUE(pool_->bytes(256, IORING_CQE_F_BUFFER | (1u << IORING_CQE_BUFFER_SHIFT)));
}

}  // namespace
}  // namespace abox::io
