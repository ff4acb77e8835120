// run_stats_json() over a real GuestStack on a StreamLink (a socketpair, the
// test as the VMM): the flow gauges by state are present, start at 0 and add
// up to tcp_flows; the link section carries the stream link's own counters
// (runt and zero-length records the VMM sent, output not yet written); every
// field reads back through the same parser `abox-net stats` uses, once.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "base/event_log.h"
#include "base/random.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/link/stream_link.h"
#include "netstack/program/stats.h"
#include "netstack/program/stats_reader.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"
#include "tests/netstack/stack/stream_stack_support.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kMtu = 1500;

std::map<std::string, std::uint64_t> parsed(const std::string& json) {
  auto fields = parse_stats_json(base::as_bytes(json));
  EXPECT_TRUE(fields.ok()) << (fields.ok() ? "" : fields.error());
  std::map<std::string, std::uint64_t> out;
  if (!fields.ok()) return out;
  for (const auto& f : *fields) EXPECT_TRUE(out.emplace(f.name, f.value).second) << "twice: " << f.name;
  return out;
}

using stream_stack_test::write_all;

TEST(RunStatsTest, FlowGaugesAndTheStreamLinksSection) {
  stream_stack_test::StreamStackRig rig(kMtu);
  ASSERT_TRUE(rig.link);
  io::EventLoop& loop = rig.loop;
  StreamLink& link = *rig.link;
  const base::UniqueFd& vmm = rig.vmm;
  GuestStack stack(loop, link, rig.policy, rig.upstreams, rig.events, rig.random);
  MemoryProbe memory;

  // A runt record (5 bytes: shorter than an Ethernet header), two empty
  // records, and a runt again: all dropped by the link, each counted.
  write_all(vmm.get(), {0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 9, 9, 9});
  // The stack reads the stream link on the ring: a turn or two takes them.
  for (int turn = 0; turn < 100 && link.dropped_runt() + link.dropped_zero_length() < 4; ++turn) {
    loop.run_once(base::Millis(20));
  }

  auto s = parsed(run_stats_json({stack, link, memory, nullptr, nullptr, &link}));
  for (const char* name : {"tcp_flows_peeking", "tcp_flows_connecting", "tcp_flows_open", "tcp_flows_closing",
                           "tcp_flows_brokered", "tcp_half_open", "tcp_time_wait", "udp_flows_open"}) {
    ASSERT_EQ(s.count(name), 1u) << name;
    EXPECT_EQ(s[name], 0u) << name;
  }
  EXPECT_EQ(s["tcp_flows_peeking"] + s["tcp_flows_connecting"] + s["tcp_flows_open"] +
                s["tcp_flows_closing"] + s["tcp_flows_brokered"],
            s["tcp_flows"]);
  EXPECT_EQ(s["link_frames_dropped_runt"], 2u);
  EXPECT_EQ(s["link_frames_dropped_zero_length"], 2u);
  EXPECT_EQ(s["link_send_calls"], link.send_calls());
  ASSERT_EQ(s.count("link_frames_lost_unsent"), 1u);
  EXPECT_EQ(s["link_frames_lost_unsent"], 0u);
  EXPECT_EQ(s.count("memory_trims"), 1u);
  // What the stack sent at start (lwIP's first ARP) waits for the end of
  // the turn: the gauge shows it, and 0 once written.
  EXPECT_EQ(s["link_output_queued_bytes"], link.queued());
  ASSERT_TRUE(link.flush().ok());
  EXPECT_EQ(
      parsed(run_stats_json({stack, link, memory, nullptr, nullptr, &link}))["link_output_queued_bytes"], 0u);
  EXPECT_EQ(s["frames_in"], 0u);  // none of them was a frame

  // Without a link kind given, there is no link section (and nothing else
  // changes): a reader keys on names, never on positions.
  auto plain = parsed(run_stats_json({stack, link, memory}));
  EXPECT_EQ(plain.count("link_frames_dropped_runt"), 0u);
  EXPECT_EQ(plain.size() + 5, s.size());
}

// Every StackCounters field (kStackCounterFields lists them all: the
// struct's size is checked against it when it builds) reaches the stats
// output under its name, with its own value.
TEST(RunStatsTest, EveryStackCounterReachesTheStats) {
  stream_stack_test::StreamStackRig rig(kMtu);
  ASSERT_TRUE(rig.link);
  GuestStack stack(rig.loop, *rig.link, rig.policy, rig.upstreams, rig.events, rig.random);
  MemoryProbe memory;
  StackCounters& c = stack.mutable_counters();
  std::uint64_t value = 1'000'000;
  for (const StackCounterField& f : kStackCounterFields) c.*f.member = value++;
  auto s = parsed(run_stats_json({stack, *rig.link, memory}));
  value = 1'000'000;
  for (const StackCounterField& f : kStackCounterFields) {
    ASSERT_EQ(s.count(std::string(f.name)), 1u) << f.name;
    EXPECT_EQ(s[std::string(f.name)], value++) << f.name;
  }
}

// The route cache's counters (route_cache.h) reach the stats: forget_routes()
// (a route notification) counts as an invalidation.
TEST(RunStatsTest, TheRouteCacheCountersReachTheStats) {
  stream_stack_test::StreamStackRig rig(kMtu);
  ASSERT_TRUE(rig.link);
  GuestStack stack(rig.loop, *rig.link, rig.policy, rig.upstreams, rig.events, rig.random);
  MemoryProbe memory;
  stack.forget_routes();
  stack.forget_routes();
  auto s = parsed(run_stats_json({stack, *rig.link, memory}));
  EXPECT_EQ(s["route_cache_invalidations"], 2u);
  for (const char* name : {"route_cache_hits", "route_cache_misses", "route_cache_entries"}) {
    ASSERT_EQ(s.count(name), 1u) << name;
    EXPECT_EQ(s[name], 0u) << name;
  }
}

}  // namespace
}  // namespace abox::netstack
