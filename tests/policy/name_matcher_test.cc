#include "policy/name_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace abox::policy {
namespace {

struct Match {
  std::uint32_t id;
  bool wildcard;
  friend bool operator==(const Match&, const Match&) = default;
};

void PrintTo(const Match& m, std::ostream* os) {
  *os << "{" << m.id << (m.wildcard ? ", wildcard}" : ", exact}");
}

NamePattern pattern(std::string_view text) {
  auto p = NamePattern::parse(text);
  EXPECT_TRUE(p.ok()) << text;
  return p.ok() ? *p : NamePattern{};
}

// Every match, in the order the matcher reports them.
std::vector<Match> all_matches(const NameMatcher& m, std::string_view name) {
  std::vector<Match> out;
  m.for_each_match(name, [&](std::uint32_t id, bool wildcard) {
    out.push_back({id, wildcard});
    return false;
  });
  return out;
}

TEST(NameMatcherTest, EmptyMatcherMatchesNothing) {
  NameMatcher m;
  EXPECT_EQ(m.pattern_count(), 0u);
  EXPECT_FALSE(m.matches("github.com"));
  EXPECT_FALSE(m.matches("com"));
}

TEST(NameMatcherTest, ExactMatchesOnlyItself) {
  NameMatcher m;
  m.add(pattern("github.com"), 1);
  EXPECT_TRUE(m.matches("github.com"));
  EXPECT_FALSE(m.matches("api.github.com"));
  EXPECT_FALSE(m.matches("github.co"));
  EXPECT_FALSE(m.matches("github.com.evil"));
  EXPECT_FALSE(m.matches("evilgithub.com"));
  EXPECT_FALSE(m.matches("com"));
  EXPECT_EQ(all_matches(m, "github.com"), (std::vector<Match>{{1, false}}));
}

TEST(NameMatcherTest, WildcardMatchesOneOrMoreExtraLabels) {
  NameMatcher m;
  m.add(pattern("*.github.com"), 7);
  EXPECT_TRUE(m.matches("api.github.com"));
  EXPECT_TRUE(m.matches("a.b.github.com"));
  EXPECT_TRUE(m.matches("x.y.z.w.github.com"));
  EXPECT_FALSE(m.matches("github.com"));
  EXPECT_FALSE(m.matches("evilgithub.com"));
  EXPECT_FALSE(m.matches("api.evilgithub.com"));
  EXPECT_FALSE(m.matches("github.com.evil"));
  EXPECT_FALSE(m.matches("api.github.com.evil"));
  EXPECT_FALSE(m.matches("com"));
  EXPECT_FALSE(m.matches("hub.com"));
  EXPECT_EQ(all_matches(m, "a.b.github.com"), (std::vector<Match>{{7, true}}));
}

TEST(NameMatcherTest, OneLabelWildcard) {
  NameMatcher m;
  m.add(pattern("*.com"), 3);
  EXPECT_TRUE(m.matches("github.com"));
  EXPECT_TRUE(m.matches("a.b.c.com"));
  EXPECT_FALSE(m.matches("com"));
  EXPECT_FALSE(m.matches("github.org"));
  EXPECT_FALSE(m.matches("com.org"));
}

TEST(NameMatcherTest, ExactAndWildcardForTheSameBaseStayApart) {
  NameMatcher m;
  m.add(pattern("github.com"), 1);
  m.add(pattern("*.github.com"), 2);
  EXPECT_EQ(m.pattern_count(), 2u);
  EXPECT_EQ(all_matches(m, "github.com"), (std::vector<Match>{{1, false}}));
  EXPECT_EQ(all_matches(m, "api.github.com"), (std::vector<Match>{{2, true}}));
}

TEST(NameMatcherTest, ExactComesBeforeWildcards) {
  NameMatcher m;
  // Added wildcard first, so order cannot come from insertion.
  m.add(pattern("*.github.com"), 10);
  m.add(pattern("*.com"), 11);
  m.add(pattern("api.github.com"), 12);
  EXPECT_EQ(all_matches(m, "api.github.com"), (std::vector<Match>{{12, false}, {10, true}, {11, true}}));
}

TEST(NameMatcherTest, OverlappingWildcardsMostSpecificFirst) {
  NameMatcher m;
  m.add(pattern("*.a.com"), 1);
  m.add(pattern("*.b.a.com"), 2);
  EXPECT_EQ(all_matches(m, "x.b.a.com"), (std::vector<Match>{{2, true}, {1, true}}));
  EXPECT_EQ(all_matches(m, "y.x.b.a.com"), (std::vector<Match>{{2, true}, {1, true}}));
  // "b.a.com" is itself only under "*.a.com".
  EXPECT_EQ(all_matches(m, "b.a.com"), (std::vector<Match>{{1, true}}));
  EXPECT_EQ(all_matches(m, "c.a.com"), (std::vector<Match>{{1, true}}));
  EXPECT_TRUE(all_matches(m, "a.com").empty());
}

TEST(NameMatcherTest, SeveralIdsPerPatternInInsertionOrder) {
  NameMatcher m;
  m.add(pattern("github.com"), 5);
  m.add(pattern("github.com"), 3);
  m.add(pattern("GitHub.com."), 9);  // the same pattern, written differently
  m.add(pattern("*.github.com"), 4);
  m.add(pattern("*.github.com"), 1);
  EXPECT_EQ(m.pattern_count(), 2u);
  EXPECT_EQ(all_matches(m, "github.com"), (std::vector<Match>{{5, false}, {3, false}, {9, false}}));
  EXPECT_EQ(all_matches(m, "api.github.com"), (std::vector<Match>{{4, true}, {1, true}}));
}

TEST(NameMatcherTest, SameIdTwiceIsReportedOnce) {
  NameMatcher m;
  m.add(pattern("github.com"), 5);
  m.add(pattern("github.com"), 5);
  EXPECT_EQ(all_matches(m, "github.com"), (std::vector<Match>{{5, false}}));
}

TEST(NameMatcherTest, SameIdUnderDifferentPatternsIsReportedPerPattern) {
  NameMatcher m;
  m.add(pattern("api.github.com"), 5);
  m.add(pattern("*.github.com"), 5);
  EXPECT_EQ(all_matches(m, "api.github.com"), (std::vector<Match>{{5, false}, {5, true}}));
}

TEST(NameMatcherTest, EarlyStop) {
  NameMatcher m;
  m.add(pattern("api.github.com"), 1);
  m.add(pattern("api.github.com"), 2);
  m.add(pattern("*.github.com"), 3);
  m.add(pattern("*.com"), 4);

  auto stop_after = [&](std::string_view name, std::size_t n) {
    std::vector<std::uint32_t> seen;
    m.for_each_match(name, [&](std::uint32_t id, bool) {
      seen.push_back(id);
      return seen.size() == n;
    });
    return seen;
  };
  EXPECT_EQ(stop_after("api.github.com", 1), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(stop_after("api.github.com", 2), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(stop_after("api.github.com", 3), (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(stop_after("api.github.com", 100), (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(stop_after("x.api.github.com", 1), (std::vector<std::uint32_t>{3}));
}

TEST(NameMatcherTest, MatchesStopsAtTheFirstHit) {
  NameMatcher m;
  m.add(pattern("*.com"), 1);
  EXPECT_TRUE(m.matches("a.com"));
}

TEST(NameMatcherTest, NameWithManyLabels) {
  NameMatcher m;
  m.add(pattern("*.deep.example"), 1);
  m.add(pattern("*.example"), 2);

  // 120 one-byte labels in front of "deep.example": 252 bytes.
  std::string name;
  for (int i = 0; i < 120; ++i) name += "x.";
  name += "deep.example";
  ASSERT_LE(name.size(), kMaxNameLength);
  ASSERT_TRUE(CanonicalName::from(name).ok());
  EXPECT_EQ(all_matches(m, name), (std::vector<Match>{{1, true}, {2, true}}));

  std::string miss;
  for (int i = 0; i < 126; ++i) miss += "y.";
  miss += "z";
  ASSERT_EQ(miss.size(), 253u);
  EXPECT_FALSE(m.matches(miss));
}

TEST(NameMatcherTest, ManyPatterns) {
  NameMatcher m;
  for (std::uint32_t i = 0; i < 2000; ++i) {
    m.add(pattern("host" + std::to_string(i) + ".example.com"), i);
    m.add(pattern("*.zone" + std::to_string(i) + ".example.net"), 100000 + i);
  }
  EXPECT_EQ(m.pattern_count(), 4000u);
  for (std::uint32_t i = 0; i < 2000; i += 37) {
    std::string exact = "host" + std::to_string(i) + ".example.com";
    EXPECT_EQ(all_matches(m, exact), (std::vector<Match>{{i, false}})) << exact;
    std::string under = "a.b.zone" + std::to_string(i) + ".example.net";
    EXPECT_EQ(all_matches(m, under), (std::vector<Match>{{100000 + i, true}})) << under;
  }
  EXPECT_FALSE(m.matches("host2000.example.com"));
  EXPECT_FALSE(m.matches("zone1.example.net"));
  EXPECT_FALSE(m.matches("a.host1.example.com"));
}

// Every name length, so each of the hash's read paths (1-3, 4-7, 8-16 and
// over 16 bytes, with a partial last block) runs; lookups read from buffers
// of exactly the name's size so that the sanitizer build catches a read past
// the end.
TEST(NameMatcherTest, EveryLengthMatchesWithinBounds) {
  NameMatcher m;
  std::vector<std::string> names;
  for (std::size_t n = 1; n <= kMaxNameLength; ++n) {
    std::string name;
    while (name.size() < n) {
      if (!name.empty()) name += '.';
      std::size_t room = n - name.size();
      std::size_t len = std::min<std::size_t>(room, 10);
      for (std::size_t i = 0; i < len; ++i) name += static_cast<char>('a' + (n + i) % 26);
    }
    if (name.back() == '.') name.back() = 'z';
    ASSERT_EQ(name.size(), n);
    names.push_back(name);
    m.add(pattern(name), static_cast<std::uint32_t>(n));
  }
  for (std::size_t n = 1; n <= kMaxNameLength; ++n) {
    const std::string& name = names[n - 1];
    auto exact = std::make_unique<char[]>(n);
    std::memcpy(exact.get(), name.data(), n);
    EXPECT_EQ(all_matches(m, std::string_view(exact.get(), n)),
              (std::vector<Match>{{static_cast<std::uint32_t>(n), false}}))
        << name;
    // The same length, last byte different.
    exact[n - 1] = exact[n - 1] == '0' ? '1' : '0';
    EXPECT_FALSE(m.matches(std::string_view(exact.get(), n))) << name;
  }
}

TEST(NameMatcherTest, CanonicalizedInputMatches) {
  NameMatcher m;
  m.add(pattern("*.github.com"), 1);
  auto name = CanonicalName::from("API.GitHub.COM.");
  ASSERT_TRUE(name.ok());
  EXPECT_TRUE(m.matches(name->view()));
}

TEST(NameMatcherDeathTest, RefusesANonCanonicalPattern) {
  NameMatcher m;
  EXPECT_DEATH(m.add(NamePattern{"GitHub.com", false}, 1), "not canonical");
  EXPECT_DEATH(m.add(NamePattern{"", true}, 1), "not canonical");
}

}  // namespace
}  // namespace abox::policy
