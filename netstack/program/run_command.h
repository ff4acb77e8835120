// `abox-net run`: the appliance for one guest (a tap in its namespace, a tap
// fd, or a VMM's stream socket), or, with `-- CMD`, a fresh namespace for
// CMD behind the appliance (run_namespace.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "netstack/link/tap_link.h"
#include "netstack/program/process_setup.h"
#include "policy/publish_spec.h"

namespace abox::netstack {

int run_run_command(std::span<const std::string_view> args);

// The appliance's settings, from the command line (see its --help).
struct ApplianceOptions {
  std::string policy_path;
  std::optional<std::string> netns;  // exactly one of netns, tap_fd, stream_path
  std::optional<int> tap_fd;
  std::optional<std::string> stream_path;
  std::string events_path;  // "" stderr, "-" stdout
  std::string instance = "guest";
  std::string broker_path;
  GuestNetConfig net;
  std::optional<std::string> pcap_path;
  std::uint64_t pcap_max_bytes = 1ull << 30;
  std::optional<std::string> stats_socket;
  bool sandbox = true;
  bool io_on_ring = true;
  // --ipv6 nd: answer IPv6 neighbour and router solicitations
  // (GuestConfig::ipv6_neighbour_discovery); --ipv6 on: that, IPv6 TCP and
  // UDP flows and the DNS gate over IPv6 (GuestConfig::ipv6_flows).
  bool ipv6_neighbour_discovery = false;
  bool audit = false;  // --audit: audit mode whatever the policy's [mode] says
  bool ipv6_flows = false;
  bool ipv6_deprecated_tcp = false;  // --ipv6 tcp, the old name of 'on': warned about
  // --publish (repeatable, no two on one host port: first_publish_clash()),
  // and --publish-max-connections: live connections (TCP) or peers (UDP)
  // per published port (netstack/stack/inbound_ports.h).
  std::vector<policy::PublishSpec> publish;
  std::uint32_t publish_max_connections = 64;
  // Where the ready line goes: -1 for stdout, else this fd (run -- CMD: the
  // parent that starts CMD reads it). Not with --stream.
  int ready_fd = -1;
  // Write the counters to stderr at exit (not under `run -- CMD`, whose
  // stderr is CMD's).
  bool stats_at_exit = true;
};

// What `abox-net run ARGS` asks for, read without running anything (so that
// every usage mistake is testable): --help, or the appliance's options and
// the CMD to run behind it (empty: the appliance for an existing link).
struct RunInvocation {
  bool help = false;
  ApplianceOptions options;
  std::vector<std::string> command;
};
// A usage mistake: the one-line message (without the "abox-net run: "
// prefix and the pointer to --help, which usage_error_line() adds) and the
// exit status: 2, or kRunCommandCouldNotStart (125) when a CMD was given.
struct RunUsageError {
  std::string message;
  int exit_code = 2;
};
// The policy file is only named here, not read (run_run_command() loads it).
base::Result<RunInvocation, RunUsageError> parse_run_options(std::span<const std::string_view> args);

// Runs the appliance until a signal, the guest namespace going away or the
// VMM leaving: 0; or 3 when it could not start (the reason on stderr).
int run_appliance(const ApplianceOptions& options, const LoadedPolicy& policy);

}  // namespace abox::netstack
