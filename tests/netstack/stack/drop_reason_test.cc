// DropReason's table: every value has its row (name, sentence, counters),
// names are unique, and each counter a reason goes to is one the stats
// write out (kStackCounterFields). The loop runs to count_, so a reason
// added later is covered without naming it here.
#include "netstack/stack/drop_reason.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace abox::netstack {
namespace {

bool listed(std::uint64_t StackCounters::*member) {
  for (const StackCounterField& f : kStackCounterFields) {
    if (f.member == member) return true;
  }
  return false;
}

TEST(DropReasonTest, EveryReasonHasARowWithAUniqueNameAndCountersTheStatsShow) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kDropReasons; ++i) {
    const DropReasonInfo& row = info(static_cast<DropReason>(i));
    EXPECT_FALSE(row.name.empty()) << i;
    EXPECT_FALSE(row.sentence.empty()) << i;
    EXPECT_TRUE(names.insert(std::string(row.name)).second) << "twice: " << row.name;
    EXPECT_TRUE(listed(row.tcp_counter)) << row.name;
    EXPECT_TRUE(listed(row.udp_counter)) << row.name;
    EXPECT_EQ(describe(static_cast<DropReason>(i)), row.sentence);
  }
  EXPECT_EQ(names.size(), kDropReasons);
}

TEST(DropReasonTest, AdmissionsRefusalsReadAsBefore) {
  // The sentences deny events have always carried (tests/e2e read them).
  EXPECT_EQ(describe(DropReason::reserved), "destination in a reserved range");
  EXPECT_EQ(describe(DropReason::not_answered),
            "destination not answered by the DNS gate for an allowed name");
  EXPECT_EQ(info(DropReason::flows).name, "flows");
  EXPECT_EQ(info(DropReason::half_open).name, "half_open");
}

}  // namespace
}  // namespace abox::netstack
