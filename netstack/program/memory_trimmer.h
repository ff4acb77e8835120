// MemoryTrimmer: hands memory glibc keeps after a burst back to the kernel.
//
// Why: free() keeps freed chunks in malloc's arenas for reuse; only a free
// top of the heap is given back by itself. After a burst (100 slow-reader
// flows, each holding up to flow_buffer_bytes in 64 KiB chunks) RSS stayed
// near 120 MiB with under 1 MiB in use. malloc_trim(0) releases the free
// pages inside the arenas too (madvise MADV_DONTNEED, and brk for the top).
//
// How: a timer source of the event loop checks every kCheckEvery, never on
// the packet path. It trims only when RSS exceeds the heap in use by at
// least kMinSurplus and is at least twice it (memory that is used is not
// worth a trim's walk), and, after a trim, only once RSS has grown again by
// kMinRegrowth (a trim that found nothing is not repeated every interval).
// Counted: trims done, and the RSS they gave back.
#pragma once

#include <cstdint>

#include "base/clock.h"
#include "io/event_loop.h"
#include "netstack/program/stats.h"

namespace abox::netstack {

struct TrimCounters {
  std::uint64_t trims = 0;
  std::uint64_t released_bytes = 0;  // RSS before - after, summed over trims
};

class MemoryTrimmer {
 public:
  static constexpr base::Seconds kCheckEvery{5};
  static constexpr std::uint64_t kMinSurplus = 16u << 20;
  static constexpr std::uint64_t kMinRegrowth = 8u << 20;

  // Checks on the loop's timer from now on. Both must outlive the trimmer,
  // and the loop must not run after it is gone.
  MemoryTrimmer(io::EventLoop& loop, const MemoryProbe& memory);
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // One check (the timer's; tests call it directly). True when it trimmed.
  bool check();

  const TrimCounters& counters() const { return counters_; }

 private:
  const MemoryProbe& memory_;
  base::MonoTime next_check_{};
  std::uint64_t rss_after_last_trim_ = 0;
  TrimCounters counters_;
  io::EventLoop::Registration check_timer_;  // last: unregistered first
};

}  // namespace abox::netstack
