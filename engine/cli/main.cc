// abox: the operator's command line. Each subcommand lives in its own file
// under engine/cli/; this file only dispatches.
#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include "engine/cli/broker_command.h"
#include "engine/cli/credentials_command.h"
#include "engine/cli/doctor_command.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/image_command.h"
#include "engine/cli/policy_command.h"
#include "engine/cli/run_command.h"

namespace {

constexpr std::string_view kVersion = "0.1.0";

constexpr std::string_view kUsage =
    "usage: abox <command> [options]\n"
    "\n"
    "abox runs AI coding agents in micro-VMs and decides, packet by packet, what\n"
    "each one may reach.\n"
    "\n"
    "Commands:\n"
    "  run [options] -- CMD [ARGS...] run CMD in a micro-VM behind its own policy\n"
    "  image build NAME | ls | rm     the guest images (minimal)\n"
    "  policy check FILE...          validate egress policy files\n"
    "  policy explain FILE TARGET    say whether a policy admits a name, port or address, and why\n"
    "  broker --policy FILE ...      run the TLS credential broker of one instance\n"
    "  broker ca --state DIR         print the instance CA certificate the guest must trust\n"
    "  broker nonces --policy FILE --state DIR   print the nonces the guest gets, one per binding\n"
    "  credentials set NAME | ls | rm NAME...   the provider keys the brokers use (set reads stdin)\n"
    "  doctor [--json]               what this host offers abox: OK, DEGRADED or MISSING\n"
    "\n"
    "Options:\n"
    "  -h, --help       this text (also after any command)\n"
    "  --version        print the version\n"
    "\n"
    "Exit status: 0 success, 1 a negative answer (invalid, refused), 2 usage error,\n"
    "3 the command could not do its work.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace abox::engine;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    if (args.empty()) {
      std::cerr << kUsage;
      return kExitUsage;
    }
    if (is_help_flag(args[0])) {
      std::cout << kUsage;
      return kExitOk;
    }
    if (args[0] == "--version") {
      std::cout << "abox " << kVersion << '\n';
      return kExitOk;
    }
    if (args[0] == "policy") {
      return run_policy_command(std::span(args).subspan(1), std::cout, std::cerr);
    }
    if (args[0] == "run") {
      return run_run_command(std::span(args).subspan(1));
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
    std::cerr << "abox: unknown command '" << args[0] << "'\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "abox: " << e.what() << '\n';
    return kExitFailed;
  }
}
