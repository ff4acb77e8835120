#include "policy/name.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace abox::policy {
namespace {

using namespace std::string_literals;

// The canonical text, or "" when the name is refused.
std::string canon(std::string_view text) {
  auto name = CanonicalName::from(text);
  return name ? name->str() : std::string();
}

NameError canon_error(std::string_view text) {
  auto name = CanonicalName::from(text);
  EXPECT_FALSE(name.ok()) << "accepted: " << text;
  return name.ok() ? NameError{} : name.error();
}

NameError pattern_error(std::string_view text) {
  auto pattern = NamePattern::parse(text);
  EXPECT_FALSE(pattern.ok()) << "accepted: " << text;
  return pattern.ok() ? NameError{} : pattern.error();
}

// n labels of `label`, joined with dots.
std::string labels(const std::string& label, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += '.';
    out += label;
  }
  return out;
}

// A name of exactly `length` bytes: 63-byte labels, then a shorter last one.
std::string name_of_length(std::size_t length) {
  std::string out;
  while (out.size() < length) {
    if (!out.empty()) out += '.';
    std::size_t room = length - out.size();
    out += std::string(std::min<std::size_t>(room, kMaxLabelLength), 'a');
  }
  return out;
}

TEST(NameTest, DescribeCoversEveryErrorWithDistinctText) {
  const NameError all[] = {
      NameError::empty,     NameError::too_long,      NameError::empty_label,       NameError::label_too_long,
      NameError::not_ascii, NameError::bad_character, NameError::misplaced_wildcard};
  std::set<std::string_view> seen;
  for (NameError e : all) {
    std::string_view text = describe(e);
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(seen.insert(text).second) << text;
  }
  EXPECT_NE(describe(NameError::label_too_long).find("63"), std::string_view::npos);
  EXPECT_NE(describe(NameError::too_long).find("253"), std::string_view::npos);
  EXPECT_NE(describe(NameError::not_ascii).find("xn--"), std::string_view::npos);
}

TEST(NameTest, AcceptsOrdinaryNames) {
  EXPECT_EQ(canon("github.com"), "github.com");
  EXPECT_EQ(canon("api.github.com"), "api.github.com");
  EXPECT_EQ(canon("com"), "com");
  EXPECT_EQ(canon("a"), "a");
  EXPECT_EQ(canon("0.1.2.3"), "0.1.2.3");
}

