#include "broker/upstream_pool.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <memory>
#include <vector>

#include "broker/tls.h"

namespace abox::broker {
namespace {

// A pooled "connection": a TLS stream (never handshaken; the pool does not
// look inside) over one end of a socket pair, the test holding the other
// end as the provider.
struct Kept {
  std::unique_ptr<TlsStream> stream;
  base::UniqueFd provider;
  int fd = -1;
};

class UpstreamPoolTest : public ::testing::Test {
 protected:
  Kept kept() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    Kept k;
    k.fd = fds[0];
    k.stream = std::make_unique<TlsStream>(base::UniqueFd(fds[0]), SslPtr(SSL_new(ctx_.get())));
    k.provider.reset(fds[1]);
    return k;
  }

  // What a taker does with a stream handed out: its fd is still watched.
  std::unique_ptr<TlsStream> take() {
    auto s = pool_.take(0);
    if (s) loop_.unwatch(s->fd());
    return s;
  }

  SslCtxPtr ctx_{SSL_CTX_new(TLS_method())};
  BrokerLoop loop_;
  UpstreamPool pool_{loop_, 1};
};

TEST_F(UpstreamPoolTest, TakeHandsOutTheMostRecentIdleConnection) {
  Kept older = kept();
  Kept newer = kept();
  pool_.give(0, std::move(older.stream));
  pool_.give(0, std::move(newer.stream));
  auto first = take();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->fd(), newer.fd);
  auto second = take();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->fd(), older.fd);
  EXPECT_EQ(take(), nullptr);
  EXPECT_EQ(pool_.reused(), 2u);
}

// The provider's close (or anything it sends unasked) reached the socket in
// the same loop turn as the request that takes a connection: the watch has
// not run yet, and take() must not hand that connection out.
TEST_F(UpstreamPoolTest, TakeSkipsAConnectionThatEndedOrSpokeBeforeTheLoopSawIt) {
  Kept quiet = kept();
  Kept closed = kept();
  Kept talking = kept();
  pool_.give(0, std::move(quiet.stream));
  pool_.give(0, std::move(closed.stream));
  pool_.give(0, std::move(talking.stream));
  closed.provider.reset();
  ASSERT_EQ(::send(talking.provider.get(), "x", 1, 0), 1);

  auto taken = take();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->fd(), quiet.fd);
  EXPECT_EQ(pool_.idle(), 0u);
  EXPECT_EQ(pool_.reused(), 1u);
  loop_.run_once(base::Millis(0));  // the dropped ones close after the turn
}

TEST_F(UpstreamPoolTest, TakeGivesNothingWhenEveryIdleConnectionEnded) {
  Kept a = kept();
  Kept b = kept();
  pool_.give(0, std::move(a.stream));
  pool_.give(0, std::move(b.stream));
  a.provider.reset();
  b.provider.reset();
  EXPECT_EQ(take(), nullptr);
  EXPECT_EQ(pool_.idle(), 0u);
  EXPECT_EQ(pool_.reused(), 0u);
  loop_.run_once(base::Millis(0));
}

// A connection moves between a guest connection and the pool with its poll
// in the kernel left as it is: no removal and no new poll either way.
TEST_F(UpstreamPoolTest, AWatchedConnectionKeepsItsPollAcrossGiveAndTake) {
  Kept k = kept();
  std::vector<std::uint32_t> seen_by_taker;
  ASSERT_TRUE(loop_.watch(k.fd, POLLIN, [](std::uint32_t) {}));
  loop_.run_once(base::Millis(0));
  const std::uint64_t armed = loop_.io().polls_armed();
  pool_.give(0, std::move(k.stream));
  loop_.run_once(base::Millis(0));
  auto taken = pool_.take(0);
  ASSERT_NE(taken, nullptr);
  ASSERT_TRUE(loop_.hand_over(taken->fd(), [&](std::uint32_t ev) { seen_by_taker.push_back(ev); }));
  loop_.run_once(base::Millis(0));
  EXPECT_EQ(loop_.io().polls_armed(), armed);
  EXPECT_EQ(loop_.io().polls_removed(), 0u);
  // The provider's answer reaches the taker, not the pool.
  ASSERT_EQ(::send(k.provider.get(), "x", 1, 0), 1);
  loop_.run_once(base::Millis(100));
  ASSERT_EQ(seen_by_taker.size(), 1u);
  EXPECT_NE(seen_by_taker[0] & POLLIN, 0u);
  loop_.unwatch(taken->fd());
}

// While idle, the pool's handler has the watch: the provider closing the
// connection drops it from the pool.
TEST_F(UpstreamPoolTest, AGivenConnectionThatTheProviderClosesIsDropped) {
  Kept k = kept();
  ASSERT_TRUE(
      loop_.watch(k.fd, POLLIN, [](std::uint32_t) { ADD_FAILURE() << "the old owner's handler ran"; }));
  pool_.give(0, std::move(k.stream));
  EXPECT_EQ(pool_.idle(), 1u);
  k.provider.reset();
  loop_.run_once(base::Millis(100));
  EXPECT_EQ(pool_.idle(), 0u);
  EXPECT_EQ(take(), nullptr);
  loop_.run_once(base::Millis(0));
}

}  // namespace
}  // namespace abox::broker
