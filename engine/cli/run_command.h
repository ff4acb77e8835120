// `abox run [options] [--] CMD [ARGS...]`: one agent in a micro-VM, in the
// foreground, from nothing to nothing (engine/instance/supervisor.h does the
// work; this file is the command line, the signals and the exit code).
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/cli/options.h"
#include "engine/instance/instance_config.h"

namespace abox::engine {

// Exit codes of `abox run` besides CMD's own status (0-255, 128+N for a
// signal): chosen above what commands commonly return, like docker's and
// timeout(1)'s, so that a script can tell abox's failures from the command's.
enum RunExitCode : int {
  kRunCrashed = 122,         // the VMM, abox-net or the broker died, or the guest broke the control protocol
  kRunSelftestFailed = 123,  // a self-test probe got through: the command never started
  kRunTimedOut = 124,        // --timeout ran out
  kRunCouldNotStart = 125,   // usage error, bad policy or credentials, image, abox-net, broker, VMM, boot
  kRunNotExecutable = 126,   // the command was found in the guest but could not be executed
  kRunNotFound = 127,        // the command was not found in the guest
};

// abox run's option table; shared by `abox run -d`, the daemon (which checks a
// detached run's arguments) and `abox shim` (which boots from them).
std::span<const OptionSpec> run_options();
// Fills c from abox run's parsed options: everything but the machine
// (prepare_machine) and the stdio. Returns "" or the usage error.
// local_terminal: -t's window is this process's terminal's, and -t -i needs
// stdin to be one; a detached instance (the daemon, the shim) has none: its
// window starts at 24x80 and abox attach sets it.
std::string run_config_from_args(const ParsedArgs& a, InstanceConfig& c, bool local_terminal = true);

// args: everything after "abox run". Uses this process's stdin, stdout and stderr.
int run_run_command(std::span<const std::string_view> args);

// "30s", "5m", "1h", "250ms", "2" (seconds); nullopt when malformed or zero.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);
// "512", "512M", "2G" (MiB when no suffix); nullopt when malformed.
std::optional<unsigned> parse_mebibytes(std::string_view text);

}  // namespace abox::engine
