// `abox logs` and `abox events` (fleet_command.h): a stream of the daemon's
// API, written out as it comes.
#include <unistd.h>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <iostream>

#include "engine/cli/exit_codes.h"
#include "engine/cli/fleet_command.h"
#include "engine/cli/options.h"
#include "engine/daemon/base64.h"
#include "engine/daemon/daemon_client.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

constexpr std::string_view kLogsUsage =
    "usage: abox logs [-f] NAME\n\n"
    "What the instance's command wrote to stdout and stderr, as the agent reported it\n"
    "(AGENT-REPORTED: abox does not vouch for a word of it; what abox saw is in abox\n"
    "events). Kept in the state folder, at most 16 MiB (output.log and the rotated\n"
    "output.log.1). -f: go on with what comes until the instance ends (or Ctrl-C).\n"
    "A line on stderr says the output is agent-reported.\n";

constexpr std::string_view kEventsUsage =
    "usage: abox events [-f] [--json] NAME\n\n"
    "The instance's events as abox saw them: the supervisor's lifecycle, abox-net's\n"
    "admissions, refusals and DNS answers, the broker's requests and statuses, the\n"
    "self-test's results. --json: one JSON object a line, as in events.jsonl (see\n"
    "docs/running.md). -f: go on until the instance ends (or Ctrl-C).\n";

constexpr std::string_view kExitText =
    "\nExit status: 0 done, 1 no such instance, 2 usage error, 3 the daemon could not\n"
    "be reached or started, or the stream broke.\n";

constexpr OptionSpec kLogsOptions[] = {{"follow", 'f', false}};
constexpr OptionSpec kEventsOptions[] = {{"follow", 'f', false}, {"json", 0, false}};

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// "2026-12-02T01:02:03.456Z instance state=running source=supervisor"
std::string event_line(const json::object& e) {
  std::string line;
  auto* ts = e.if_contains("ts");
  if (ts == nullptr) ts = e.if_contains("time");
  if (ts != nullptr && ts->is_string()) line += std::string(ts->get_string()) + " ";
  auto* kind = e.if_contains("kind");
  line += kind != nullptr && kind->is_string() ? std::string(kind->get_string()) : "?";
  for (const auto& kv : e) {
    std::string_view k = kv.key();
    if (k == "kind" || k == "ts" || k == "time" || k == "instance" || k == "v") continue;
    line += " " + std::string(k) + "=";
    line += kv.value().is_string() ? std::string(kv.value().get_string()) : json::serialize(kv.value());
  }
  return line;
}

}  // namespace

int run_stream_command(std::string_view cmd, std::span<const std::string_view> args) {
  bool events = cmd == "events";
  std::string prog = "abox " + std::string(cmd);
  auto parsed =
      events ? parse_options(args, kEventsOptions, false) : parse_options(args, kLogsOptions, false);
  auto usage = [&](const std::string& m) {
    std::cerr << prog << ": " << m << " (see '" << prog << " --help')\n";
    return kExitUsage;
  };
  if (!parsed.ok()) return usage(parsed.error());
  if (parsed->help) {
    std::cout << (events ? kEventsUsage : kLogsUsage) << kExitText;
    return kExitOk;
  }
  if (parsed->positionals.size() != 1) return usage("give one NAME");
  const std::string& name = parsed->positionals[0];
  bool as_json = events && parsed->has("json");

  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) {
    std::cerr << prog << ": " << client.error() << '\n';
    return kExitFailed;
  }
  auto id = client->send(cmd, json::object{{"name", name}, {"follow", parsed->has("follow")}});
  if (!id.ok()) {
    std::cerr << prog << ": " << id.error() << '\n';
    return kExitFailed;
  }
  auto first = client->next(*id);
  if (!first.ok()) {
    std::cerr << prog << ": " << first.error() << '\n';
    return kExitFailed;
  }
  if (auto* ok = first->if_contains("ok"); ok == nullptr || !ok->is_bool() || !ok->get_bool()) {
    std::cerr << prog << ": " << name << ": " << first->at("error").as_string().c_str() << '\n';
    return kExitNo;
  }
  if (!events) std::cerr << "abox logs: " << name << ": agent-reported output (what the command printed)\n";
  for (;;) {
    auto m = client->next(*id);
    if (!m.ok()) {
      std::cerr << prog << ": " << m.error() << '\n';
      return kExitFailed;
    }
    if (m->if_contains("done") != nullptr) break;
    if (auto* d = m->if_contains("data"); d != nullptr && d->is_string()) {
      auto bytes = base64_decode(std::string_view(d->get_string()));
      if (!bytes || !write_all(STDOUT_FILENO, bytes->data(), bytes->size())) return kExitFailed;
    } else if (auto* e = m->if_contains("event"); e != nullptr && e->is_object()) {
      std::cout << (as_json ? json::serialize(*e) : event_line(e->get_object())) << '\n' << std::flush;
    }
  }
  return kExitOk;
}

}  // namespace abox::engine
