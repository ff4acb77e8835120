// MemoryTrimmer, against this process's real heap and RSS: after a burst of
// 64 KiB blocks (the size of a flow's GuestSendBuffer chunks, below glibc's
// mmap threshold, so they live in the arena) is freed with a few blocks
// kept in between (the top of the heap cannot simply shrink), RSS stays up
// until a check trims, and then comes down; a second check right after does
// not trim again; memory in use is never trimmed for.
//
// Bounds are generous (half of what was freed), and nothing is timed. An
// ASan build replaces malloc (malloc_trim has nothing to do there): skipped.
#include "netstack/program/memory_trimmer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "io/event_loop.h"
#include "netstack/program/stats.h"
#include "tests/support/asan.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kBlock = 64 * 1024;
constexpr std::size_t kBlocks = 1024;  // 64 MiB
constexpr std::uint64_t kFreed = kBlock * kBlocks;

// malloc'd blocks, touched so they are resident. unique_ptr with free():
// the test is about malloc's arenas, not operator new's.
struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};
using Block = std::unique_ptr<std::uint8_t, FreeDeleter>;

std::vector<Block> allocate_burst() {
  std::vector<Block> blocks;
  blocks.reserve(kBlocks);
  for (std::size_t i = 0; i < kBlocks; ++i) {
    blocks.emplace_back(static_cast<std::uint8_t*>(std::malloc(kBlock)));
    std::memset(blocks.back().get(), static_cast<int>(i), kBlock);
  }
  return blocks;
}

class MemoryTrimmerTest : public testing::Test {
 protected:
  void SetUp() override {
#if defined(ABOX_TEST_ASAN)
    GTEST_SKIP() << "ASan replaces malloc: there is no glibc arena to trim";
#endif
    if (memory_.read().rss_bytes == 0) GTEST_SKIP() << "no /proc/self/statm";
  }
  MemoryProbe memory_;
  io::EventLoop loop_;
};

TEST_F(MemoryTrimmerTest, RssComesBackDownAfterABurstIsFreed) {
  MemoryTrimmer trimmer(loop_, memory_);
  std::vector<Block> blocks = allocate_burst();
  const std::uint64_t peak = memory_.read().rss_bytes;
  // Free all but every 64th block: 1 MiB stays in use, spread over the
  // whole burst, so the heap's top stays where it is.
  std::vector<Block> kept;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % 64 == 63) kept.push_back(std::move(blocks[i]));
  }
  blocks.clear();
  const std::uint64_t before = memory_.read().rss_bytes;
  ASSERT_GT(before + kFreed / 2, peak) << "glibc gave the burst back by itself: nothing to show";

  EXPECT_TRUE(trimmer.check());
  const std::uint64_t after = memory_.read().rss_bytes;
  EXPECT_LT(after + kFreed / 2, before) << "RSS " << before << " -> " << after;
  EXPECT_EQ(trimmer.counters().trims, 1u);
  EXPECT_GT(trimmer.counters().released_bytes, kFreed / 2);

  // Nothing has grown since: no second trim.
  EXPECT_FALSE(trimmer.check());
  EXPECT_EQ(trimmer.counters().trims, 1u);
}

TEST_F(MemoryTrimmerTest, MemoryInUseIsNotTrimmedFor) {
  MemoryTrimmer trimmer(loop_, memory_);
  std::vector<Block> blocks = allocate_burst();  // all in use
  EXPECT_FALSE(trimmer.check());
  EXPECT_EQ(trimmer.counters().trims, 0u);
}

}  // namespace
}  // namespace abox::netstack
