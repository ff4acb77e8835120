// Tests for dns/message_writer: name compression and the size bound.
#include "dns/message_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "tests/support/dns_names.h"

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;

using abox::testing::wire_name;

TEST(MessageWriter, SuffixesBecomePointers) {
  Bytes out;
  MessageWriter w(out);
  w.bytes(Bytes(12, 0));
  w.name(wire_name("www.example.com"), true);  // at 12
  w.name(wire_name("API.Example.COM"), true);  // "api" then a pointer to 16
  w.name(wire_name("www.example.com"), true);  // a pointer to 12
  w.name(wire_name("example.org"), false);     // in full, and no target
  w.name(wire_name("x.example.org"), true);    // in full: nothing to point at
  ASSERT_FALSE(w.overflowed());
  Bytes expected(12, 0);
  Bytes www = wire_name("www.example.com");
  expected.insert(expected.end(), www.begin(), www.end());
  expected.insert(expected.end(), {3, 'A', 'P', 'I', 0xC0, 16, 0xC0, 12});
  Bytes org = wire_name("example.org");
  expected.insert(expected.end(), org.begin(), org.end());
  Bytes x = wire_name("x.example.org");
  expected.insert(expected.end(), x.begin(), x.end());
  EXPECT_EQ(out, expected);
}

TEST(MessageWriter, RootAndWholeNames) {
  Bytes out;
  MessageWriter w(out);
  w.bytes(Bytes(12, 0));
  w.name(Bytes{0}, true);
  w.name(wire_name("a"), true);
  w.name(wire_name("a"), true);
  EXPECT_EQ(out, (Bytes{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0xC0, 13}));
}

TEST(MessageWriter, NoPointerPast0x3FFF) {
  Bytes out;
  MessageWriter w(out);
  w.bytes(Bytes(0x4000, 0));
  Bytes name = wire_name("far.example.com");
  w.name(name, true);
  w.name(name, true);  // the first copy is out of a pointer's reach
  EXPECT_EQ(out.size(), 0x4000 + 2 * name.size());
}

TEST(MessageWriter, SizeBound) {
  Bytes out;
  MessageWriter w(out);
  w.bytes(Bytes(65533, 0));
  w.u16(1);
  EXPECT_FALSE(w.overflowed());
  EXPECT_EQ(out.size(), 65535u);
  w.u8(1);
  EXPECT_TRUE(w.overflowed());
  EXPECT_EQ(out.size(), 65535u);
  w.patch_u16(0, 0xABCD);
  EXPECT_EQ(out[0], 0xAB);
}

}  // namespace
}  // namespace abox::dns
