// `abox exec [options] NAME [--] CMD [ARGS...]` (exec_command.cc): a command
// beside a running instance's main one, through the daemon.
//
// Exit codes, as docker exec's: CMD's own status (0-255, 128+N when signal
// N ended it), else abox's:
#pragma once

#include <boost/json/object.hpp>
#include <span>
#include <string_view>

namespace abox::engine {

enum ExecExitCode : int {
  kExecFailed = 125,         // abox could not run CMD: usage, the daemon, no such instance, it is not
                             // running, the session bound, the instance stopped before CMD ended
  kExecNotExecutable = 126,  // CMD was found but could not be executed
  kExecNotFound = 127,       // CMD was not found in the guest
};

// The exit code the last message of an exec stream (docs/api.md, "done") stands for.
int exec_exit_code(const boost::json::object& done);

int run_exec_command(std::span<const std::string_view> args);

}  // namespace abox::engine