TEST(NameTest, FoldsUpperCaseToLower) {
  EXPECT_EQ(canon("GitHub.COM"), "github.com");
  EXPECT_EQ(canon("ABCDEFGHIJKLMNOPQRSTUVWXYZ.abcdefghijklmnopqrstuvwxyz"),
            "abcdefghijklmnopqrstuvwxyz.abcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(canon("A-_9.Z"), "a-_9.z");
  // The neighbours of 'A'..'Z' are not letters and must not be folded.
  EXPECT_EQ(canon_error("a@b.com"), NameError::bad_character);
  EXPECT_EQ(canon_error("a[b.com"), NameError::bad_character);
}

TEST(NameTest, TrailingDot) {
  EXPECT_EQ(canon("a.com."), "a.com");
  EXPECT_EQ(canon("A.COM."), "a.com");
  EXPECT_EQ(canon("com."), "com");
  EXPECT_EQ(canon_error("a.com.."), NameError::empty_label);
  EXPECT_EQ(canon_error("a.com..."), NameError::empty_label);
}

TEST(NameTest, Empty) {
  EXPECT_EQ(canon_error(""), NameError::empty);
  EXPECT_EQ(canon_error("."), NameError::empty);
  EXPECT_EQ(canon_error(".."), NameError::empty_label);
}

TEST(NameTest, EmptyLabels) {
  EXPECT_EQ(canon_error(".a"), NameError::empty_label);
  EXPECT_EQ(canon_error(".a.com"), NameError::empty_label);
  EXPECT_EQ(canon_error("a..b"), NameError::empty_label);
  EXPECT_EQ(canon_error("a.b.."), NameError::empty_label);
}

TEST(NameTest, LabelLength) {
  const std::string l63(63, 'a');
  const std::string l64(64, 'a');
  EXPECT_EQ(canon(l63), l63);
  EXPECT_EQ(canon(l63 + ".com"), l63 + ".com");
  EXPECT_EQ(canon("x." + l63 + ".com."), "x." + l63 + ".com");
  EXPECT_EQ(canon_error(l64), NameError::label_too_long);
  EXPECT_EQ(canon_error(l64 + ".com"), NameError::label_too_long);
  EXPECT_EQ(canon_error("www." + l64), NameError::label_too_long);
  EXPECT_EQ(canon_error("www." + l64 + "."), NameError::label_too_long);
}

TEST(NameTest, TotalLength) {
  const std::string n253 = name_of_length(253);
  const std::string n254 = name_of_length(254);
  ASSERT_EQ(n253.size(), 253u);
  ASSERT_EQ(n254.size(), 254u);
  EXPECT_EQ(canon(n253), n253);
  // The trailing dot is not counted: 254 bytes with it is 253 without.
  EXPECT_EQ(canon(n253 + "."), n253);
  EXPECT_EQ(canon_error(n254), NameError::too_long);
  EXPECT_EQ(canon_error(n254 + "."), NameError::too_long);
  EXPECT_EQ(canon_error(std::string(1000, 'a')), NameError::too_long);
  // Many one-byte labels: 127 labels is 253 bytes.
  EXPECT_EQ(canon(labels("a", 127)).size(), 253u);
  EXPECT_EQ(canon_error(labels("a", 128)), NameError::too_long);
}

TEST(NameTest, UnderscoresAndHyphens) {
  EXPECT_EQ(canon("_dmarc.example.com"), "_dmarc.example.com");
  EXPECT_EQ(canon("_443._tcp.Example.com"), "_443._tcp.example.com");
  EXPECT_EQ(canon("my-host.example.com"), "my-host.example.com");
  // Hyphen placement is not policed: DNS carries such names and a policy may
  // need to list them.
  EXPECT_EQ(canon("-a.b-.com"), "-a.b-.com");
  EXPECT_EQ(canon("-.com"), "-.com");
}

TEST(NameTest, ALabelsAreAccepted) {
  EXPECT_EQ(canon("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(canon("XN--BCHER-KVA.Example."), "xn--bcher-kva.example");
  EXPECT_EQ(canon("www.xn--80ak6aa92e.com"), "www.xn--80ak6aa92e.com");
}

TEST(NameTest, ULabelBytesAreNotAscii) {
  EXPECT_EQ(canon_error("b\xC3\xBC"
                        "cher.example"),
            NameError::not_ascii);  // "bücher"
  EXPECT_EQ(canon_error("\xD0\xBF\xD1\x80\xD0\xB8\xD0\xBC\xD0\xB5\xD1\x80.com"),
            NameError::not_ascii);  // Cyrillic
  EXPECT_EQ(canon_error("a.com\x80"), NameError::not_ascii);
  EXPECT_EQ(canon_error("\xFF"), NameError::not_ascii);
  // Fullwidth dot U+FF0E must not be taken as a separator.
  EXPECT_EQ(canon_error("a\xEF\xBC\x8E"
                        "com"),
            NameError::not_ascii);
}

TEST(NameTest, ControlAndPunctuationAreBadCharacters) {
  EXPECT_EQ(canon_error("a\0b.com"s), NameError::bad_character);
  EXPECT_EQ(canon_error("a.com\0"s), NameError::bad_character);
  EXPECT_EQ(canon_error("\0"s), NameError::bad_character);
  EXPECT_EQ(canon_error("a b.com"), NameError::bad_character);
  EXPECT_EQ(canon_error(" a.com"), NameError::bad_character);
  EXPECT_EQ(canon_error("a.com "), NameError::bad_character);
  EXPECT_EQ(canon_error("a.com\n"), NameError::bad_character);
  EXPECT_EQ(canon_error("a\tb"), NameError::bad_character);
  EXPECT_EQ(canon_error("a/b"), NameError::bad_character);
  EXPECT_EQ(canon_error("a:443"), NameError::bad_character);
  EXPECT_EQ(canon_error("a@b"), NameError::bad_character);
  EXPECT_EQ(canon_error("a\x7F"), NameError::bad_character);
}

TEST(NameTest, BackslashEscapesAreNotInterpreted) {
  // Presentation-format escapes ("a\.b" is one label holding a dot) are not
  // ours to decode: a backslash is just a bad character.
  EXPECT_EQ(canon_error("a\\.b"), NameError::bad_character);
  EXPECT_EQ(canon_error("a\\046b.com"), NameError::bad_character);
  EXPECT_EQ(canon_error("\\"), NameError::bad_character);
}

TEST(NameTest, NamesRefuseWildcards) {
  EXPECT_EQ(canon_error("*.github.com"), NameError::misplaced_wildcard);
  EXPECT_EQ(canon_error("*"), NameError::misplaced_wildcard);
  EXPECT_EQ(canon_error("a.*.com"), NameError::misplaced_wildcard);
}

TEST(NameTest, FirstProblemIsReported) {
  EXPECT_EQ(canon_error("a b..com"), NameError::bad_character);
  EXPECT_EQ(canon_error("a..b c"), NameError::empty_label);
  // Length is checked before content.
  EXPECT_EQ(canon_error(std::string(300, '*')), NameError::too_long);
}

TEST(NameTest, ViewIsBoundedToTheName) {
  auto name = CanonicalName::from("Short.");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->view().size(), 5u);
  EXPECT_EQ(name->view(), "short");
}

TEST(NamePatternTest, ExactPatterns) {
  auto p = NamePattern::parse("GitHub.com.");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->base, "github.com");
  EXPECT_FALSE(p->wildcard);
  EXPECT_EQ(p->to_string(), "github.com");
}

TEST(NamePatternTest, WildcardPatterns) {
  auto p = NamePattern::parse("*.GitHub.com");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->base, "github.com");
  EXPECT_TRUE(p->wildcard);
  EXPECT_EQ(p->to_string(), "*.github.com");
  EXPECT_EQ(*NamePattern::parse("*.github.com."), (NamePattern{"github.com", true}));
  // A one-label base is syntax; whether a policy may say it is decided later.
  EXPECT_EQ(*NamePattern::parse("*.com"), (NamePattern{"com", true}));
  EXPECT_EQ(*NamePattern::parse("*._tcp.example"), (NamePattern{"_tcp.example", true}));
}

