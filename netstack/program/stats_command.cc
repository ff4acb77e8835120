#include "netstack/program/stats_command.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "base/command_line.h"
#include "base/control_client.h"
#include "base/unique_fd.h"
#include "netstack/program/stats_reader.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net stats PATH [--json]\n"
    "\n"
    "Prints the live counters of the abox-net (run or dns) that listens on the\n"
    "stats socket PATH (its --stats-socket): frames, every drop and refusal by\n"
    "reason, DNS, flows, memory in use.\n"
    "\n"
    "Options:\n"
    "  -j, --json   print the JSON object as abox-net sent it (one line)\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 no answer (nothing listens at\n"
    "PATH, permission denied, timeout after 5 s) or an answer that is not\n"
    "abox-net's counters.\n";

}  // namespace

int run_stats_command(std::span<const std::string_view> args) {
  constexpr std::string_view kCommand = "abox-net stats";
  static constexpr base::OptionSpec kOptions[] = {{"json", 'j', false}};
  auto parsed = base::start_command(kCommand, kUsage, args, kOptions, std::cout, std::cerr);
  if (!parsed.ok()) return parsed.error();
  const bool json = parsed->has("json");
  if (parsed->positionals.size() != 1) {
    std::cerr << base::usage_error_line(
        kCommand, parsed->positionals.empty() ? "the stats socket PATH is required"
                                              : "unexpected argument '" + parsed->positionals[1] + "'");
    return 2;
  }
  const std::optional<std::string> path = parsed->positionals[0];
  std::string error;
  auto reply = base::ask_control_socket(*path, "stats", {}, error);
  if (!reply) {
    std::cerr << "abox-net stats: " << error << '\n';
    return 3;
  }
  auto fields = parse_stats_json(base::as_bytes(*reply));
  if (!fields.ok()) {
    std::cerr << "abox-net stats: " << *path << " did not answer with counters: " << fields.error() << '\n';
    return 3;
  }
  if (json) {
    // Validated above; passed through as sent (one line).
    while (!reply->empty() && (reply->back() == '\n' || reply->back() == '\r')) reply->pop_back();
    std::cout << *reply << '\n';
    return 0;
  }
  std::size_t width = 0;
  for (const auto& f : *fields) width = std::max(width, f.name.size());
  for (const auto& f : *fields) {
    std::string value = std::to_string(f.value);
    std::cout << f.name << std::string(width - f.name.size() + 2, ' ') << std::string(20 - value.size(), ' ')
              << value << '\n';
  }
  return 0;
}

}  // namespace abox::netstack
