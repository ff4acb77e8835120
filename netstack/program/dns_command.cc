#include "netstack/program/dns_command.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "base/json.h"
#include "netstack/program/dns_host_server.h"
#include "netstack/program/host_address_watch.h"
#include "netstack/program/memory_trimmer.h"
#include "netstack/program/process_setup.h"
#include "netstack/program/sandbox.h"
#include "netstack/program/stats.h"
#include "netstack/program/stats_server.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net dns --policy FILE [--listen ADDR:PORT] [options]\n"
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
    "  --stats-socket PATH serve the live counters as JSON on a unix socket (0600);\n"
    "                      read them with 'abox-net stats PATH'\n"
    "  --no-sandbox        FOR DEBUGGING ONLY: keep capabilities, skip the seccomp\n"
    "                      filter and the io_uring restrictions (docs/security.md)\n"
    "\n"
    "Prints 'listening on ADDR:PORT' when ready. SIGUSR1 prints counters as JSON\n"
    "to stderr; SIGINT or SIGTERM prints them and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start\n"
    "(invalid policy, address in use, no upstream, stats socket not usable, no\n"
    "sandbox possible, this host's addresses not readable).\n";

}  // namespace

int run_dns_command(std::span<const std::string_view> args) {
  std::optional<std::string> policy_path;
  std::string listen_text = "127.0.0.1:5353";
  std::string events_path;
  std::string instance = "dns";
  std::optional<std::string> stats_socket;
  bool sandbox = true;
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
    } else if (a == "--stats-socket" && value(v)) {
      stats_socket = v;
    } else if (a == "--no-sandbox") {
      sandbox = false;
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
  MemoryProbe memory;

  try {
    io::EventLoop loop;
    // Gives back what glibc keeps after a burst (TCP clients' unsent
    // answers, a flood of queries), every few seconds, as in `run`.
    MemoryTrimmer trimmer(loop, memory);
    DnsHostServer server(loop, policy, upstreams, *listen, events, random);
    // This host's addresses, filtered out of every answer; before the
    // sandbox (a netlink socket).
    auto host_watch = HostAddressWatch::start(loop, server.host_addresses(), events);
    if (!host_watch.ok()) {
      std::cerr << "abox-net dns: " << host_watch.error() << '\n';
      return 3;
    }
    auto stats = [&] { return dns_stats_json(server, memory, &trimmer); };
    SignalWatch signals(loop, [&] { write_stats_line(STDERR_FILENO, stats()); });
    std::unique_ptr<StatsServer> stats_server;
    if (stats_socket) {
      auto made = StatsServer::create(loop, *stats_socket, stats);
      if (!made.ok()) {
        std::cerr << "abox-net dns: --stats-socket: " << made.error() << '\n';
        return 3;
      }
      stats_server = std::move(made).value();
    }
    if (sandbox) {
      if (auto r = enter_sandbox(loop); !r.ok()) {
        std::cerr << "abox-net dns: cannot enter the sandbox: " << r.error() << '\n';
        return 3;
      }
    }
    events.emit("start", {{"mode", "dns"},
                          {"listen", server.address().to_string()},
                          {"policy", policy.source()},
                          {"upstreams", static_cast<std::uint64_t>(upstreams.size())}});
    std::cout << "listening on " << server.address().to_string() << std::endl;
    loop.run();
    write_stats_line(STDERR_FILENO, stats());
  } catch (const std::exception& e) {
    std::cerr << "abox-net dns: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
