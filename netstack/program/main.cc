// abox-net: the per-instance network appliance. Each mode lives in its own
// file; this one only dispatches.
#include <iostream>
#include <string_view>
#include <vector>

#include "netstack/program/dns_command.h"
#include "netstack/program/run_command.h"
#include "netstack/program/stats_command.h"

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net <mode> [options]\n"
    "\n"
    "Modes:\n"
    "  run      the appliance for one guest: a tap in its namespace, DNS gate, admission\n"
    "  dns      run only the DNS gate on a host socket (try a policy, benchmarks)\n"
    "  stats    print the live counters of a running abox-net (its --stats-socket)\n"
    "\n"
    "Run 'abox-net <mode> --help' for a mode's options.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  if (args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    return 0;
  }
  if (args[0] == "run") return abox::netstack::run_run_command(std::span(args).subspan(1));
  if (args[0] == "dns") return abox::netstack::run_dns_command(std::span(args).subspan(1));
  if (args[0] == "stats") return abox::netstack::run_stats_command(std::span(args).subspan(1));
  std::cerr << "abox-net: unknown mode '" << args[0] << "'\n" << kUsage;
  return 2;
}
