// SocketReadAhead over a socket pair, the test writing the peer's end: one
// read(2) takes all the socket holds and the SSL's small reads are served
// from it in order; an empty socket is a retryable read, its end a 0, an
// error a -1 with read(2)'s errno; the buffer goes when it is drained.
#include "broker/socket_read_ahead.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>

#include "base/unique_fd.h"

namespace abox::broker {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

class SocketReadAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    ours_.reset(fds[0]);
    peer_.reset(fds[1]);
  }
  void peer_sends(const std::string& bytes) {
    ASSERT_EQ(::write(peer_.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  std::string bio_read(BIO* b, int n) {
    std::string out(static_cast<std::size_t>(n), '\0');
    const int got = BIO_read(b, out.data(), n);
    out.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
    return out;
  }

  base::UniqueFd ours_;
  base::UniqueFd peer_;
};

TEST_F(SocketReadAheadTest, OneReadTakesWhatTheSocketHoldsAndServesItInPieces) {
  SocketReadAhead ahead(ours_.get());
  Bio bio(ahead.new_bio());
  ASSERT_NE(bio, nullptr);
  std::string two_records(700, 'a');
  two_records += std::string(300, 'b');
  peer_sends(two_records);

  EXPECT_EQ(bio_read(bio.get(), 5), "aaaaa");
  EXPECT_EQ(ahead.received(), 1000u) << "the whole socket in one read";
  EXPECT_EQ(ahead.buffered(), 995u);
  EXPECT_EQ(bio_read(bio.get(), 695), std::string(695, 'a'));
  EXPECT_EQ(ahead.buffered(), 300u) << "the second record waits here, not in the socket";
  EXPECT_EQ(bio_read(bio.get(), 4096), std::string(300, 'b'));
  EXPECT_EQ(ahead.buffered(), 0u);
  EXPECT_EQ(ahead.received(), 1000u);
}

TEST_F(SocketReadAheadTest, AnEmptySocketIsARetryableRead) {
  SocketReadAhead ahead(ours_.get());
  Bio bio(ahead.new_bio());
  std::array<char, 16> buf{};
  EXPECT_EQ(BIO_read(bio.get(), buf.data(), buf.size()), -1);
  EXPECT_TRUE(BIO_should_retry(bio.get()));
  EXPECT_TRUE(BIO_should_read(bio.get()));
  // Bytes after the retry are read as usual, and clear the retry flag.
  peer_sends("xyz");
  EXPECT_EQ(bio_read(bio.get(), 16), "xyz");
  EXPECT_FALSE(BIO_should_retry(bio.get()));
}

TEST_F(SocketReadAheadTest, TheEndOfTheStreamReadsAsZeroAfterWhatWasBuffered) {
  SocketReadAhead ahead(ours_.get());
  Bio bio(ahead.new_bio());
  peer_sends("last");
  peer_.reset();
  EXPECT_EQ(bio_read(bio.get(), 2), "la");
  EXPECT_EQ(bio_read(bio.get(), 16), "st");
  std::array<char, 16> buf{};
  EXPECT_EQ(BIO_read(bio.get(), buf.data(), buf.size()), 0);
  EXPECT_FALSE(BIO_should_retry(bio.get()));
}

TEST_F(SocketReadAheadTest, AnErrorIsNotRetryableAndKeepsItsErrno) {
  SocketReadAhead ahead(-1);  // read(2) fails with EBADF
  Bio bio(ahead.new_bio());
  std::array<char, 16> buf{};
  errno = 0;
  EXPECT_EQ(BIO_read(bio.get(), buf.data(), buf.size()), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_FALSE(BIO_should_retry(bio.get()));
}

TEST_F(SocketReadAheadTest, MoreThanARecordIsReadAtMostACapacityAtATime) {
  SocketReadAhead ahead(ours_.get());
  Bio bio(ahead.new_bio());
  const std::string big(SocketReadAhead::kCapacity + 100, 'z');
  peer_sends(big);
  EXPECT_EQ(bio_read(bio.get(), 1), "z");
  EXPECT_EQ(ahead.received(), SocketReadAhead::kCapacity);
  std::string rest;
  for (int i = 0; i < 8 && rest.size() < big.size() - 1; ++i) rest += bio_read(bio.get(), 65536);
  EXPECT_EQ(rest.size(), big.size() - 1);
  EXPECT_EQ(ahead.received(), big.size());
}

}  // namespace
}  // namespace abox::broker
