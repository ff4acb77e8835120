// The control channel's frames: round trips, the MAC and sequence rules, and
// the nasty cases of a hostile stream (split anywhere, lengths that lie,
// replays, frames of the other direction, floods that must not grow memory).
#include "guest/protocol/frame.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "base/byte_reader.h"

namespace abox::guest {
namespace {

ChannelKey test_key(std::uint8_t fill) {
  ChannelKey k{};
  k.fill(fill);
  return k;
}

// Feeds bytes into a reader in pieces of `step` and collects what comes out.
struct Collected {
  std::vector<std::pair<std::uint8_t, std::string>> frames;
  std::vector<FrameError> errors;
};

Collected feed(FrameReader& reader, std::span<const std::uint8_t> bytes, std::size_t step) {
  Collected c;
  std::size_t at = 0;
  for (int guard = 0; guard < 1'000'000; ++guard) {
    for (;;) {
      auto f = reader.next();
      if (!f.ok()) {
        c.errors.push_back(f.error());
        if (f.error() == FrameError::kLengthTooLarge || f.error() == FrameError::kLengthTooSmall) return c;
        continue;
      }
      if (!*f) break;
      c.frames.emplace_back((*f)->type, std::string((*f)->payload.begin(), (*f)->payload.end()));
    }
    if (at == bytes.size()) break;
    auto space = reader.space();
    std::size_t n = std::min({step, space.size(), bytes.size() - at});
    std::memcpy(space.data(), bytes.data() + at, n);
    reader.commit(n);
    at += n;
  }
  return c;
}

TEST(ControlFrame, RoundTripUnkeyedThenKeyedAtEverySplit) {
  FrameWriter w(Direction::kGuestToHost);
  std::vector<std::uint8_t> wire;
  w.append(wire, 1, base::as_bytes("hello"));
  std::vector<std::uint8_t> keyed_part;
  w.set_key(test_key(7));
  w.append(keyed_part, 4, base::as_bytes("out"));
  w.append(keyed_part, 6, {});

  for (std::size_t step : {1u, 2u, 3u, 7u, 64u, 100000u}) {
    FrameReader r(Direction::kGuestToHost);
    auto first = feed(r, wire, step);
    ASSERT_EQ(first.frames.size(), 1u);
    EXPECT_EQ(first.frames[0].second, "hello");
    r.set_key(test_key(7));
    auto rest = feed(r, keyed_part, step);
    ASSERT_TRUE(rest.errors.empty()) << step;
    ASSERT_EQ(rest.frames.size(), 2u);
    EXPECT_EQ(rest.frames[0].first, 4);
    EXPECT_EQ(rest.frames[0].second, "out");
    EXPECT_EQ(rest.frames[1].first, 6);
    EXPECT_EQ(r.buffered(), 0u);
  }
}

TEST(ControlFrame, WrongKeyIsBadMacAndTheStreamStaysInStep) {
  FrameWriter forger(Direction::kGuestToHost), honest(Direction::kGuestToHost);
  forger.set_key(test_key(1));
  honest.set_key(test_key(2));
  std::vector<std::uint8_t> wire;
  forger.append(wire, 4, base::as_bytes("forged"));
  honest.append(wire, 4, base::as_bytes("real"));
  FrameReader r(Direction::kGuestToHost);
  r.set_key(test_key(2));
  auto c = feed(r, wire, 5);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], FrameError::kBadMac);
  ASSERT_EQ(c.frames.size(), 1u);
  EXPECT_EQ(c.frames[0].second, "real");
}

TEST(ControlFrame, UnkeyedReaderRefusesAMacThatIsNotZeros) {
  FrameWriter w(Direction::kGuestToHost);
  w.set_key(test_key(3));
  std::vector<std::uint8_t> wire;
  w.append(wire, 1, base::as_bytes("x"));
  FrameReader r(Direction::kGuestToHost);
  auto c = feed(r, wire, 1000);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], FrameError::kBadMac);
}

TEST(ControlFrame, TheOtherDirectionsFramesDoNotVerify) {
  FrameWriter host(Direction::kHostToGuest);
  host.set_key(test_key(9));
  std::vector<std::uint8_t> wire;
  host.append(wire, 4, base::as_bytes("reflected"));
  FrameReader r(Direction::kGuestToHost);
  r.set_key(test_key(9));
  auto c = feed(r, wire, 1000);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], FrameError::kBadMac);
}

TEST(ControlFrame, ReplayedAndSkippedSequenceNumbersAreRefused) {
  FrameWriter w(Direction::kGuestToHost);
  w.set_key(test_key(4));
  std::vector<std::uint8_t> first, second;
  w.append(first, 4, base::as_bytes("a"));
  w.append(second, 4, base::as_bytes("b"));
  FrameReader r(Direction::kGuestToHost);
  r.set_key(test_key(4));
  // The second frame first: a skipped number.
  auto c = feed(r, second, 1000);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], FrameError::kBadSequence);
  c = feed(r, first, 1000);
  ASSERT_EQ(c.frames.size(), 1u);
  // The first again: a replay.
  c = feed(r, first, 1000);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0], FrameError::kBadSequence);
}

TEST(ControlFrame, LengthsThatLieBreakTheStreamForGood) {
  for (std::uint32_t length : {0u, 1u, 40u, static_cast<std::uint32_t>(kMaxFrameBytes - 3), 0xffffffffu}) {
    std::vector<std::uint8_t> wire = {
        static_cast<std::uint8_t>(length >> 24), static_cast<std::uint8_t>(length >> 16),
        static_cast<std::uint8_t>(length >> 8), static_cast<std::uint8_t>(length)};
    wire.resize(64, 0);
    FrameReader r(Direction::kGuestToHost);
    auto c = feed(r, wire, 1000);
    ASSERT_EQ(c.errors.size(), 1u) << length;
    EXPECT_TRUE(c.errors[0] == FrameError::kLengthTooSmall || c.errors[0] == FrameError::kLengthTooLarge);
    // And it stays broken: nothing after can be read as a frame.
    auto again = r.next();
    EXPECT_FALSE(again.ok());
  }
}

TEST(ControlFrame, TheLargestFrameFitsAndTheReaderNeverGrows) {
  FrameWriter w(Direction::kGuestToHost);
  w.set_key(test_key(5));
  std::vector<std::uint8_t> payload(kMaxPayload, 'z');
  std::vector<std::uint8_t> wire;
  for (int i = 0; i < 5; ++i) w.append(wire, 4, payload);
  FrameReader r(Direction::kGuestToHost);
  r.set_key(test_key(5));
  auto c = feed(r, wire, 3001);  // an odd step, so frames straddle every read
  EXPECT_TRUE(c.errors.empty());
  EXPECT_EQ(c.frames.size(), 5u);
  EXPECT_LE(r.space().size(), kMaxFrameBytes);
}

TEST(ControlFrame, GarbageNeverYieldsAFrameWithoutTheKey) {
  // Random bytes against a keyed reader: every frame that parses must fail
  // its MAC; nothing is delivered.
  std::uint64_t x = 12345;
  std::vector<std::uint8_t> wire(200000);
  for (auto& b : wire) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::uint8_t>(x >> 56);
  }
  // Make the first length plausible so some frames are parsed at all.
  wire[0] = 0;
  wire[1] = 0;
  wire[2] = 0;
  wire[3] = 60;
  FrameReader r(Direction::kGuestToHost);
  r.set_key(test_key(6));
  auto c = feed(r, wire, 4096);
  EXPECT_TRUE(c.frames.empty());
  EXPECT_FALSE(c.errors.empty());
}

}  // namespace
}  // namespace abox::guest
