// lwIP's process-global state across fixtures (lwip_test_state.h) and the
// glue it rests on (netstack/lwip/abox_lwip.h): a replaced clock takes the
// pending timers with it, deferred timers wait, and a reset lets go of the
// TCP pcbs an earlier test left. Without these, one test binary run whole
// (or shuffled) failed where ctest's process per test passed: LwipSmokeTest's
// fake clock froze the TcpFlow tests' delayed ACKs and window updates.
#include "tests/netstack/lwip/lwip_test_state.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "lwip/timeouts.h"

namespace abox::netstack {
namespace {

std::uint32_t g_fake_ms = 0;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
int g_fired = 0;              // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

u32_t fake_clock() {
  return g_fake_ms;
}
void count_firing(void*) {
  ++g_fired;
}

class LwipTestStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lwip_test::reset_lwip_state();
    g_fired = 0;
  }
  void TearDown() override {
    sys_untimeout(&count_firing, nullptr);
    abox_lwip_set_clock(nullptr);
  }
  // Runs the timers due at `at` (fake time); how many of ours fired.
  static int fire_at(std::uint32_t at) {
    g_fake_ms = at;
    sys_check_timeouts();
    return g_fired;
  }
};

// A timer 500 ms away on one clock is 500 ms away on the next, whatever
// either clock's "now" is (here 4e9 ms apart, past the 2^31 wrap window).
TEST_F(LwipTestStateTest, AReplacedClockTakesThePendingTimersWithIt) {
  g_fake_ms = 1'000'000;
  abox_lwip_set_clock(&fake_clock);
  sys_timeout(500, &count_firing, nullptr);
  g_fake_ms = 1'000'200;  // 300 ms left
  abox_lwip_set_clock(nullptr);
  g_fake_ms = 4'000'000'000u;
  abox_lwip_set_clock(&fake_clock);
  EXPECT_EQ(fire_at(4'000'000'000u), 0) << "due at once on the new clock";
  EXPECT_EQ(fire_at(4'000'000'299u), 0);
  EXPECT_EQ(fire_at(4'000'000'300u), 1) << "not due 300 ms later";
}

// Deferred: an overdue timer does not run at once, but `ms` later.
TEST_F(LwipTestStateTest, DeferredTimersWaitTheirTime) {
  g_fake_ms = 50'000;
  abox_lwip_set_clock(&fake_clock);
  sys_timeout(100, &count_firing, nullptr);
  g_fake_ms = 60'000;  // long overdue, as after a test that ran no timers
  abox_lwip_defer_timers(1000);
  EXPECT_EQ(fire_at(60'999), 0);
  EXPECT_EQ(fire_at(61'000), 1);
}

// The reset itself: the real clock back, nothing due within the interval.
TEST_F(LwipTestStateTest, AfterAResetNoTimerIsDueForASecond) {
  g_fake_ms = 7;
  abox_lwip_set_clock(&fake_clock);
  sys_timeout(10, &count_firing, nullptr);
  g_fake_ms = 100'000;  // overdue
  lwip_test::reset_lwip_state();
  EXPECT_GE(sys_timeouts_sleeptime(), lwip_test::kLwipTimerInterval - 50) << "a timer is due at once";
  EXPECT_NE(sys_timeouts_sleeptime(), SYS_TIMEOUTS_SLEEPTIME_INFINITE);
}

// A pcb an earlier test left (a handshake, TIME_WAIT) is let go, its
// callbacks not run (their argument may be gone).
TEST_F(LwipTestStateTest, AResetLetsGoOfTheTcpPcbsLeft) {
  tcp_pcb* left = tcp_new();
  ASSERT_NE(left, nullptr);
  tcp_arg(left, &g_fired);
  tcp_err(left, [](void* arg, err_t) { ++*static_cast<int*>(arg); });
  // As lwIP files a pcb that is past its handshake but not listening.
  left->state = SYN_RCVD;
  TCP_REG_ACTIVE(left);
  EXPECT_EQ(lwip_test::reset_lwip_state(), 1u);
  EXPECT_EQ(tcp_active_pcbs, nullptr);
  EXPECT_EQ(g_fired, 0) << "the left pcb's error callback ran";
}

}  // namespace
}  // namespace abox::netstack
