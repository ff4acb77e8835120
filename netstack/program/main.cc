// abox-net: the per-instance network appliance. Each mode lives in its own
// file; this one only dispatches.
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/command_line.h"
#include "netstack/program/dns_command.h"
#include "netstack/program/explain_command.h"
#include "netstack/program/reload_command.h"
#include "netstack/program/run_command.h"
#include "netstack/program/stats_command.h"

#ifndef ABOX_VERSION
#define ABOX_VERSION "unknown"
#endif

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net <mode> [options]\n"
    "\n"
    "abox-net is abox's network appliance: it owns one guest's link, answers DNS\n"
    "only for the names the policy allows, and admits a flow only to an address\n"
    "it answered for an allowed name.\n"
    "\n"
    "Modes:\n"
    "  run      the appliance for one guest: a tap in its namespace (or a VM's\n"
    "           stream socket), DNS gate, admission; 'run [options] -- CMD' makes a\n"
    "           fresh namespace for CMD and ends when CMD ends\n"
    "  dns      run only the DNS gate on a host socket (try a policy, benchmarks)\n"
    "  stats    print the live counters of a running abox-net (its --stats-socket)\n"
    "  explain  ask a running abox-net about an address or name now (its --stats-socket)\n"
    "  reload   give a running abox-net run a new policy (its --stats-socket)\n"
    "  help [MODE]  this text, or MODE's (as 'abox-net MODE --help')\n"
    "\n"
    "Options:\n"
    "  -h, --help       this text (also after any mode)\n"
    "  -V, --version    print the version\n"
    "\n"
    "Every mode takes --opt value and --opt=value, -- to end its options, and\n"
    "says what is wrong with its arguments in one line.\n"
    "\n"
    "Exit status: 0 success, 1 a negative answer (explain: refused; reload: invalid),\n"
    "2 usage error, "
    "3 could not start or could not get an answer. 'run -- CMD' passes CMD's status\n"
    "through and has its own (122-127: see 'abox-net run --help').\n";

int dispatch(std::span<const std::string_view> args) {
  const std::string_view mode = args[0];
  if (mode == "run") return abox::netstack::run_run_command(args.subspan(1));
  if (mode == "dns") return abox::netstack::run_dns_command(args.subspan(1));
  if (mode == "stats") return abox::netstack::run_stats_command(args.subspan(1));
  if (mode == "explain") return abox::netstack::run_explain_command(args.subspan(1));
  if (mode == "reload") return abox::netstack::run_reload_command(args.subspan(1));
  std::cerr << abox::base::usage_error_line("abox-net", "unknown mode '" + std::string(mode) + "'");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << abox::base::usage_error_line("abox-net", "which mode? run, dns, stats, explain or reload");
    return 2;
  }
  if (args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    return 0;
  }
  if (args[0] == "-V" || args[0] == "--version") {
    std::cout << "abox-net " << ABOX_VERSION << '\n';
    return 0;
  }
  if (args[0] == "help") {
    // `abox-net help run` is `abox-net run --help`.
    if (args.size() == 1 || args[1] == "help") {  // `help help`: the overview, as `help`
      std::cout << kUsage;
      return 0;
    }
    std::vector<std::string_view> asked(args.begin() + 1, args.end());
    asked.push_back("--help");
    return dispatch(asked);
  }
  return dispatch(args);
}
