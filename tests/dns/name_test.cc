// Tests for dns/name: the one reader of names from untrusted bytes. Each case
// is a message of a 12-byte header followed by the bytes under test.
#include "dns/name.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes with_header(const Bytes& body) {
  Bytes m = body;
  m.insert(m.begin(), 12, 0);
  return m;
}

// Reads the name at `at`; the error, or nullopt and the name and cursor.
struct Read {
  std::optional<NameError> error;
  WireName name;
  std::size_t end = 0;
};
Read read_at(const Bytes& msg, std::size_t at) {
  base::ByteReader r(msg);
  Read out;
  EXPECT_TRUE(r.seek(at));
  out.error = read_name(r, &out.name);
  out.end = r.position();
  return out;
}

Bytes label_run(std::size_t labels, std::uint8_t length) {
  Bytes b;
  for (std::size_t i = 0; i < labels; ++i) {
    b.push_back(length);
    b.insert(b.end(), length, 'a');
  }
  return b;
}

TEST(ReadName, PlainAndCompressed) {
  // 12: "www.example.com", 29: "api" + pointer to "example.com" (16).
  Bytes m = with_header({3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p',  'l', 'e',
                         3, 'c', 'o', 'm', 0, 3,   'a', 'p', 'i', 0xC0, 16});
  Read plain = read_at(m, 12);
  ASSERT_FALSE(plain.error);
  EXPECT_EQ(plain.name.size, 17);
  EXPECT_EQ(plain.end, 29u);
  Read api = read_at(m, 29);
  ASSERT_FALSE(api.error);
  EXPECT_EQ(name_to_text(api.name.view()), "api.example.com.");
  EXPECT_EQ(api.end, m.size());  // just past the pointer, not where it led
}

TEST(ReadName, PointerRules) {
  // A pointer to itself, one pointing forward, one into the header, and two
  // pointing at each other: each refused, none followed for long.
  Bytes self = with_header({0xC0, 12});
  EXPECT_EQ(read_at(self, 12).error, NameError::bad_pointer);
  Bytes forward = with_header({0xC0, 14, 0});
  EXPECT_EQ(read_at(forward, 12).error, NameError::bad_pointer);
  for (std::uint8_t target = 0; target < 12; ++target) {
    Bytes header = with_header({1, 'a', 0, 0xC0, target});
    EXPECT_EQ(read_at(header, 15).error, NameError::bad_pointer) << int{target};
  }
  Bytes pair = with_header({0xC0, 14, 0xC0, 12});
  EXPECT_EQ(read_at(pair, 14).error, NameError::bad_pointer);
  // Pointer after a label, back to where the run began: a loop.
  Bytes after_label = with_header({1, 'a', 0xC0, 12});
  EXPECT_EQ(read_at(after_label, 12).error, NameError::bad_pointer);
}

TEST(ReadName, AtMostSixteenPointers) {
  // 12: root; then pointers each aimed at the one before.
  auto chain = [](std::size_t n) {
    Bytes body = {0};
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t target = 12 + (i == 0 ? 0 : 1 + 2 * (i - 1));
      body.push_back(static_cast<std::uint8_t>(0xC0 | (target >> 8)));
      body.push_back(static_cast<std::uint8_t>(target));
    }
    return with_header(body);
  };
  Bytes sixteen = chain(16);
  EXPECT_FALSE(read_at(sixteen, sixteen.size() - 2).error);
  Bytes seventeen = chain(17);
  EXPECT_EQ(read_at(seventeen, seventeen.size() - 2).error, NameError::bad_pointer);
}

TEST(ReadName, LengthLimits) {
  // 127 labels of 1 byte: 254 bytes and the root, 255: the longest name.
  Bytes longest = label_run(127, 1);
  longest.push_back(0);
  Read r = read_at(with_header(longest), 12);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.name.size, 255);
  Bytes too_long = label_run(128, 1);
  too_long.push_back(0);
  EXPECT_EQ(read_at(with_header(too_long), 12).error, NameError::bad_label);
  // Over 255 only once a pointer joins two runs: still refused.
  Bytes run2 = label_run(2, 63);
  run2.push_back(0);
  Bytes backward = with_header(run2);  // 12: 2 x 63 and root (129 bytes)
  Bytes front = label_run(2, 63);
  front.insert(front.end(), {0xC0, 12});
  const std::size_t front_at = backward.size();
  backward.insert(backward.end(), front.begin(), front.end());
  EXPECT_EQ(read_at(backward, front_at).error, NameError::bad_label);  // 128 + 129 > 255

  // Labels: 63 is the most; 0x40..0xBF are label types we refuse.
  Bytes sixty_three = label_run(1, 63);
  sixty_three.push_back(0);
  EXPECT_FALSE(read_at(with_header(sixty_three), 12).error);
  for (std::uint8_t type : {0x40, 0x41, 0x7F, 0x80, 0xBF}) {
    EXPECT_EQ(read_at(with_header({type, 'a', 0}), 12).error, NameError::bad_label) << int{type};
  }
}

TEST(ReadName, Truncated) {
  EXPECT_EQ(read_at(with_header({3, 'w', 'w'}), 12).error, NameError::truncated);
  EXPECT_EQ(read_at(with_header({3, 'w', 'w', 'w'}), 12).error, NameError::truncated);  // no root
  EXPECT_EQ(read_at(with_header({1, 'a', 0xC0}), 12).error, NameError::truncated);      // 0xC0 last
  EXPECT_EQ(read_at(with_header({}), 12).error, NameError::truncated);
}

TEST(NameText, EscapesWhatIsNotAHostname) {
  EXPECT_EQ(name_to_text(Bytes{0}), ".");
  EXPECT_EQ(name_to_text(Bytes{3, 'W', '-', '_', 0}), "W-_.");
  EXPECT_EQ(name_to_text(Bytes{3, 'a', '.', 'b', 2, '\\', ' ', 1, 0xFF, 0}), "a\\.b.\\\\\\032.\\255.");
}

TEST(NamesEqual, CaseOnlyInLetters) {
  EXPECT_TRUE(names_equal(Bytes{3, 'A', 'b', 'C', 0}, Bytes{3, 'a', 'B', 'c', 0}));
  EXPECT_FALSE(names_equal(Bytes{1, '[', 0}, Bytes{1, '{', 0}));  // 0x5B and 0x7B differ by 0x20 too
  EXPECT_FALSE(names_equal(Bytes{1, 'a', 0}, Bytes{2, 'a', 'a', 0}));
}

}  // namespace
}  // namespace abox::dns
