#include "base/byte_reader.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace abox::base {
namespace {

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

TEST(ByteReaderTest, DefaultIsEmpty) {
  ByteReader r;
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.position(), 0u);
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.u8());
  EXPECT_FALSE(r.peek());
  EXPECT_TRUE(r.rest().empty());
}

TEST(ByteReaderTest, EmptySpanFailsEveryRead) {
  std::span<const std::uint8_t> none;
  ByteReader r(none);
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.u8());
  EXPECT_FALSE(r.u16be());
  EXPECT_FALSE(r.u32be());
  EXPECT_FALSE(r.peek(0));
  EXPECT_FALSE(r.peek(kMax));
  EXPECT_FALSE(r.skip(1));
  EXPECT_FALSE(r.skip(kMax));
  EXPECT_FALSE(r.seek(1));
  EXPECT_FALSE(r.bytes(1));
  EXPECT_EQ(r.position(), 0u);

  // Zero-length operations succeed on an empty reader.
  EXPECT_TRUE(r.skip(0));
  EXPECT_TRUE(r.seek(0));
  auto zero = r.bytes(0);
  ASSERT_TRUE(zero);
  EXPECT_TRUE(zero->empty());
  EXPECT_EQ(r.position(), 0u);
}

TEST(ByteReaderTest, EmptyStringView) {
  ByteReader r(as_bytes(""));
  EXPECT_EQ(r.size(), 0u);
  EXPECT_FALSE(r.u8());
}

TEST(ByteReaderTest, BigEndianByteOrder) {
  const std::array<std::uint8_t, 7> data = {0x12, 0x34, 0xDE, 0xAD, 0xBE, 0xEF, 0xFF};
  ByteReader r(data);
  EXPECT_EQ(r.u16be(), std::uint16_t{0x1234});
  EXPECT_EQ(r.u32be(), std::uint32_t{0xDEADBEEF});
  EXPECT_EQ(r.u8(), std::uint8_t{0xFF});
  EXPECT_TRUE(r.empty());
}

TEST(ByteReaderTest, HighBitsDoNotSignExtend) {
  const std::array<std::uint8_t, 6> data = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE};
  ByteReader r(data);
  EXPECT_EQ(r.u32be(), std::uint32_t{0xFFFFFFFF});
  EXPECT_EQ(r.u16be(), std::uint16_t{0xFFFE});
}

TEST(ByteReaderTest, ReadsAtExactEndSucceed) {
  const std::array<std::uint8_t, 4> data = {1, 2, 3, 4};
  {
    ByteReader r(data);
    EXPECT_EQ(r.u32be(), std::uint32_t{0x01020304});
    EXPECT_EQ(r.position(), 4u);
    EXPECT_TRUE(r.empty());
  }
  {
    ByteReader r(data);
    ASSERT_TRUE(r.skip(2));
    EXPECT_EQ(r.u16be(), std::uint16_t{0x0304});
    EXPECT_TRUE(r.empty());
  }
  {
    ByteReader r(data);
    ASSERT_TRUE(r.skip(3));
    EXPECT_EQ(r.u8(), std::uint8_t{4});
    EXPECT_TRUE(r.empty());
  }
  {
    ByteReader r(data);
    auto all = r.bytes(4);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 4u);
    EXPECT_EQ(all->data(), data.data());
    EXPECT_TRUE(r.empty());
  }
}

// Each read one byte past the end fails and leaves the cursor where it was.
TEST(ByteReaderTest, ReadsOnePastEndFailWithoutMoving) {
  const std::array<std::uint8_t, 5> data = {1, 2, 3, 4, 5};
  ByteReader r(data);
  ASSERT_TRUE(r.skip(2));  // 3 bytes remain
  EXPECT_FALSE(r.u32be());
  EXPECT_EQ(r.position(), 2u);
  EXPECT_FALSE(r.bytes(4));
  EXPECT_EQ(r.position(), 2u);
  EXPECT_FALSE(r.skip(4));
  EXPECT_EQ(r.position(), 2u);
  EXPECT_FALSE(r.peek(3));
  EXPECT_EQ(r.position(), 2u);

  ASSERT_TRUE(r.skip(2));  // 1 byte remains
  EXPECT_FALSE(r.u16be());
  EXPECT_EQ(r.position(), 4u);
  EXPECT_FALSE(r.u32be());
  EXPECT_EQ(r.position(), 4u);
  EXPECT_EQ(r.u8(), std::uint8_t{5});  // the byte is still there

  EXPECT_FALSE(r.u8());
  EXPECT_EQ(r.position(), 5u);
  EXPECT_FALSE(r.bytes(1));
  EXPECT_EQ(r.position(), 5u);
}

TEST(ByteReaderTest, FailedReadThenSmallerReadSucceeds) {
  const std::array<std::uint8_t, 3> data = {0xAB, 0xCD, 0xEF};
  ByteReader r(data);
  EXPECT_FALSE(r.u32be());
  EXPECT_EQ(r.u16be(), std::uint16_t{0xABCD});
  EXPECT_FALSE(r.u16be());
  EXPECT_EQ(r.u8(), std::uint8_t{0xEF});
}

