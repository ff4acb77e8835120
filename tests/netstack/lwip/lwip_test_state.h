// lwIP is process-global: one test binary runs many fixtures that use it
// (LwipSmokeTest by hand, every GuestStack test through StreamStackRig),
// in any order (--gtest_shuffle). reset_lwip_state() is the first thing
// each such fixture does, so that none sees what an earlier one left:
//   - lwIP initialised once per process (abox_lwip_init_once(): a second
//     lwip_init() would start its cyclic timers twice);
//   - the clock: the real one (LwipSmokeTest installs a fake one; lwIP's
//     pending timeouts move with the clock, abox_lwip_set_clock());
//   - lwIP's timers: none due for a second, as after lwip_init() (its
//     cyclic timers are 1 s): those an earlier test left overdue (nobody
//     ran them between tests) would otherwise fire in this test's first
//     turn (a second neighbour solicitation where the test expects one);
//   - the SYN hook unset;
//   - no TCP pcb left: a handshake a destroyed GuestStack never finished
//     (SYN_RCVD, its SYN-ACK retransmitted into the next test's link),
//     a closing or TIME_WAIT pcb. Each is let go without a segment sent and
//     without its callbacks (whose argument may be gone).
// Listeners, bound TCP pcbs, UDP pcbs and netifs are each test's own to
// remove (LwipSmokeTest's TearDown checks it; GuestStack's destructor does).
#pragma once

#include <cstddef>
#include <initializer_list>

#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "netstack/lwip/abox_lwip.h"

namespace abox::netstack::lwip_test {

// lwIP's cyclic timers (ARP, ND) run once a second.
inline constexpr u32_t kLwipTimerInterval = 1000;

// Returns how many pcbs it let go.
inline std::size_t reset_lwip_state() {
  abox_lwip_init_once();
  abox_lwip_set_clock(nullptr);
  abox_lwip_set_syn_hook(nullptr);
  std::size_t let_go = 0;
  for (tcp_pcb** list : {&tcp_active_pcbs, &tcp_tw_pcbs}) {
    while (*list != nullptr) {
      tcp_pcb* pcb = *list;
      tcp_arg(pcb, nullptr);
      tcp_recv(pcb, nullptr);
      tcp_sent(pcb, nullptr);
      tcp_err(pcb, nullptr);
      tcp_poll(pcb, nullptr, 0);
      tcp_abandon(pcb, 0);
      ++let_go;
    }
  }
  abox_lwip_defer_timers(kLwipTimerInterval);
  return let_go;
}

}  // namespace abox::netstack::lwip_test
