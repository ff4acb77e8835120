// `abox-net stats PATH [--json]`: asks a running abox-net for its counters
// over its --stats-socket and prints them (a table, or the JSON as sent).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace abox::netstack {

int run_stats_command(std::span<const std::string_view> args);

}  // namespace abox::netstack
