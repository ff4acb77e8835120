#include "engine/cli/daemon_command.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <iostream>

#include "engine/cli/exit_codes.h"
#include "engine/cli/options.h"
#include "engine/daemon/daemon.h"
#include "engine/instance/state_folder.h"
#include "engine/layout.h"
#include "helper/client.h"

extern char** environ;

namespace abox::engine {
namespace {

constexpr std::string_view kUsage =
    "usage: abox daemon\n"
    "\n"
    "Runs the operator's daemon in the foreground: it serves the API of docs/api.md on\n"
    "$XDG_RUNTIME_DIR/abox/daemon.sock (0600, this uid only) and hosts the detached\n"
    "instances (abox run -d), one shim process each. Any abox command that needs it\n"
    "starts it when it is not running, so running it by hand is rarely needed.\n"
    "SIGTERM or SIGINT stops the daemon; the instances run on, and the next daemon\n"
    "finds them again.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 it could not start (another\n"
    "daemon of this user runs, the socket folder is unsafe).\n";

}  // namespace

int run_daemon_command(std::span<const std::string_view> args) {
  auto parsed = parse_options(args, std::span<const OptionSpec>(), false);
  if (!parsed.ok() || !parsed->positionals.empty()) {
    std::cerr << "abox daemon: " << (parsed.ok() ? "takes no arguments" : parsed.error())
              << " (see 'abox daemon --help')\n";
    return kExitUsage;
  }
  if (parsed->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  auto paths = daemon_paths();
  if (!paths.ok()) {
    std::cerr << "abox daemon: " << paths.error() << '\n';
    return kExitFailed;
  }
  auto root = default_instances_root();
  if (!root.ok()) {
    std::cerr << "abox daemon: " << root.error() << '\n';
    return kExitFailed;
  }
  Daemon::Options o;
  o.paths = *paths;
  o.instances_root = *root;
  o.abox = Layout::discover().self;
  for (char** e = environ; *e != nullptr; ++e) o.shim_env.emplace_back(*e);
  o.helper_socket = helper::helper_socket_path(::getuid());

  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  boost::asio::io_context io;
  Daemon daemon(io, o);
  if (auto started = daemon.start(); !started.ok()) {
    std::cerr << "abox daemon: " << started.error() << '\n';
    return kExitFailed;
  }
  std::cerr << "abox daemon: pid " << ::getpid() << ", listening on " << paths->socket << ", instances in "
            << *root << '\n';
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int signo) {
    std::cerr << "abox daemon: signal " << signo << ": stopping (the instances run on)\n";
    daemon.close();
    io.stop();
  });
  io.run();
  return kExitOk;
}

}  // namespace abox::engine
