// GuestSendBuffer: bytes stay where lwIP's segments point until released,
// in order, across chunk boundaries; an idle buffer holds nothing.
#include "netstack/stack/guest_send_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace abox::netstack {
namespace {

constexpr std::size_t kChunk = GuestSendBuffer::kChunkSize;

TEST(GuestSendBufferTest, TailIsNeverEmptyAndCommitsFillIt) {
  GuestSendBuffer b;
  auto t = b.tail();
  ASSERT_EQ(t.size(), kChunk);
  std::memset(t.data(), 'a', 100);
  b.commit(100);
  EXPECT_EQ(b.held(), 100u);
  auto t2 = b.tail();
  EXPECT_EQ(t2.data(), t.data() + 100);  // the same chunk, right after
  EXPECT_EQ(t2.size(), kChunk - 100);
  EXPECT_EQ(b.chunks(), 1u);
}

TEST(GuestSendBufferTest, CommittedBytesStayPutUntilReleasedAcrossChunks) {
  GuestSendBuffer b;
  struct Piece {
    const std::uint8_t* where;
    std::size_t offset;  // of its first byte in the stream
    std::size_t size;
    std::uint8_t fill;
  };
  std::vector<Piece> written;
  std::uint8_t fill = 1;
  std::size_t total = 0;
  while (total < 3 * kChunk + 500) {
    auto t = b.tail();
    const std::size_t n = std::min<std::size_t>(t.size(), 7000);
    std::memset(t.data(), fill, n);
    b.commit(n);
    written.push_back({t.data(), total, n, fill});
    total += n;
    ++fill;
  }
  EXPECT_EQ(b.held(), total);
  EXPECT_EQ(b.chunks(), 4u);
  // Release a little less than two chunks: the first chunk goes, and every
  // byte not yet released is still where it was written.
  const std::size_t released = 2 * kChunk - 10;
  b.release(released);
  EXPECT_EQ(b.held(), total - released);
  EXPECT_EQ(b.chunks(), 3u);
  for (const Piece& p : written) {
    if (p.offset + p.size <= released) continue;
    const std::size_t skip = p.offset < released ? released - p.offset : 0;
    for (std::size_t i = skip; i < p.size; ++i) ASSERT_EQ(p.where[i], p.fill) << "piece at " << p.offset;
  }
  b.release(b.held());
  EXPECT_EQ(b.held(), 0u);
  EXPECT_EQ(b.chunks(), 0u) << "an idle flow holds no chunk";
}

TEST(GuestSendBufferTest, AnUnusedTailIsDroppedWhenNothingIsHeld) {
  GuestSendBuffer b;
  (void)b.tail();  // a read that found nothing (EAGAIN)
  EXPECT_EQ(b.chunks(), 1u);
  b.commit(10);
  b.release(10);
  EXPECT_EQ(b.chunks(), 0u);
}

TEST(GuestSendBufferTest, ReleasingMoreThanHeldIsABrokenInvariant) {
  GuestSendBuffer b;
  (void)b.tail();
  b.commit(5);
  EXPECT_DEATH(b.release(6), "release of more than is held");
  EXPECT_DEATH(b.commit(kChunk), "commit past the tail");
}

}  // namespace
}  // namespace abox::netstack
