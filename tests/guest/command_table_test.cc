// CommandTable: the main session once, exec ids (never 0, never one in use),
// the bound of kMaxExecSessions with the refusal's reason, and ended exec
// sessions going while the main one stays. No process is started: the
// table's rules alone.
#include "guest/box_guest/command_table.h"

#include <gtest/gtest.h>

namespace abox::guest {
namespace {

struct NullOutput : ControlOutput {
  std::vector<std::pair<GuestMessage, std::vector<std::uint8_t>>> sent;
  void send(GuestMessage type, std::span<const std::uint8_t> p) override {
    sent.emplace_back(type, std::vector(p.begin(), p.end()));
  }
  void log(const std::string&) override {}
  bool room() const override { return true; }
};

CommandSpec spec() {
  CommandSpec s;
  s.argv = {"/bin/true"};
  return s;
}

TEST(CommandTable, TheMainSessionIsZeroAndOpensOnce) {
  NullOutput out;
  CommandTable t;
  EXPECT_EQ(t.main(), nullptr);
  auto m = t.open_main(spec(), 100, out);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->id(), kMainSession);
  EXPECT_EQ(t.main(), *m);
  EXPECT_FALSE(t.open_main(spec(), 100, out).ok());
  EXPECT_EQ(t.exec_count(), 0u);
}

TEST(CommandTable, AnExecIdIsNeverZeroNorOneInUse) {
  NullOutput out;
  CommandTable t;
  auto zero = t.open_exec(kMainSession, spec(), 100, out);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().find("session 0"), std::string::npos) << zero.error();
  ASSERT_TRUE(t.open_exec(5, spec(), 100, out).ok());
  auto again = t.open_exec(5, spec(), 100, out);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), "session 5 is open already");
  EXPECT_EQ(t.exec_count(), 1u);
  EXPECT_NE(t.find(5), nullptr);
  EXPECT_EQ(t.find(6), nullptr);
  // The highest id there is, too.
  EXPECT_TRUE(t.open_exec(0xFFFFFFFFu, spec(), 100, out).ok());
}

TEST(CommandTable, TheSeventeenthExecIsRefusedWithTheBoundAndTheOthersStay) {
  NullOutput out;
  CommandTable t;
  ASSERT_TRUE(t.open_main(spec(), 100, out).ok());
  for (std::uint32_t id = 1; id <= kMaxExecSessions; ++id)
    ASSERT_TRUE(t.open_exec(id, spec(), 100, out).ok());
  EXPECT_EQ(t.exec_count(), kMaxExecSessions);
  auto refused = t.open_exec(17, spec(), 100, out);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(), "box-guest runs at most 16 exec sessions at once, and 16 run");
  EXPECT_EQ(t.find(17), nullptr);
  for (std::uint32_t id = 1; id <= kMaxExecSessions; ++id) EXPECT_NE(t.find(id), nullptr) << id;
  EXPECT_EQ(t.size(), kMaxExecSessions + 1);
}

TEST(CommandTable, RemoveEndedDropsEndedExecsAndKeepsTheMainOne) {
  NullOutput out;
  CommandTable t;
  // No argv: start() fails before any fork, and the session ends with start_failed.
  ASSERT_TRUE(t.open_main(CommandSpec{}, 100, out).ok());
  ASSERT_TRUE(t.open_exec(1, spec(), 100, out).ok());
  ASSERT_TRUE(t.open_exec(2, CommandSpec{}, 100, out).ok());
  t.remove_ended();
  EXPECT_EQ(t.exec_count(), 2u) << "not started: nothing has ended";
  t.find(2)->start();
  t.main()->start();
  EXPECT_EQ(t.find(2)->state(), CommandSession::State::kEnded);
  ASSERT_EQ(out.sent.size(), 2u);
  EXPECT_EQ(out.sent[0].first, GuestMessage::kStartFailed);
  auto f = decode_start_failed(out.sent[0].second);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->session, 2u);
  EXPECT_EQ(decode_start_failed(out.sent[1].second)->session, kMainSession);
  t.remove_ended();
  EXPECT_EQ(t.find(2), nullptr);
  EXPECT_NE(t.find(1), nullptr);
  ASSERT_NE(t.main(), nullptr) << "the main session stays to the end of the boot";
  EXPECT_EQ(t.main()->state(), CommandSession::State::kEnded);
  // An ended exec's id is free again in the table (the host never reuses one).
  EXPECT_TRUE(t.open_exec(2, spec(), 100, out).ok());
}

}  // namespace
}  // namespace abox::guest
