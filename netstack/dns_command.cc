#include "netstack/dns_command.h"

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "base/json.h"
#include "netstack/dns_host_server.h"
#include "netstack/process_setup.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net dns --policy FILE [--listen ADDR:PORT] [--events FILE|-] [--instance NAME]\n"
    "\n"
    "Runs only the DNS gate, on a host socket (UDP and TCP on the same port):\n"
    "allowed names are forwarded to the policy's upstreams and filtered,\n"
    "everything else is refused. For benchmarks, and to try a policy.\n"
    "\n"
    "Options:\n"
    "  --policy FILE       the instance's policy (required)\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:5353; port 0 picks one)\n"
    "  --events FILE|-     JSON-lines events to FILE, or '-' for stdout (default: stderr)\n"
    "  --instance NAME     the instance name in events (default: dns)\n"
    "\n"
    "Prints 'listening on ADDR:PORT' when ready. SIGUSR1 prints counters as JSON\n"
    "to stderr; SIGINT or SIGTERM prints them and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start\n"
    "(invalid policy, address in use, no upstream).\n";

void write_counters(const DnsHostServer& s) {
  const auto& g = s.gate().counters();
  const auto& t = s.table().counters();
  const auto& c = s.counters();
  const auto& cache = s.gate().cache().counters();
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
      .field("answer_table_size", static_cast<std::uint64_t>(s.table().size()))
      .field("answer_table_evicted", t.evicted_expired + t.evicted_oldest)
      .field("cache_entries", static_cast<std::uint64_t>(s.gate().cache().size()))
      .field("cache_evicted", cache.evicted)
      .field("udp_received", c.udp_received)
      .field("udp_sent", c.udp_sent)
      .field("udp_send_errors", c.udp_send_errors)
      .field("client_table_full", c.client_table_full)
      .field("tcp_accepted", c.tcp_accepted)
      .field("tcp_refused", c.tcp_refused)
      .end_object();
  out += '\n';
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

int run_dns_command(std::span<const std::string_view> args) {
  std::optional<std::string> policy_path;
  std::string listen_text = "127.0.0.1:5353";
  std::string events_path;
  std::string instance = "dns";
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size()) return false;
      out = std::string(args[++i]);
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--policy" && value(v)) {
      policy_path = v;
    } else if (a == "--listen" && value(v)) {
      listen_text = v;
    } else if (a == "--events" && value(v)) {
      events_path = v;
    } else if (a == "--instance" && value(v)) {
      instance = v;
    } else {
      std::cerr << "abox-net dns: unknown or incomplete option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (!policy_path) {
    std::cerr << "abox-net dns: --policy is required\n" << kUsage;
    return 2;
  }
  // Port 0 (the kernel picks one) is fine for a listener, unlike a destination.
  std::string_view lt = listen_text;
  auto listen = lt.ends_with(":0") ? policy::Endpoint::parse(lt.substr(0, lt.size() - 2), 0)
                                   : policy::Endpoint::parse(lt, 53);
  if (!listen) {
    std::cerr << "abox-net dns: cannot read --listen '" << listen_text << "': expected ADDR:PORT\n";
    return 2;
  }
  auto loaded = load_policy_for("abox-net dns", *policy_path);
  if (!loaded) return 3;
  const policy::Policy& policy = *loaded->policy;
  const auto& upstreams = loaded->upstreams;
  auto sink = open_events("abox-net dns", events_path);
  if (!sink) return 3;
  base::EventLog events = base::EventLog::to_fd(instance, sink->fd);
  base::SystemRandom random;

  try {
    EventLoop loop;
    DnsHostServer server(loop, policy, upstreams, *listen, events, random);
    SignalWatch signals(loop, [&server] { write_counters(server); });
    events.emit("start", {{"mode", "dns"},
                          {"listen", server.address().to_string()},
                          {"policy", policy.source()},
                          {"upstreams", static_cast<std::uint64_t>(upstreams.size())}});
    std::cout << "listening on " << server.address().to_string() << std::endl;
    loop.run();
    write_counters(server);
  } catch (const std::exception& e) {
    std::cerr << "abox-net dns: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
