// `abox-net stats PATH [--json]`: asks a running abox-net for its counters
// over its --stats-socket and prints them (a table, or the JSON as sent).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace abox::netstack {

int run_stats_command(std::span<const std::string_view> args);

// Sends one request line ("stats", "explain ...": stats_server.h) to the
// abox-net whose --stats-socket is path, and returns the whole reply (the
// server closes after it): at most 1 MiB, within 5 s. nullopt with a
// message in error otherwise (nothing running there, no such socket, ...).
// With a body ("reload": the policy's text), the body follows the line and
// the write side is then shut, so the server sees where it ends.
std::optional<std::string> ask_abox_net(const std::string& path, std::string_view request, std::string& error,
                                        std::string_view body = {});

}  // namespace abox::netstack
