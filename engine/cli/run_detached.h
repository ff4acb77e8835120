// `abox run -d`: the same options as `abox run`, sent to the daemon
// (docs/api.md, op "run"), which hosts the instance in a shim; prints the
// instance's name on stdout and waits (bounded) until it runs.
//
// wait_until_running() is shared with `abox start`: it polls the daemon's
// inspect until the instance runs (0), or ends or fails first (the reason on
// err, kRunCouldNotStart).
#pragma once

#include <chrono>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "engine/cli/options.h"
#include "engine/daemon/daemon_client.h"

namespace abox::engine {

int run_detached(std::span<const std::string_view> args, const ParsedArgs& parsed);

int wait_until_running(DaemonClient& client, const std::string& name, std::chrono::seconds bound,
                       std::string_view prog, std::ostream& err);

}  // namespace abox::engine
