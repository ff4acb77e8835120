// `abox daemon`: the operator's daemon in the foreground (engine/daemon/daemon.h);
// `abox` starts it detached on first use. `abox shim` (hidden) is in
// engine/daemon/shim.h.
#pragma once

#include <span>
#include <string_view>

namespace abox::engine {

int run_daemon_command(std::span<const std::string_view> args);

}  // namespace abox::engine
