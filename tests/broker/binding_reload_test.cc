// Tests for broker/binding_reload: which bindings a reload keeps, removes
// and restores, and what it refuses (with the new text's file:line:column).

#include "broker/binding_reload.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/broker/broker_test_support.h"

namespace abox::broker {
namespace {

using broker_test::load;

constexpr std::string_view kAnthropic = R"(
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
methods = ["POST"]
paths = ["/v1/"]
)";

constexpr std::string_view kOpenai = R"(
[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
methods = ["POST"]
paths = ["/v1/"]
)";

const std::vector<bool> kBothActive{true, true};

TEST(BindingReload, TheSameBindingsChangeNothing) {
  auto started = load(std::string(kAnthropic) + std::string(kOpenai));
  // Reordered in the new file: matched by name and port, not by position.
  auto next = load(std::string(kOpenai) + std::string(kAnthropic));
  auto plan = plan_binding_reload(started, kBothActive, next);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->active, kBothActive);
  EXPECT_TRUE(plan->removed.empty());
  EXPECT_TRUE(plan->restored.empty());
}

TEST(BindingReload, ABindingLeftOutIsRemovedAndComesBackWhenPutBack) {
  auto started = load(std::string(kAnthropic) + std::string(kOpenai));
  auto without = load(kOpenai);
  auto plan = plan_binding_reload(started, kBothActive, without);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->active, (std::vector<bool>{false, true}));
  EXPECT_EQ(plan->removed, (std::vector<std::string>{"api.anthropic.com:443"}));
  EXPECT_TRUE(plan->restored.empty());

  auto again = plan_binding_reload(started, plan->active, started);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->active, kBothActive);
  EXPECT_TRUE(again->removed.empty());
  EXPECT_EQ(again->restored, (std::vector<std::string>{"api.anthropic.com:443"}));
}

TEST(BindingReload, APolicyWithNoBindingsRemovesThemAll) {
  auto started = load(std::string(kAnthropic) + std::string(kOpenai));
  auto none = load("[[allow]]\nnames = [\"example.com\"]\nports = [443]\n");
  auto plan = plan_binding_reload(started, kBothActive, none);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->active, (std::vector<bool>{false, false}));
  EXPECT_EQ(plan->removed.size(), 2u);
}

TEST(BindingReload, ANewBindingIsRefusedWithItsPlace) {
  auto started = load(kAnthropic);
  auto next = load(std::string(kAnthropic) + std::string(kOpenai));
  auto plan = plan_binding_reload(started, {true}, next);
  ASSERT_FALSE(plan.ok());
  // kOpenai's [[broker]] starts on line 10 of the new text.
  EXPECT_NE(plan.error().find("test.toml:10:1: [[broker]] api.openai.com:443 is not a binding this broker "
                              "started with"),
            std::string::npos)
      << plan.error();
}

TEST(BindingReload, ADifferentPortIsADifferentBinding) {
  auto started = load(kAnthropic);
  std::string moved(kAnthropic);
  moved.insert(moved.find("credential"), "port = 8443\n");
  auto plan = plan_binding_reload(started, {true}, load(moved));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().find("api.anthropic.com:8443 is not a binding"), std::string::npos) << plan.error();
}

TEST(BindingReload, AChangedFieldIsRefusedAndNamed) {
  auto started = load(kAnthropic);
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::vector<Case>{
           {"credential = \"anthropic\"", "credential = \"other\"", "credential"},
           {"header = \"x-api-key\"", "header = \"x-other\"", "header"},
           {"ANTHROPIC_API_KEY", "OTHER_KEY", "nonce_env"},
           {"methods = [\"POST\"]", "methods = [\"POST\", \"GET\"]", "methods"},
           {"paths = [\"/v1/\"]", "paths = [\"/v2/\"]", "paths"},
       }) {
    std::string text(kAnthropic);
    text.replace(text.find(c.from), c.from.size(), c.to);
    auto plan = plan_binding_reload(started, {true}, load(text));
    ASSERT_FALSE(plan.ok()) << c.field;
    EXPECT_NE(
        plan.error().find("test.toml:2:1: [[broker]] api.anthropic.com:443: its " + c.field + " differs"),
        std::string::npos)
        << plan.error();
  }
}

TEST(BindingReload, EveryBadBindingIsListed) {
  auto started = load(kOpenai);
  std::string changed(kOpenai);
  changed.replace(changed.find("OPENAI_API_KEY"), 14, "OTHER");
  auto plan = plan_binding_reload(started, {true}, load(std::string(kAnthropic) + changed));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().find("api.anthropic.com:443 is not"), std::string::npos) << plan.error();
  EXPECT_NE(plan.error().find("api.openai.com:443: its nonce_env"), std::string::npos) << plan.error();
}

}  // namespace
}  // namespace abox::broker
