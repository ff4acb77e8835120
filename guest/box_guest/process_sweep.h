// kill_all_processes_but: what box-guest, as the VM's init, does when the
// command's main process has exited: every other process goes (a background
// job or a daemon that left the command's session would hold its output
// open), except the ones named (a copy's tar, which runs beside the command
// and has its own end).
//
// With nothing to spare it is kill(-1, SIGKILL), which the kernel applies to
// every process but the caller at once. Otherwise /proc is walked and every
// pid but the caller's and the spared ones gets SIGKILL, a few rounds
// (kSweepRounds), since a process may fork while the walk goes on; what
// still escapes holds the command's output open only until the spared
// processes are gone and the session sweeps again (session.h).
#pragma once

#include <sys/types.h>

#include <span>

namespace abox::guest {

inline constexpr int kSweepRounds = 3;
inline constexpr int kMaxProcsPerRound = 65536;

// Only for PID 1: anything else would kill its own world.
void kill_all_processes_but(std::span<const pid_t> spare);

}  // namespace abox::guest
