// kill_all_processes_but (see process_sweep.h).
#include "guest/box_guest/process_sweep.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace abox::guest {

void kill_all_processes_but(std::span<const pid_t> spare) {
  if (spare.empty()) {
    ::kill(-1, SIGKILL);
    return;
  }
  const pid_t self = ::getpid();
  for (int round = 0; round < kSweepRounds; ++round) {
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return;
    int killed = 0, seen = 0;
    while (const dirent* e = ::readdir(proc)) {
      if (++seen > kMaxProcsPerRound) break;
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || pid <= 0 || pid == self) continue;
      if (std::find(spare.begin(), spare.end(), static_cast<pid_t>(pid)) != spare.end()) continue;
      // Kernel threads ignore SIGKILL from userspace; their /proc entries are harmless.
      if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
    }
    ::closedir(proc);
    if (killed == 0) return;
  }
}

}  // namespace abox::guest
