#include "netstack/program/stats.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#if defined(__SANITIZE_ADDRESS__)
#define ABOX_STATS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABOX_STATS_ASAN 1
#endif
#endif
#if defined(ABOX_STATS_ASAN)
// From the sanitizer runtime (GCC ships no header for it).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

#include "base/json.h"
#include "netstack/gateway/guest_dns.h"
#include "netstack/link/link.h"
#include "netstack/link/pcap_writer.h"
#include "netstack/link/stream_link.h"
#include "netstack/link/tap_link.h"
#include "netstack/program/dns_host_server.h"
#include "netstack/program/memory_trimmer.h"
#include "netstack/stack/guest_stack.h"

namespace abox::netstack {

namespace {

std::uint64_t u64(std::size_t n) {
  return static_cast<std::uint64_t>(n);
}

// The fields both modes end with.
void memory_fields(base::JsonWriter& w, const MemoryProbe& memory) {
  const MemoryUsage m = memory.read();
  w.field("memory_rss_bytes", m.rss_bytes).field("memory_heap_in_use_bytes", m.heap_in_use_bytes);
}

}  // namespace

MemoryProbe::MemoryProbe() : statm_(::open("/proc/self/statm", O_RDONLY | O_CLOEXEC)) {}

MemoryUsage MemoryProbe::read() const {
  MemoryUsage out;
  if (statm_) {
    // statm: "size resident shared text lib data dt", in pages. pread at 0
    // makes the kernel render the file afresh.
    char buf[128];
    const ssize_t n = ::pread(statm_.get(), buf, sizeof buf - 1, 0);
    if (n > 0) {
      std::size_t i = 0;
      const auto len = static_cast<std::size_t>(n);
      while (i < len && buf[i] != ' ') ++i;  // size
      ++i;
      std::uint64_t pages = 0;
      if (i < len) (void)std::from_chars(buf + i, buf + len, pages);  // 0 when unreadable
      out.rss_bytes = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    }
  }
#if defined(ABOX_STATS_ASAN)
  // ASan replaces malloc, and its mallinfo2 reports nothing: ask it instead.
  out.heap_in_use_bytes = u64(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 mi = ::mallinfo2();
  out.heap_in_use_bytes = u64(mi.uordblks) + u64(mi.hblkhd);
#endif
  return out;
}

std::string run_stats_json(const RunStatsSources& from) {
  const GuestStack& s = from.stack;
  const auto& c = s.counters();
  const auto& g = s.dns().gate().counters();
  const auto& gd = s.dns().counters();
  const auto& l = from.link.counters();
  const GuestStack::LwipCounts lw = GuestStack::lwip_counts();
  const auto& t = s.table().counters();
  std::string out;
  base::JsonWriter w(out);
  // The first fields are those SIGUSR1 has always printed, in that order.
  w.begin_object()
      .field("frames_in", l.frames_in)
      .field("frames_out", l.frames_out)
      .field("frames_dropped_ipv6", c.frames_dropped_ipv6)
      .field("frames_dropped_other", c.frames_dropped_other)
      .field("frames_dropped_spoofed", c.frames_dropped_spoofed)
      .field("frames_dropped_fragment", c.frames_dropped_fragment)
      .field("icmp_not_for_gateway", lw.icmp_not_for_gateway)
      .field("frames_dropped_oversize", l.dropped_oversize)
      .field("tcp_flows", u64(s.tcp_flows()))
      .field("udp_flows", u64(s.udp_flows()))
      .field("echo_flows", u64(s.echo_flows()))
      .field("tcp_admitted", c.tcp_admitted)
      .field("tcp_refused", c.tcp_refused)
      .field("tcp_brokered", c.tcp_brokered)
      .field("udp_admitted", c.udp_admitted)
      .field("udp_refused", c.udp_refused)
      .field("name_refused", c.name_refused)
      .field("connect_failed", c.connect_failed)
      .field("limit_flows", c.limit_flows)
      .field("limit_half_open", c.limit_half_open)
      .field("dns_queries", g.queries)
      .field("dns_denied", g.denied)
      .field("dns_cache_hits", g.cache_hits)
      .field("dns_rebinding", g.rebinding)
      .field("dns_malformed", g.malformed)
      .field("dns_in_flight_full", g.in_flight_full)
      .field("dhcp_offers", c.dhcp_offers)
      .field("dhcp_acks", c.dhcp_acks)
      .field("dhcp_naks", c.dhcp_naks)
      .field("dhcp_ignored", c.dhcp_ignored)
      .field("dhcp_malformed", c.dhcp_malformed)
      .field("answer_table_size", u64(s.table().size()))
      // Added with the stats socket.
      .field("bytes_in", l.bytes_in)
      .field("bytes_out", l.bytes_out)
      .field("frames_dropped_send", l.dropped_send)
      .field("syn_dropped", c.syn_dropped)
      .field("syn_reset", c.syn_reset)
      .field("dns_answered", g.answered)
      .field("dns_forwarded", g.forwarded)
      .field("dns_coalesced", g.coalesced)
      .field("dns_refused_type", g.refused_type)
      .field("dns_nodata_https", g.nodata_https)
      .field("dns_servfail", g.servfail)
      .field("dns_truncated", g.truncated)
      .field("dns_upstream_timeouts", g.upstream_timeouts)
      .field("dns_upstream_errors", g.upstream_errors)
      .field("dns_upstream_ignored", g.upstream_ignored)
      .field("dns_tcp_retries", g.tcp_retries)
      .field("dns_unsafe_lifted", g.unsafe_lifted)
      .field("dns_in_flight", u64(s.dns().gate().in_flight()))
      .field("dns_cache_entries", u64(s.dns().gate().cache().size()))
      .field("dns_udp_queries", gd.udp_queries)
      .field("dns_tcp_accepted", gd.tcp_accepted)
      .field("dns_tcp_refused", gd.tcp_refused)
      .field("dns_tcp_overflow", gd.tcp_overflow)
      .field("dns_send_failed", gd.send_failed)
      .field("answer_table_evicted", t.evicted_expired + t.evicted_oldest)
      .field("answer_table_names_dropped", t.names_dropped);
  if (from.pcap != nullptr) {
    const auto& p = from.pcap->counters();
    w.field("pcap_frames", p.frames_written)
        .field("pcap_bytes", p.bytes_written)
        .field("pcap_frames_over_cap", p.frames_over_cap)
        .field("pcap_write_errors", p.write_errors);
  }
  memory_fields(w, from.memory);
  w.field("tcp_time_wait_dropped", c.time_wait_dropped);  // added at the end: names are stable
  // Live flows by state (gauges, not counters: they fall back as flows end).
  const FlowGauges fg = s.flow_gauges();
  w.field("tcp_flows_peeking", fg.tcp_peeking)
      .field("tcp_flows_connecting", fg.tcp_connecting)
      .field("tcp_flows_open", fg.tcp_open)
      .field("tcp_flows_closing", fg.tcp_closing)
      .field("tcp_flows_brokered", fg.tcp_brokered)
      .field("tcp_half_open", fg.tcp_half_open)
      .field("tcp_time_wait", fg.tcp_time_wait)
      .field("udp_flows_open", fg.udp_open);
  // What malloc_trim gave back after bursts (memory_trimmer.h).
  const TrimCounters trims = from.trimmer != nullptr ? from.trimmer->counters() : TrimCounters{};
  w.field("memory_trims", trims.trims).field("memory_trimmed_bytes", trims.released_bytes);
  // UDP flows that left the ring receive for readiness (added at the end: names are stable).
  w.field("udp_ring_receive_fallbacks", c.udp_ring_receive_fallbacks);
  // Guest frames whose headers do not add up (guest_frame.h; added at the end).
  w.field("frames_dropped_malformed", c.frames_dropped_malformed);
  // Frames the stack took from the link (the link's own frames_in counts
  // before its runt checks).
  w.field("stack_frames_in", c.frames_in);
  // IPv6 routing headers, hidden upper layers, unhandled next headers
  // (issue 21; added at the end).
  w.field("frames_dropped_ipv6_extension", c.frames_dropped_ipv6_extension);
  // The gateway's IPv6 neighbour discovery (ndp_responder.h; all 0 while
  // it is off).
  const NdpCounters& nd = s.ndp_counters();
  w.field("ndp_router_advertisements", nd.router_advertisements)
      .field("ndp_neighbour_advertisements", nd.neighbour_advertisements)
      .field("ndp_not_for_gateway", nd.not_for_gateway)
      .field("ndp_guest_router_advertisements", nd.guest_router_advertisements)
      .field("ndp_ignored", nd.ignored)
      .field("ndp_malformed", nd.malformed)
      .field("ndp_rate_limited", nd.rate_limited);
  // Live policy reloads (GuestStack::apply_policy(); added at the end).
  w.field("policy_reloads", c.policy_reloads)
      .field("flows_revoked", c.flows_revoked)
      .field("answers_forgotten", c.answers_forgotten);
  // Audit mode (added at the end): flows and names let through that the
  // policy would have refused.
  w.field("audit_would_deny", c.audit_would_deny).field("dns_would_deny", g.would_deny);
  // Egress budgets (added at the end).
  w.field("budget_crossed", c.budget_crossed)
      .field("budget_refused", c.budget_refused)
      .field("budget_cut", c.budget_cut);
  // ICMP(v6) unreachables for refused UDP (added at the end).
  w.field("icmp_unreachable_sent", c.icmp_unreachable_sent)
      .field("icmp_unreachable_limited", c.icmp_unreachable_limited);
  // Published ports (inbound_ports.h; added at the end).
  w.field("inbound_accepted", c.inbound_accepted)
      .field("inbound_refused_limit", c.inbound_refused_limit)
      .field("inbound_refused_guest", c.inbound_refused_guest);
  // The stateless DHCPv6 server (dhcpv6_server.h; added at the end; all 0
  // unless --ipv6 on).
  const Dhcpv6Counters& d6 = s.dhcpv6_counters();
  w.field("dhcpv6_answered", d6.answered)
      .field("dhcpv6_ignored", d6.ignored)
      .field("dhcpv6_malformed", d6.malformed)
      .field("dhcpv6_rate_limited", d6.rate_limited);
  // ICMP(v6) "packet too big" for guest frames over the MTU (packet_too_big.h;
  // added at the end).
  w.field("icmp_packet_too_big_sent", c.icmp_packet_too_big_sent)
      .field("icmp_packet_too_big_limited", c.icmp_packet_too_big_limited);
  // The IPv6 route cache (route_cache.h; added at the end): answers from
  // the table, kernel lookups, route changes that emptied it.
  const RouteCache& rc = s.routes();
  w.field("route_cache_hits", rc.hits())
      .field("route_cache_misses", rc.misses())
      .field("route_cache_invalidations", rc.invalidations())
      .field("route_cache_entries", u64(rc.size()));
  // Echo flows (echo_flow.h; added at the end).
  w.field("echo_admitted", c.echo_admitted)
      .field("echo_refused", c.echo_refused)
      .field("echo_not_permitted", c.echo_not_permitted)
      .field("echo_requests", c.echo_requests)
      .field("echo_replies", c.echo_replies)
      .field("echo_replies_dropped", c.echo_replies_dropped);
  // Retransmissions (added at the end): lwIP's to the guest (abox_lwip.h),
  // and what abox-net's host TCP sockets counted as their flows ended.
  w.field("tcp_retransmit_timeouts", lw.tcp_retransmit_timeouts)
      .field("tcp_fast_retransmits", lw.tcp_fast_retransmits)
      .field("host_tcp_retransmits", c.host_tcp_retransmits)
      .field("host_tcp_out_of_order", c.host_tcp_out_of_order);
  // The link section: what only this kind of link counts.
  if (from.tap != nullptr) {
    w.field("link_frames_dropped_runt", from.tap->dropped_runt());
  } else if (from.stream != nullptr) {
    const StreamLink& st = *from.stream;
    w.field("link_frames_dropped_runt", st.dropped_runt())
        .field("link_frames_dropped_zero_length", st.dropped_zero_length())
        .field("link_output_queued_bytes", u64(st.queued()))
        .field("link_send_calls", st.send_calls())
        .field("link_frames_lost_unsent", st.lost_unsent());
  }
  w.end_object();
  return out;
}

std::string dns_stats_json(const DnsHostServer& server, const MemoryProbe& memory,
                           const MemoryTrimmer* trimmer) {
  const auto& g = server.gate().counters();
  const auto& t = server.table().counters();
  const auto& c = server.counters();
  const auto& cache = server.gate().cache().counters();
  std::string out;
  base::JsonWriter w(out);
  w.begin_object()
      .field("queries", g.queries)
      .field("answered", g.answered)
      .field("cache_hits", g.cache_hits)
      .field("denied", g.denied)
      .field("malformed", g.malformed)
      .field("refused_type", g.refused_type)
      .field("nodata_https", g.nodata_https)
      .field("forwarded", g.forwarded)
      .field("coalesced", g.coalesced)
      .field("in_flight_full", g.in_flight_full)
      .field("upstream_timeouts", g.upstream_timeouts)
      .field("upstream_errors", g.upstream_errors)
      .field("upstream_ignored", g.upstream_ignored)
      .field("tcp_retries", g.tcp_retries)
      .field("servfail", g.servfail)
      .field("truncated", g.truncated)
      .field("rebinding", g.rebinding)
      .field("unsafe_lifted", g.unsafe_lifted)
      .field("answer_table_size", u64(server.table().size()))
      .field("answer_table_evicted", t.evicted_expired + t.evicted_oldest)
      .field("cache_entries", u64(server.gate().cache().size()))
      .field("cache_evicted", cache.evicted)
      .field("udp_received", c.udp_received)
      .field("udp_sent", c.udp_sent)
      .field("udp_send_errors", c.udp_send_errors)
      .field("client_table_full", c.client_table_full)
      .field("tcp_accepted", c.tcp_accepted)
      .field("tcp_refused", c.tcp_refused)
      // Added with the stats socket.
      .field("in_flight", u64(server.gate().in_flight()))
      .field("tcp_closed_idle", c.tcp_closed_idle)
      .field("tcp_closed_overflow", c.tcp_closed_overflow);
  memory_fields(w, memory);
  // Added with the trimmer in dns mode (memory_trimmer.h).
  const TrimCounters trims = trimmer != nullptr ? trimmer->counters() : TrimCounters{};
  w.field("memory_trims", trims.trims).field("memory_trimmed_bytes", trims.released_bytes);
  w.end_object();
  return out;
}

void write_stats_line(int fd, const std::string& json) {
  std::string line = json;
  line += '\n';
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace abox::netstack
