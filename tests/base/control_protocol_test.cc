// The control protocol's version (base/control_protocol.h): what the client
// sends, what a server takes, and the nasty spellings it refuses.
#include "base/control_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace abox::base {
namespace {

TEST(ControlProtocol, TheClientsLineIsTakenBackWhole) {
  EXPECT_EQ(versioned_control_line("stats"), "ABOX-CTL/1 stats");
  const std::string sent = versioned_control_line("reload /p.toml");  // the view points into it
  auto line = control_request_line(sent);
  ASSERT_TRUE(line.ok()) << line.error().message;
  EXPECT_EQ(*line, "reload /p.toml");
}

TEST(ControlProtocol, ALineWithoutAVersionIsVersionOne) {
  for (std::string_view typed : {"stats", "", "reload x", "ABOX-CT"}) {
    auto line = control_request_line(typed);
    ASSERT_TRUE(line.ok()) << typed;
    EXPECT_EQ(*line, typed);
  }
}

TEST(ControlProtocol, AnotherVersionIsRefusedNamingBoth) {
  for (std::string_view other : {"ABOX-CTL/2 stats", "ABOX-CTL/99999 reload x"}) {
    auto line = control_request_line(other);
    ASSERT_FALSE(line.ok()) << other;
    EXPECT_EQ(line.error().kind, ControlVersionError::Kind::kUnsupported);
    EXPECT_NE(line.error().message.find("is not spoken here (this side speaks ABOX-CTL/1)"),
              std::string::npos)
        << line.error().message;
  }
}

TEST(ControlProtocol, MalformedVersionsAreRefused) {
  for (std::string_view bad : {"ABOX-CTL/", "ABOX-CTL/ stats", "ABOX-CTL/1", "ABOX-CTL/1stats",
                               "ABOX-CTL/01 stats", "ABOX-CTL/0 stats", "ABOX-CTL/123456 stats",
                               "ABOX-CTL/-1 stats", "ABOX-CTL/1\tstats", "ABOX-CTL/4294967297 stats"}) {
    auto line = control_request_line(bad);
    ASSERT_FALSE(line.ok()) << bad;
    EXPECT_EQ(line.error().kind, ControlVersionError::Kind::kMalformed) << bad;
  }
}

}  // namespace
}  // namespace abox::base
