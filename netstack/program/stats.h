// Stats: the one place that turns an abox-net process's counters into JSON.
// SIGUSR1 (a line on stderr), the stats socket (stats_server.h) and the
// final line at exit all print what these functions build, so the three
// never disagree.
//
// The object is flat: every value is an unsigned integer, so a reader needs
// no schema (stats_reader.h reads it back). Field names are stable: tests and
// scripts key on them; new fields go at the end. `abox-net run` begins with
// "frames_in", `abox-net dns` with "queries". A section is a name prefix:
// run's flow gauges (tcp_flows_*, udp_flows_open, ...) and its link's own
// counters (link_*, which fields depends on the link's kind) come last.
//
// Memory: RSS from /proc/self/statm (kept open from startup, so it still
// works under the sandbox, which forbids open()), heap in use from glibc's
// mallinfo2() (from the sanitizer's allocator in an ASan build).
#pragma once

#include <cstdint>
#include <string>

#include "base/unique_fd.h"

namespace abox::netstack {

class DnsHostServer;
class GuestStack;
class Link;
class MemoryTrimmer;
class PcapWriter;
class StreamLink;
class TapLink;

struct MemoryUsage {
  std::uint64_t rss_bytes = 0;
  std::uint64_t heap_in_use_bytes = 0;  // malloc'd and not freed (arenas + mmapped chunks)
};

class MemoryProbe {
 public:
  // Opens /proc/self/statm (startup). Without it, rss_bytes reads 0.
  MemoryProbe();
  MemoryUsage read() const;

 private:
  base::UniqueFd statm_;
};

struct RunStatsSources {
  const GuestStack& stack;
  const Link& link;
  const MemoryProbe& memory;
  const PcapWriter* pcap = nullptr;  // null: no --pcap
  // The link's own counters beyond LinkCounters (the link_* fields): at most
  // one is set, the kind `link` is (under a RecordingLink, the inner one).
  const TapLink* tap = nullptr;
  const StreamLink* stream = nullptr;
  const MemoryTrimmer* trimmer = nullptr;  // null: memory_trims* read 0
};

// The counters of `abox-net run`, as one JSON object (no newline).
std::string run_stats_json(const RunStatsSources& from);
// The counters of `abox-net dns`, as one JSON object (no newline).
// trimmer: null reads memory_trims* as 0.
std::string dns_stats_json(const DnsHostServer& server, const MemoryProbe& memory,
                           const MemoryTrimmer* trimmer);

// Writes json and a newline to fd (stderr for SIGUSR1), whole or not at all
// as far as one write() allows; errors are ignored (a gone reader costs the
// line, never the process).
void write_stats_line(int fd, const std::string& json);

}  // namespace abox::netstack
