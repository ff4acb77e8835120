#include "dns/tcp_stream.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace abox::dns {
namespace {

void feed(DnsTcpReader& r, std::string_view bytes) {
  auto room = r.append(bytes.size());
  ASSERT_EQ(room.size(), bytes.size());
  std::memcpy(room.data(), bytes.data(), bytes.size());
}

std::vector<std::string> take(DnsTcpReader& r) {
  std::vector<std::string> out;
  EXPECT_TRUE(r.for_each_message([&](std::span<const std::uint8_t> m) {
    out.emplace_back(m.begin(), m.end());
    return true;
  }));
  return out;
}

TEST(DnsTcpReader, SplitsMessagesAcrossReads) {
  DnsTcpReader r(1024);
  feed(r, std::string("\0\3ab", 4));
  EXPECT_TRUE(take(r).empty());
  feed(r, std::string("c\0\0\0\2xy\0", 8));
  EXPECT_EQ(take(r), (std::vector<std::string>{"abc", "", "xy"}));
  EXPECT_EQ(r.buffered(), 1u);  // half a length prefix waits
  feed(r, std::string("\1z", 2));
  EXPECT_EQ(take(r), (std::vector<std::string>{"z"}));
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(DnsTcpReader, RefusesPastTheLimit) {
  DnsTcpReader r(8);
  EXPECT_EQ(r.append(9).size(), 0u);
  EXPECT_EQ(r.append(8).size(), 8u);
  EXPECT_EQ(r.append(1).size(), 0u);
  r.unappend(3);
  EXPECT_EQ(r.buffered(), 5u);
  EXPECT_EQ(r.append(3).size(), 3u);
}

TEST(DnsTcpReader, LargestMessage) {
  DnsTcpReader r(2 + 65535);
  std::string m(65535, 'q');
  feed(r, std::string("\xff\xff", 2) + m);
  auto got = take(r);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], m);
}

TEST(DnsTcpReader, StopsWhenTheConnectionGoesAwayMidRead) {
  DnsTcpReader r(64);
  feed(r, std::string("\0\1a\0\1b", 6));
  int calls = 0;
  EXPECT_FALSE(r.for_each_message([&](std::span<const std::uint8_t> m) {
    ++calls;
    r.clear();                // the answer closed the connection
    EXPECT_EQ(m.size(), 1u);  // the view is still readable
    EXPECT_EQ(m[0], 'a');
    return false;
  }));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(DnsTcpReader, LengthPrefix) {
  EXPECT_EQ(tcp_length_prefix(0x1234), (std::array<std::uint8_t, 2>{0x12, 0x34}));
  EXPECT_EQ(tcp_length_prefix(65535), (std::array<std::uint8_t, 2>{0xff, 0xff}));
}

}  // namespace
}  // namespace abox::dns
