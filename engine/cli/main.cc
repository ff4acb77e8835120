// abox: the operator's command line. Each subcommand lives in its own file
// under engine/cli/; this file only dispatches.
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/command_line.h"
#include "engine/cli/broker_command.h"
#include "engine/cli/cp_command.h"
#include "engine/cli/credentials_command.h"
#include "engine/cli/daemon_command.h"
#include "engine/cli/doctor_command.h"
#include "engine/cli/exec_command.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/fleet_command.h"
#include "engine/cli/image_command.h"
#include "engine/cli/policy_command.h"
#include "engine/cli/run_command.h"
#include "engine/daemon/shim.h"
#include "engine/version.h"

namespace {

constexpr std::string_view kUsage =
    "usage: abox <command> [options]\n"
    "\n"
    "abox runs AI coding agents in micro-VMs and decides, packet by packet, what\n"
    "each one may reach.\n"
    "\n"
    "Commands:\n"
    "  run [options] -- CMD [ARGS...] run CMD in a micro-VM behind its own policy\n"
    "  run -d [options] -- CMD ...    the same, detached: the daemon hosts it; prints its name\n"
    "  ls [-a] [--json]               the instances\n"
    "  inspect | stats NAME           one instance's record | its memory and counters\n"
    "  logs [-f] NAME                 its command's output (agent-reported)\n"
    "  attach NAME                    its output from now on, stdin to it (run -d -i), its\n"
    "                                 terminal (run -d -t; Ctrl-P Ctrl-Q detaches)\n"
    "  exec [-i] [-t] NAME -- CMD     run CMD beside NAME's command (exits with CMD's status)\n"
    "  events [-f] [--json] NAME      what abox saw: lifecycle, admissions, refusals, broker\n"
    "  stop NAME... | start NAME | rm [-f] NAME...   stop, boot again, remove\n"
    "  daemon                         the daemon in the foreground (started on first use)\n"
    "  image build RECIPE | ls | rm   the guest images (minimal, debian, your own)\n"
    "  cp NAME:PATH -                 a file or folder of a running instance, as a tar stream\n"
    "  policy check FILE...          validate egress policy files\n"
    "  policy explain FILE TARGET    say whether a policy admits a name, port or address, and why\n"
    "  policy suggest EVENTS.jsonl   write a policy allowing what an event log (audit mode) shows\n"
    "  policy apply NAME FILE        make FILE instance NAME's policy, reloaded at once if it runs\n"
    "  broker --policy FILE ...      run the TLS credential broker of one instance\n"
    "  broker ca --state DIR         print the instance CA certificate the guest must trust\n"
    "  broker nonces --policy FILE --state DIR   print the nonces the guest gets, one per binding\n"
    "  broker reload SOCKET FILE     give a running broker a new policy (its bindings)\n"
    "  credentials set NAME | ls | rm NAME...   the provider keys the brokers use (set reads stdin)\n"
    "  doctor [--json]               what this host offers abox: OK, DEGRADED or MISSING\n"
    "  help [COMMAND]                this text, or COMMAND's (as 'abox COMMAND --help')\n"
    "\n"
    "Options:\n"
    "  -h, --help       this text (also after any command)\n"
    "  -V, --version    print the version\n"
    "\n"
    "Every command takes --opt value and --opt=value, -- to end its options, and\n"
    "says what is wrong with its arguments in one line.\n"
    "\n"
    "Exit status: 0 success, 1 a negative answer (invalid, refused), 2 usage error,\n"
    "3 the command could not do its work, 4 a conditional answer (policy explain:\n"
    "an address that needs a DNS answer). 'abox run' passes CMD's status through\n"
    "and has its own (122-127: see 'abox run --help'); so does 'abox exec' (125-127).\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace abox::engine;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    if (args.empty()) {
      std::cerr << abox::base::usage_error_line("abox", "which command? run, image, cp, policy or broker");
      return kExitUsage;
    }
    if (is_help_flag(args[0])) {
      std::cout << kUsage;
      return kExitOk;
    }
    if (args[0] == "-V" || args[0] == "--version") {
      std::cout << "abox " << abox::engine::abox_version() << '\n';
      return kExitOk;
    }
    if (args[0] == "help") {
      // `abox help policy check` is `abox policy check --help`.
      if (args.size() == 1 || args[1] == "help") {  // `help help`: the overview, as `help`
        std::cout << kUsage;
        return kExitOk;
      }
      args.erase(args.begin());
      args.push_back("--help");
    }
    if (args[0] == "policy") {
      return run_policy_command(std::span(args).subspan(1), std::cout, std::cerr);
    }
    if (args[0] == "run") {
      return run_run_command(std::span(args).subspan(1));
    }
    if (args[0] == "cp") {
      return run_cp_command(std::span(args).subspan(1));
    }
    if (args[0] == "exec") {
      return run_exec_command(std::span(args).subspan(1));
    }
    if (is_fleet_command(args[0])) {
      return run_fleet_command(args[0], std::span(args).subspan(1));
    }
    if (args[0] == "daemon") {
      return run_daemon_command(std::span(args).subspan(1));
    }
    if (args[0] == "shim") {  // hidden: started by the daemon
      return run_shim_command(std::span(args).subspan(1));
    }
    if (args[0] == "image") {
      return run_image_command(std::span(args).subspan(1));
    }
    if (args[0] == "doctor") {
      return run_doctor_command(std::span(args).subspan(1), std::cout, std::cerr);
    }
    if (args[0] == "credentials") {
      return run_credentials_command(std::span(args).subspan(1), 0, std::cout, std::cerr);
    }
    if (args[0] == "broker") {
      return run_broker_command(std::span(args).subspan(1), std::cout, std::cerr);
    }
    std::cerr << abox::base::usage_error_line("abox", "unknown command '" + std::string(args[0]) + "'");
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "abox: " << e.what() << '\n';
    return kExitFailed;
  }
}
