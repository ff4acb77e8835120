// Flow control, box-guest's side: the output credit never lets more through
// than the host granted, and stdin never holds more than its window, whatever
// the host sends and however slowly the command reads.
#include "guest/box_guest/flow_control.h"

#include <gtest/gtest.h>

#include "base/random.h"

namespace abox::guest {
namespace {

TEST(OutputCredit, AllowanceSpendAndGrant) {
  OutputCredit c(1000);
  EXPECT_EQ(c.allowance(65536), 1000u);
  c.spend(600);
  EXPECT_EQ(c.allowance(65536), 400u);
  c.spend(1000);  // more than there is: stops at zero
  EXPECT_EQ(c.available(), 0u);
  EXPECT_EQ(c.allowance(10), 0u);
  c.grant(70000);
  EXPECT_EQ(c.allowance(65536), 65536u);
}

TEST(OutputCredit, EndlessGrantsSaturate) {
  OutputCredit c(0xFFFF'FFFFu);
  for (int i = 0; i < 1000; ++i) c.grant(0xFFFF'FFFFu);
  EXPECT_EQ(c.available(), kMaxOutputCredit);
}

TEST(StdinFlow, FirstGrantIsTheWindowAndBytesOverItAreDropped) {
  StdinFlow f;
  EXPECT_EQ(f.open(), kStdinWindow);
  std::vector<std::uint8_t> big(kStdinWindow + 100, 7);
  EXPECT_EQ(f.accept(big), 100u);
  EXPECT_EQ(f.buffered(), kStdinWindow);
  EXPECT_EQ(f.outstanding(), 0u);
  EXPECT_EQ(f.accept(std::vector<std::uint8_t>(5, 1)), 5u) << "no credit left: all dropped";
}

TEST(StdinFlow, MoreCreditOnlyOnceHalfTheWindowIsFree) {
  StdinFlow f;
  f.open();
  std::vector<std::uint8_t> data(kStdinWindow, 1);
  ASSERT_EQ(f.accept(data), 0u);
  EXPECT_EQ(f.consumed(1000), 0u) << "most of the window still in use";
  const auto grant = f.consumed(kStdinWindow / 2);
  EXPECT_EQ(grant, 1000u + kStdinWindow / 2);
  EXPECT_EQ(f.outstanding() + f.buffered(), kStdinWindow);
  EXPECT_EQ(f.pending().size(), kStdinWindow - 1000 - kStdinWindow / 2);
}

TEST(StdinFlow, RandomHostAndSlowReaderNeverExceedTheWindow) {
  base::SeededRandom random(42);
  StdinFlow f;
  std::uint64_t credit = f.open();  // what the host believes it may send
  std::uint64_t sent = 0, written = 0;
  std::uint8_t next_in = 0, next_out = 0;
  for (int step = 0; step < 100000; ++step) {
    if (random.next_u64() % 2 == 0 && credit > 0) {
      std::size_t n = 1 + random.next_u64() % std::min<std::uint64_t>(credit, 70000);
      std::vector<std::uint8_t> chunk(n);
      for (auto& b : chunk) b = next_in++;
      ASSERT_EQ(f.accept(chunk), 0u);
      credit -= n;
      sent += n;
    } else {
      auto pending = f.pending();
      std::size_t n = pending.empty() ? 0 : 1 + random.next_u64() % pending.size();
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(pending[i], next_out++) << "bytes reordered or lost";
      credit += f.consumed(n);
      written += n;
    }
    ASSERT_LE(f.buffered() + f.outstanding(), kStdinWindow);
    ASSERT_EQ(f.outstanding(), credit);
  }
  EXPECT_GT(written, 1'000'000u);
  EXPECT_EQ(sent - written, f.buffered());
}

TEST(StdinFlow, DiscardDropsWhatIsBufferedAndGrantsNoMore) {
  StdinFlow f;
  f.open();
  f.accept(std::vector<std::uint8_t>(1000, 1));
  f.discard();
  EXPECT_EQ(f.buffered(), 0u);
  EXPECT_EQ(f.accept(std::vector<std::uint8_t>(10, 1)), 0u) << "within credit: taken, then thrown away";
  EXPECT_EQ(f.buffered(), 0u);
  EXPECT_EQ(f.consumed(0), 0u);
}

}  // namespace
}  // namespace abox::guest
