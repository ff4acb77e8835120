// DetachKeys: the detach sequence found in what is typed, however it is
// split over reads; everything else forwarded in order; docker's notation.
#include "engine/cli/detach_keys.h"

#include <gtest/gtest.h>

#include <string>

namespace abox::engine {
namespace {

std::vector<std::uint8_t> b(std::string_view s) {
  return {s.begin(), s.end()};
}

TEST(DetachKeys, TheSequenceDetachesAndIsNotForwarded) {
  DetachKeys d(*parse_detach_keys("ctrl-p,ctrl-q"));
  std::vector<std::uint8_t> fwd;
  EXPECT_TRUE(d.feed(b("ls\r\x10\x11"
                       "after"),
                     fwd));
  EXPECT_EQ(fwd, b("ls\r")) << "nothing of the sequence, nothing after it";
}

TEST(DetachKeys, ASequenceSplitOverReadsIsFound) {
  DetachKeys d(*parse_detach_keys("ctrl-p,ctrl-q"));
  std::vector<std::uint8_t> fwd;
  EXPECT_FALSE(d.feed(b("x\x10"), fwd));
  EXPECT_EQ(fwd, b("x")) << "Ctrl-P is held";
  EXPECT_EQ(d.held().size(), 1u);
  EXPECT_TRUE(d.feed(b("\x11"), fwd));
  EXPECT_EQ(fwd, b("x"));
}

TEST(DetachKeys, ABrokenSequenceIsForwardedInOrder) {
  DetachKeys d(*parse_detach_keys("ctrl-p,ctrl-q"));
  std::vector<std::uint8_t> fwd;
  EXPECT_FALSE(d.feed(b("\x10"), fwd));
  EXPECT_FALSE(d.feed(b("a"), fwd));
  EXPECT_EQ(fwd, b("\x10"
                   "a"));
  fwd.clear();
  // Ctrl-P Ctrl-P Ctrl-Q: the first Ctrl-P goes to the command, the rest detaches.
  EXPECT_TRUE(d.feed(b("\x10\x10\x11"), fwd));
  EXPECT_EQ(fwd, b("\x10"));
  // Ctrl-Q alone is just a key.
  fwd.clear();
  DetachKeys d2(*parse_detach_keys("ctrl-p,ctrl-q"));
  EXPECT_FALSE(d2.feed(b("\x11\x03"), fwd));
  EXPECT_EQ(fwd, b("\x11\x03"));
}

TEST(DetachKeys, OtherSequences) {
  DetachKeys one(*parse_detach_keys("ctrl-a"));
  std::vector<std::uint8_t> fwd;
  EXPECT_TRUE(one.feed(b("ab\x01"), fwd));
  EXPECT_EQ(fwd, b("ab"));
  DetachKeys three(*parse_detach_keys("ctrl-x,q,Q"));
  fwd.clear();
  EXPECT_FALSE(three.feed(b("\x18q"), fwd));
  EXPECT_TRUE(three.feed(b("Q"), fwd));
  EXPECT_TRUE(fwd.empty());
}

TEST(DetachKeys, DockersNotation) {
  EXPECT_EQ(*parse_detach_keys("ctrl-p,ctrl-q"), (std::vector<std::uint8_t>{0x10, 0x11}));
  EXPECT_EQ(*parse_detach_keys("ctrl-P"), (std::vector<std::uint8_t>{0x10}));
  EXPECT_EQ(*parse_detach_keys("ctrl-@,ctrl-[,ctrl-\\,ctrl-],ctrl-^,ctrl-_"),
            (std::vector<std::uint8_t>{0, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}));
  EXPECT_EQ(*parse_detach_keys("a,b"), (std::vector<std::uint8_t>{'a', 'b'}));
  for (const char* bad :
       {"", ",", "ctrl-", "ctrl-1", "ctrl-pq", "ab", "a,,b", "a,", " ", "ctrl-p,ctrl-q,a,b,c,d,e,f,g"})
    EXPECT_FALSE(parse_detach_keys(bad)) << bad;
}

}  // namespace
}  // namespace abox::engine
