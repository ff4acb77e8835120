#include "netstack/program/dns_command.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "base/command_line.h"
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
    "  -p, --policy FILE       the instance's policy (required)\n"
    "  -l, --listen ADDR:PORT  where to listen (default 127.0.0.1:5353; port 0 picks one)\n"
    "      --events FILE|-     JSON-lines events to FILE, or '-' for stdout (default: stderr);\n"
    "                          with '-' the 'listening on' line still comes first\n"
    "      --instance NAME     the instance name in events (default: dns)\n"
    "      --stats-socket PATH serve the live counters as JSON on a unix socket (0600);\n"
    "                          read them with 'abox-net stats PATH'\n"
    "      --no-sandbox        FOR DEBUGGING ONLY: keep capabilities, skip the seccomp\n"
    "                          filter and the io_uring restrictions (docs/security.md)\n"
    "\n"
    "Prints 'listening on ADDR:PORT' when ready. SIGUSR1 prints counters as JSON\n"
    "to stderr; SIGINT or SIGTERM prints them and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start\n"
    "(invalid policy, address in use, no upstream, stats socket not usable, no\n"
    "sandbox possible, this host's addresses not readable).\n";

}  // namespace

int run_dns_command(std::span<const std::string_view> args) {
  constexpr std::string_view kCommand = "abox-net dns";
  static constexpr base::OptionSpec kOptions[] = {
      {"policy", 'p', true}, {"listen", 'l', true},     {"events", 0, true},
      {"instance", 0, true}, {"stats-socket", 0, true}, {"no-sandbox", 0, false},
  };
  auto parsed = base::start_command(kCommand, kUsage, args, kOptions, std::cout, std::cerr);
  if (!parsed.ok()) return parsed.error();
  auto usage_error = [&](std::string_view message) {
    std::cerr << base::usage_error_line(kCommand, message);
    return 2;
  };
  if (!parsed->positionals.empty())
    return usage_error("unexpected argument '" + parsed->positionals[0] + "'");
  const std::optional<std::string> policy_path = parsed->last("policy");
  const std::string listen_text = parsed->last("listen").value_or("127.0.0.1:5353");
  const std::string events_path = parsed->last("events").value_or("");
  const std::string instance = parsed->last("instance").value_or("dns");
  const std::optional<std::string> stats_socket = parsed->last("stats-socket");
  const bool sandbox = !parsed->has("no-sandbox");
  if (!policy_path) return usage_error("--policy FILE is required");
  // Port 0 (the kernel picks one) is fine for a listener, unlike a destination.
  auto listen = policy::Endpoint::parse_listen(listen_text);
  if (!listen) listen = policy::Endpoint::parse(listen_text, 53);  // an address alone: port 53
  if (!listen) return usage_error("--listen '" + listen_text + "': expected ADDR:PORT (port 0 picks one)");
  auto loaded = load_policy_for("abox-net dns", *policy_path);
  if (!loaded) return 3;
  const policy::Policy& policy = *loaded->policy;
  const auto& upstreams = loaded->upstreams;
  auto sink = open_events("abox-net dns", events_path);
  if (!sink) return 3;
  base::EventLog events = sink->log(instance);
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
    // With --events - both go to stdout: the ready line first, then what
    // setup emitted (this host's addresses, held by the sink) and the start
    // event, since whoever waits for the ready line reads it first. Anywhere
    // else the start event comes first, so it is written once "listening" is.
    auto start_event = [&] {
      sink->release();
      events.emit("start", {{"mode", "dns"},
                            {"listen", server.address().to_string()},
                            {"policy", policy.source()},
                            {"upstreams", static_cast<std::uint64_t>(upstreams.size())}});
    };
    if (!sink->on_stdout()) start_event();
    std::cout << "listening on " << server.address().to_string() << std::endl;
    if (sink->on_stdout()) start_event();
    loop.run();
    write_stats_line(STDERR_FILENO, stats());
  } catch (const std::exception& e) {
    std::cerr << "abox-net dns: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