TEST(NamePatternTest, MisplacedWildcards) {
  EXPECT_EQ(pattern_error("*"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("*."), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("a.*.b"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("*a.b"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("a*.b"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("**.b"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("*.*.b"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("a.b.*"), NameError::misplaced_wildcard);
  EXPECT_EQ(pattern_error("*.b*"), NameError::misplaced_wildcard);
}

TEST(NamePatternTest, WildcardBaseFollowsNameRules) {
  EXPECT_EQ(pattern_error("*.."), NameError::empty_label);
  EXPECT_EQ(pattern_error("*..com"), NameError::empty_label);
  EXPECT_EQ(pattern_error("*.com.."), NameError::empty_label);
  EXPECT_EQ(pattern_error("*.a b.com"), NameError::bad_character);
  EXPECT_EQ(pattern_error("*.b\xC3\xBC"
                          "cher.de"),
            NameError::not_ascii);
  EXPECT_EQ(pattern_error("*." + std::string(64, 'a') + ".com"), NameError::label_too_long);
}

TEST(NamePatternTest, WildcardLengthCountsTheStar) {
  // "*." plus a 251-byte base is 253 bytes: the longest pattern that can
  // still match a (253-byte) name.
  const std::string b251 = name_of_length(251);
  const std::string b252 = name_of_length(252);
  ASSERT_EQ(b251.size(), 251u);
  auto p = NamePattern::parse("*." + b251);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->base, b251);
  EXPECT_TRUE(NamePattern::parse("*." + b251 + ".").ok());
  EXPECT_EQ(pattern_error("*." + b252), NameError::too_long);
  EXPECT_EQ(pattern_error("*." + name_of_length(253)), NameError::too_long);
  EXPECT_EQ(pattern_error("*." + name_of_length(254)), NameError::too_long);
}

TEST(NamePatternTest, ExactPatternErrorsMatchCanonicalName) {
  EXPECT_EQ(pattern_error(""), NameError::empty);
  EXPECT_EQ(pattern_error("."), NameError::empty);
  EXPECT_EQ(pattern_error("a..b"), NameError::empty_label);
  EXPECT_EQ(pattern_error(std::string(64, 'a')), NameError::label_too_long);
  EXPECT_EQ(pattern_error(name_of_length(254)), NameError::too_long);
  EXPECT_EQ(pattern_error("a\\.b"), NameError::bad_character);
  EXPECT_EQ(pattern_error("\xC3\xA9.fr"), NameError::not_ascii);
}

}  // namespace
}  // namespace abox::policy
