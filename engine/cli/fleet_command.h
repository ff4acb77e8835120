// The fleet commands, each a client of the daemon's API (docs/api.md) and
// nothing else: `abox ls`, `inspect`, `stop`, `start`, `rm`, `stats`
// (fleet_command.cc), `abox logs`, `abox events` (stream_command.cc) and
// `abox attach` (attach_command.cc).
// Each starts the daemon when it is not running (saying so on stderr).
//
// Exit codes, shared: 0 done; 1 the daemon refused for at least one NAME (no
// such instance, it runs, ...: the reason on stderr, the other NAMEs are
// still done); 2 usage error; 3 the daemon could not be reached or started.
// `abox start` also has 125: the instance booted but did not reach running.
#pragma once

#include <span>
#include <string_view>

namespace abox::engine {

// True when cmd is one of the fleet commands.
bool is_fleet_command(std::string_view cmd);
int run_fleet_command(std::string_view cmd, std::span<const std::string_view> args);

// stream_command.cc
int run_stream_command(std::string_view cmd, std::span<const std::string_view> args);
// attach_command.cc
int run_attach_command(std::span<const std::string_view> args);

}  // namespace abox::engine
