#include "base/random.h"

#include <gtest/gtest.h>

#include <set>

namespace abox::base {
namespace {

TEST(SeededRandom, IsDeterministic) {
  SeededRandom a(42);
  SeededRandom b(42);
  SeededRandom c(43);
  for (int i = 0; i < 100; ++i) {
    auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

TEST(SystemRandom, RefillsAndVaries) {
  SystemRandom r;
  std::set<std::uint64_t> seen;
  // 200 draws cross the 64-value pool boundary three times.
  for (int i = 0; i < 200; ++i) seen.insert(r.next_u64());
  EXPECT_GT(seen.size(), 195u);  // 64-bit collisions are practically impossible
  std::set<std::uint16_t> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(r.next_u16());
  EXPECT_GT(ids.size(), 900u);  // 1000 draws of 16 bits: a few repeats, not many
}

}  // namespace
}  // namespace abox::base
