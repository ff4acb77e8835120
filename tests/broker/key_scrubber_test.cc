#include "broker/key_scrubber.h"

#include <gtest/gtest.h>

#include <string>

namespace abox::broker {
namespace {

constexpr std::string_view kKey = "sk-live-ABCDEF123456";

std::string scrub_in_pieces(std::string_view text, std::size_t piece, KeyScrubber& s) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += piece) s.feed(text.substr(i, piece), out);
  s.finish(out);
  return out;
}

TEST(KeyScrubber, OverwritesEveryOccurrenceInPlace) {
  KeyScrubber s(kKey);
  std::string text = "x-api-key: " + std::string(kKey) + "\nagain " + std::string(kKey) + std::string(kKey);
  std::string out = scrub_in_pieces(text, text.size(), s);
  EXPECT_EQ(out.size(), text.size());
  EXPECT_EQ(out.find(kKey), std::string::npos);
  EXPECT_EQ(s.scrubbed(), 3u);
  EXPECT_NE(out.find(std::string(kKey.size(), '*')), std::string::npos);
}

TEST(KeyScrubber, CatchesAKeySplitAcrossPiecesOfEverySize) {
  std::string text = "data: {\"echo\":\"" + std::string(kKey) + "\"}\n\n" + std::string(kKey);
  for (std::size_t piece = 1; piece <= text.size(); ++piece) {
    KeyScrubber s(kKey);
    std::string out = scrub_in_pieces(text, piece, s);
    EXPECT_EQ(out.size(), text.size()) << piece;
    EXPECT_EQ(out.find(kKey), std::string::npos) << piece;
    EXPECT_EQ(s.scrubbed(), 2u) << piece;
  }
}

TEST(KeyScrubber, HoldsBackOnlyAPossibleStartOfTheKey) {
  KeyScrubber s(kKey);
  std::string out;
  s.feed("data: one\n\n", out);
  EXPECT_EQ(out, "data: one\n\n");  // nothing held: an SSE event is never delayed
  EXPECT_EQ(s.held(), 0u);
  out.clear();
  s.feed("tail sk-li", out);
  EXPECT_EQ(out, "tail ");
  EXPECT_EQ(s.held(), 5u);
  out.clear();
  s.feed("ve-nope", out);  // not the key after all
  EXPECT_EQ(out, "sk-live-nope");
  EXPECT_EQ(s.scrubbed(), 0u);
}

TEST(KeyScrubber, SelfOverlappingKey) {
  KeyScrubber s("aab");
  std::string out = scrub_in_pieces("aaab aab", 1, s);
  EXPECT_EQ(out, "a*** ***");
}

TEST(KeyScrubber, EmptyKeyPassesEverything) {
  KeyScrubber s;
  std::string out;
  s.feed("anything", out);
  EXPECT_EQ(out, "anything");
}

}  // namespace
}  // namespace abox::broker