TEST(ByteReaderTest, SeekBounds) {
  const std::array<std::uint8_t, 4> data = {1, 2, 3, 4};
  ByteReader r(data);
  ASSERT_TRUE(r.skip(1));

  EXPECT_TRUE(r.seek(r.size()));
  EXPECT_EQ(r.position(), 4u);
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.u8());

  EXPECT_TRUE(r.seek(2));
  EXPECT_FALSE(r.seek(r.size() + 1));
  EXPECT_EQ(r.position(), 2u);
  EXPECT_FALSE(r.seek(kMax));
  EXPECT_EQ(r.position(), 2u);

  // Backwards is allowed (DNS compression pointers).
  EXPECT_TRUE(r.seek(0));
  EXPECT_EQ(r.u8(), std::uint8_t{1});
}

TEST(ByteReaderTest, SkipOverflow) {
  const std::array<std::uint8_t, 4> data = {1, 2, 3, 4};
  ByteReader r(data);
  ASSERT_TRUE(r.skip(1));
  // pos_ + n would wrap: must be refused, not wrap around to a small cursor.
  EXPECT_FALSE(r.skip(kMax));
  EXPECT_EQ(r.position(), 1u);
  EXPECT_FALSE(r.skip(kMax - 1));
  EXPECT_EQ(r.position(), 1u);
  EXPECT_FALSE(r.bytes(kMax));
  EXPECT_EQ(r.position(), 1u);
  EXPECT_TRUE(r.skip(3));
  EXPECT_EQ(r.position(), 4u);
  EXPECT_TRUE(r.skip(0));
  EXPECT_FALSE(r.skip(1));
  EXPECT_FALSE(r.skip(kMax));
  EXPECT_EQ(r.position(), 4u);
}

TEST(ByteReaderTest, PeekBounds) {
  const std::array<std::uint8_t, 3> data = {10, 20, 30};
  ByteReader r(data);
  EXPECT_EQ(r.peek(), std::uint8_t{10});
  EXPECT_EQ(r.peek(2), std::uint8_t{30});
  EXPECT_FALSE(r.peek(3));
  EXPECT_FALSE(r.peek(kMax));
  EXPECT_EQ(r.position(), 0u);

  ASSERT_TRUE(r.skip(2));
  EXPECT_EQ(r.peek(0), std::uint8_t{30});
  EXPECT_FALSE(r.peek(1));
  ASSERT_TRUE(r.skip(1));
  EXPECT_FALSE(r.peek(0));
  EXPECT_EQ(r.position(), 3u);
}

TEST(ByteReaderTest, BytesIsASubSpanWithoutCopy) {
  const std::array<std::uint8_t, 5> data = {1, 2, 3, 4, 5};
  ByteReader r(data);
  ASSERT_TRUE(r.skip(1));
  auto mid = r.bytes(3);
  ASSERT_TRUE(mid);
  EXPECT_EQ(mid->data(), data.data() + 1);
  EXPECT_EQ(mid->size(), 3u);
  EXPECT_EQ((*mid)[0], 2);
  EXPECT_EQ((*mid)[2], 4);
  EXPECT_EQ(r.position(), 4u);
}

TEST(ByteReaderTest, RestDoesNotMove) {
  const std::array<std::uint8_t, 3> data = {1, 2, 3};
  ByteReader r(data);
  ASSERT_TRUE(r.skip(1));
  auto rest = r.rest();
  EXPECT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest.data(), data.data() + 1);
  EXPECT_EQ(r.position(), 1u);
  ASSERT_TRUE(r.seek(3));
  EXPECT_TRUE(r.rest().empty());
}

TEST(ByteReaderTest, AsBytesViewsText) {
  std::string_view text = "GET /\r\n";
  ByteReader r(as_bytes(text));
  EXPECT_EQ(r.size(), text.size());
  EXPECT_EQ(r.u8(), std::uint8_t{'G'});
  EXPECT_EQ(r.rest().data(), reinterpret_cast<const std::uint8_t*>(text.data()) + 1);
  // Bytes >= 0x80 come out unsigned.
  ByteReader high(as_bytes("\xff\x80"));
  EXPECT_EQ(high.u16be(), std::uint16_t{0xFF80});
}

// The invariant position() <= size() holds over any sequence of operations.
TEST(ByteReaderTest, CursorNeverPassesEnd) {
  std::vector<std::uint8_t> data(7, 0xAA);
  for (std::size_t start = 0; start <= data.size(); ++start) {
    for (int op = 0; op < 6; ++op) {
      ByteReader r(data);
      ASSERT_TRUE(r.seek(start));
      while (true) {
        std::size_t before = r.position();
        bool ok = false;
        switch (op) {
          case 0:
            ok = r.u8().has_value();
            break;
          case 1:
            ok = r.u16be().has_value();
            break;
          case 2:
            ok = r.u32be().has_value();
            break;
          case 3:
            ok = r.bytes(3).has_value();
            break;
          case 4:
            ok = r.skip(2);
            break;
          case 5:
            ok = r.peek(1).has_value() && r.skip(1);
            break;
        }
        ASSERT_LE(r.position(), r.size());
        ASSERT_EQ(r.remaining(), r.size() - r.position());
        if (!ok) {
          ASSERT_EQ(r.position(), before) << "op " << op << " from " << start;
          break;
        }
        ASSERT_GT(r.position(), before);
      }
    }
  }
}

}  // namespace
}  // namespace abox::base
