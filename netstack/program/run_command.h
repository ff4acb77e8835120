// `abox-net run`: the appliance for one guest (a tap in its namespace, a tap
// fd, or a VMM's stream socket), or, with `-- CMD`, a fresh namespace for
// CMD behind the appliance (run_namespace.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "netstack/link/tap_link.h"
#include "netstack/program/process_setup.h"

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
  // Where the ready line goes: -1 for stdout, else this fd (run -- CMD: the
  // parent that starts CMD reads it). Not with --stream.
  int ready_fd = -1;
  // Write the counters to stderr at exit (not under `run -- CMD`, whose
  // stderr is CMD's).
  bool stats_at_exit = true;
};

// Runs the appliance until a signal, the guest namespace going away or the
// VMM leaving: 0; or 3 when it could not start (the reason on stderr).
int run_appliance(const ApplianceOptions& options, const LoadedPolicy& policy);

}  // namespace abox::netstack
