// ReceiveBufferPool on real UDP sockets over loopback: a multishot receive
// delivers each datagram whole in a pool buffer, in order; a pool smaller
// than a burst runs dry (-ENOBUFS ends the receive) and, posted again after
// the buffers are given back, delivers the rest with none lost; an empty
// datagram ends the receive with 0; a cancelled receive still completes
// through its owner; and a second pool on the same loop never sees the
// first one's buffers.
#include "netstack/receive_buffer_pool.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/event_loop.h"

namespace abox::netstack {
namespace {

// Connected UDP sockets on 127.0.0.1: `in` receives what `out` sends.
struct SocketPair {
  base::UniqueFd in;
  base::UniqueFd out;
  SocketPair() {
    in.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    out.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    int big = 1 << 20;
    ::setsockopt(in.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(in.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::getsockname(in.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    EXPECT_EQ(::connect(out.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  void send(const std::string& s) {
    ASSERT_EQ(::send(out.get(), s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
};

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

void turns(EventLoop& loop, int n) {
  for (int i = 0; i < n; ++i) loop.run_once(base::Millis(10));
}

TEST(ReceiveBufferPool, DatagramsArriveWholeAndInOrderInPoolBuffers) {
  EventLoop loop;
  ReceiveBufferPool pool(loop, 4, 2048);
  SocketPair s;
  Receiver r(pool);
  r.post(s.in.get());
  turns(loop, 1);
  s.send("one");
  s.send(std::string(2048, 'x'));  // exactly a buffer
  s.send("three");
  for (int i = 0; i < 50 && r.got.size() < 3; ++i) turns(loop, 1);
  ASSERT_EQ(r.got.size(), 3u);
  EXPECT_EQ(r.got[0], "one");
  EXPECT_EQ(r.got[1], std::string(2048, 'x'));
  EXPECT_EQ(r.got[2], "three");
  EXPECT_TRUE(r.ends.empty()) << "the receive stays posted";
  EXPECT_EQ(r.in_flight, 1u);
  EXPECT_EQ(pool.usable(), 4u);
  loop.cancel_all(&r, r.in_flight);
}

// A burst larger than the pool: the receive ends with -ENOBUFS once every
// buffer is taken; posted again, it delivers the rest, none lost or out of
// order (the datagrams waited in the socket).
TEST(ReceiveBufferPool, ABurstLargerThanThePoolLosesNothing) {
  EventLoop loop;
  ReceiveBufferPool pool(loop, 2, 256);
  SocketPair s;
  Receiver r(pool);
  r.post(s.in.get());
  turns(loop, 1);
  constexpr int kBurst = 100;
  for (int i = 0; i < kBurst; ++i) s.send("datagram " + std::to_string(i));
  for (int i = 0; i < 500 && r.got.size() < kBurst; ++i) {
    turns(loop, 1);
    if (r.in_flight == 0) r.post(s.in.get());
  }
  ASSERT_EQ(r.got.size(), static_cast<std::size_t>(kBurst));
  for (int i = 0; i < kBurst; ++i)
    EXPECT_EQ(r.got[static_cast<std::size_t>(i)], "datagram " + std::to_string(i));
  for (int e : r.ends) EXPECT_EQ(e, -ENOBUFS);
  loop.cancel_all(&r, r.in_flight);
}

TEST(ReceiveBufferPool, AnEmptyDatagramEndsTheReceiveWithZero) {
  EventLoop loop;
  ReceiveBufferPool pool(loop, 2, 256);
  SocketPair s;
  Receiver r(pool);
  r.post(s.in.get());
  turns(loop, 1);
  s.send("");
  for (int i = 0; i < 50 && r.ends.empty(); ++i) turns(loop, 1);
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0], 0);
  EXPECT_TRUE(r.got.empty());
  r.post(s.in.get());  // and the next datagram comes as usual
  s.send("after");
  for (int i = 0; i < 50 && r.got.empty(); ++i) turns(loop, 1);
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0], "after");
  loop.cancel_all(&r, r.in_flight);
}

// EventLoop::cancel(): no wait; the cancelled receive's last completion
// still reaches its owner (which must therefore outlive it).
TEST(ReceiveBufferPool, ACancelledReceiveCompletesThroughItsOwner) {
  EventLoop loop;
  ReceiveBufferPool pool(loop, 2, 256);
  SocketPair s;
  Receiver r(pool);
  r.post(s.in.get());
  turns(loop, 1);
  loop.cancel(&r);
  for (int i = 0; i < 50 && r.in_flight != 0; ++i) turns(loop, 1);
  ASSERT_EQ(r.in_flight, 0u);
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0], -ECANCELED);
  s.send("late");  // nobody receives it now
  turns(loop, 2);
  EXPECT_TRUE(r.got.empty());
}

// Pools come and go on one loop (one per GuestStack): the second one's
// receives use its own memory, and the first one's buffers were taken
// back from the kernel before its memory went (ASan would see a write).
TEST(ReceiveBufferPool, ASecondPoolOnTheSameLoopGetsItsOwnBuffers) {
  EventLoop loop;
  SocketPair s;
  {
    ReceiveBufferPool first(loop, 2, 256);
    Receiver r(first);
    r.post(s.in.get());
    s.send("to the first");
    for (int i = 0; i < 50 && r.got.empty(); ++i) turns(loop, 1);
    ASSERT_EQ(r.got.size(), 1u);
    loop.cancel_all(&r, r.in_flight);
  }
  ReceiveBufferPool second(loop, 2, 256);
  Receiver r(second);
  r.post(s.in.get());
  s.send("to the second");
  for (int i = 0; i < 50 && r.got.empty(); ++i) turns(loop, 1);
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0], "to the second");
  loop.cancel_all(&r, r.in_flight);
}

TEST(ReceiveBufferPool, BytesRefusesWhatNoBufferHolds) {
  EventLoop loop;
  ReceiveBufferPool pool(loop, 2, 256);
  EXPECT_FALSE(pool.bytes(10, 0)) << "no IORING_CQE_F_BUFFER";
  EXPECT_FALSE(pool.bytes(10, IORING_CQE_F_BUFFER)) << "no memory yet";
  SocketPair s;
  Receiver r(pool);
  r.post(s.in.get());  // makes the memory
  EXPECT_FALSE(pool.bytes(-EIO, IORING_CQE_F_BUFFER));
  EXPECT_FALSE(pool.bytes(257, IORING_CQE_F_BUFFER)) << "longer than a buffer";
  EXPECT_FALSE(pool.bytes(1, IORING_CQE_F_BUFFER | (2u << IORING_CQE_BUFFER_SHIFT))) << "no buffer 2";
  EXPECT_TRUE(pool.bytes(256, IORING_CQE_F_BUFFER | (1u << IORING_CQE_BUFFER_SHIFT)));
  loop.cancel_all(&r, r.in_flight);
}

}  // namespace
}  // namespace abox::netstack
