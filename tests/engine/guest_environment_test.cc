// The command's environment, built on the host (box-guest adds nothing), and
// the refusal of any key in it.
#include "engine/instance/guest_environment.h"

#include <gtest/gtest.h>

namespace abox::engine {
namespace {

std::string value_of(const std::vector<guest::EnvEntry>& env, std::string_view name) {
  for (const auto& e : env) {
    if (e.name == name) return e.value;
  }
  return "<unset>";
}

TEST(GuestEnvironment, DefaultsNoncesCaAndUserEntriesInOrder) {
  GuestEnvironmentInput in;
  in.nonces = {{"OPENAI_API_KEY", "abox-nonce-aa"}};
  in.has_ca = true;
  in.term = "xterm-256color";
  in.user = {{"FOO", "1"}, {"FOO", "2"}, {"PATH", "/opt/bin"}};
  auto env = build_guest_environment(in);
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_EQ(value_of(*env, "HOME"), "/home/agent");
  EXPECT_EQ(value_of(*env, "USER"), "agent");
  EXPECT_EQ(value_of(*env, "TERM"), "xterm-256color");
  EXPECT_EQ(value_of(*env, "LANG"), "C.UTF-8");
  EXPECT_EQ(value_of(*env, "OPENAI_API_KEY"), "abox-nonce-aa");
  EXPECT_EQ(value_of(*env, "SSL_CERT_FILE"), "/run/abox/ca-bundle.pem");
  EXPECT_EQ(value_of(*env, "REQUESTS_CA_BUNDLE"), "/run/abox/ca-bundle.pem");
  EXPECT_EQ(value_of(*env, "NODE_EXTRA_CA_CERTS"), "/run/abox/ca.pem");
  EXPECT_EQ(value_of(*env, "FOO"), "2");          // the later --env wins
  EXPECT_EQ(value_of(*env, "PATH"), "/opt/bin");  // the operator may change PATH
  // No variable twice.
  for (std::size_t i = 0; i < env->size(); ++i)
    for (std::size_t j = i + 1; j < env->size(); ++j) EXPECT_NE((*env)[i].name, (*env)[j].name);
}

TEST(GuestEnvironment, NoCaVariablesWithoutBindings) {
  auto env = build_guest_environment({});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(value_of(*env, "SSL_CERT_FILE"), "<unset>");
  EXPECT_EQ(value_of(*env, "TERM"), "dumb");
}

TEST(GuestEnvironment, AUserEntryMayNotReplaceANonce) {
  GuestEnvironmentInput in;
  in.nonces = {{"ANTHROPIC_API_KEY", "abox-nonce-bb"}};
  in.user = {{"ANTHROPIC_API_KEY", "sk-ant-real"}};
  auto env = build_guest_environment(in);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.error().find("ANTHROPIC_API_KEY"), std::string::npos);
  EXPECT_EQ(env.error().find("sk-ant-real"), std::string::npos);
}

TEST(GuestEnvironment, AKeyAnywhereIsRefusedWithoutBeingShown) {
  const std::string key = "sk-proj-0123456789abcdef";
  std::vector<std::string_view> keys = {key};
  std::vector<guest::EnvEntry> env = {{"A", "x"}, {"HIDDEN", "prefix" + key + "suffix"}};
  auto r = check_no_key(env, {"sh"}, keys);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("HIDDEN"), std::string::npos);
  EXPECT_EQ(r.error().find(key), std::string::npos);

  auto a = check_no_key({{"A", "x"}}, {"curl", "-H", "Authorization: Bearer " + key}, keys);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().find("argument 2"), std::string::npos);
  EXPECT_EQ(a.error().find(key), std::string::npos);

  EXPECT_TRUE(check_no_key({{"A", "x"}}, {"sh"}, keys).ok());
  EXPECT_TRUE(check_no_key({{"A", ""}}, {"sh"}, {""}).ok());  // an empty key matches nothing
}

TEST(GuestEnvironment, Assignments) {
  auto ok = parse_env_assignment("A_1=x=y");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->name, "A_1");
  EXPECT_EQ(ok->value, "x=y");
  EXPECT_TRUE(parse_env_assignment("EMPTY=").ok());
  for (auto bad : {"NOEQUALS", "=x", "1A=x", "A-B=x", "A B=x"})
    EXPECT_FALSE(parse_env_assignment(bad).ok()) << bad;
}

}  // namespace
}  // namespace abox::engine
