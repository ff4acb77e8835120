#include "netstack/program/memory_trimmer.h"

#include <malloc.h>

namespace abox::netstack {

MemoryTrimmer::MemoryTrimmer(io::EventLoop& loop, const MemoryProbe& memory)
    : memory_(memory), next_check_(loop.now() + kCheckEvery) {
  check_timer_ = loop.add_timer_source({[this] { return next_check_; },
                                        [this](base::MonoTime now) {
                                          if (now < next_check_) return;
                                          next_check_ = now + kCheckEvery;
                                          check();
                                        }});
}

bool MemoryTrimmer::check() {
  const MemoryUsage before = memory_.read();
  if (before.rss_bytes == 0) return false;  // no /proc/self/statm: nothing to go by
  if (before.rss_bytes < before.heap_in_use_bytes + kMinSurplus) return false;
  if (before.rss_bytes < 2 * before.heap_in_use_bytes) return false;
  if (rss_after_last_trim_ != 0 && before.rss_bytes < rss_after_last_trim_ + kMinRegrowth) return false;
  ::malloc_trim(0);
  const std::uint64_t after = memory_.read().rss_bytes;
  ++counters_.trims;
  if (after < before.rss_bytes) counters_.released_bytes += before.rss_bytes - after;
  rss_after_last_trim_ = after;
  return true;
}

}  // namespace abox::netstack
