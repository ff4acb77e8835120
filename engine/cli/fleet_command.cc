#include "engine/cli/fleet_command.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <iomanip>
#include <iostream>
#include <string>

#include "engine/cli/exit_codes.h"
#include "engine/cli/options.h"
#include "engine/cli/run_command.h"
#include "engine/cli/run_detached.h"
#include "engine/daemon/daemon_client.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

struct Command {
  std::string_view name;
  std::string_view usage;
  std::span<const OptionSpec> options;
  bool needs_names;  // one NAME or more
  bool one_name;     // exactly one
};

constexpr OptionSpec kLsOptions[] = {{"json", 0, false}, {"all", 'a', false}};
constexpr OptionSpec kJsonOnly[] = {{"json", 0, false}};
constexpr OptionSpec kRmOptions[] = {{"force", 'f', false}};

constexpr std::string_view kExitText =
    "\nExit status: 0 done, 1 the daemon refused (the reason on stderr), 2 usage error,\n"
    "3 the daemon could not be reached or started.\n";

const Command kCommands[] = {
    {"ls",
     "usage: abox ls [-a] [--json]\n\n"
     "Lists the instances: running ones (with -a also stopped and failed ones, and the\n"
     "folders kept by abox run --keep). --json: {\"instances\":[{name, state, managed,\n"
     "image, created, outcome, reason, exit}]} (docs/api.md).\n",
     kLsOptions, false, false},
    {"inspect",
     "usage: abox inspect [--json] NAME\n\n"
     "Everything the daemon knows of NAME: its record (state, outcome, processes with\n"
     "pids), the abox run arguments it was started with, its shim, its folder.\n",
     kJsonOnly, true, true},
    {"stop",
     "usage: abox stop NAME...\n\n"
     "Stops each instance in order (the guest powers off, the VMM is killed after 3 s,\n"
     "abox-net and the broker end) and waits until it has; the state folder stays\n"
     "(abox start boots it again, abox rm removes it). Stopping a stopped one is no error.\n",
     std::span<const OptionSpec>(), true, false},
    {"start",
     "usage: abox start NAME\n\n"
     "Boots a stopped (or failed) detached instance again with the arguments it was\n"
     "started with, its policy copy and its writable disk; a fresh per-boot key and a\n"
     "fresh nonce secret (every nonce changes). --copy-in is not repeated. Waits until\n"
     "it runs. Exit 125: it booted but did not reach running (the reason on stderr).\n",
     std::span<const OptionSpec>(), true, true},
    {"rm",
     "usage: abox rm [-f] NAME...\n\n"
     "Removes each instance's state folder (its disk, logs and events included). A\n"
     "running instance is refused unless -f, which kills it first.\n",
     kRmOptions, true, false},
    {"stats",
     "usage: abox stats [--json] NAME\n\n"
     "The instance's memory (resident, per process: shim, abox-net, broker, vmm),\n"
     "abox-net's live counters (flows, frames, bytes, refusals) and the broker's\n"
     "requests per binding with their statuses, as the broker reported them.\n",
     kJsonOnly, true, true},
};

std::string str(const json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return "";
  if (v->is_string()) return std::string(v->get_string());
  return json::serialize(*v);
}

void print_table(const json::array& list) {
  std::cout << std::left << std::setw(24) << "NAME" << std::setw(10) << "STATE" << std::setw(10) << "IMAGE"
            << std::setw(26) << "CREATED"
            << "NOTE\n";
  for (const auto& v : list) {
    const auto& o = v.as_object();
    std::string note = str(o, "reason");
    if (note.empty() && o.if_contains("exit") != nullptr)
      note = "exit " + str(o.at("exit").as_object(), "value");
    if (!o.at("managed").as_bool()) note = "(foreground) " + note;
    std::cout << std::setw(24) << str(o, "name") << std::setw(10) << str(o, "state") << std::setw(10)
              << str(o, "image") << std::setw(26) << str(o, "created") << note << '\n';
  }
}

void print_object(const json::object& o, const std::string& indent) {
  for (const auto& kv : o) {
    std::cout << indent << std::string_view(kv.key()) << ":";
    if (kv.value().is_object()) {
      std::cout << '\n';
      print_object(kv.value().get_object(), indent + "  ");
    } else {
      std::cout << ' '
                << (kv.value().is_string() ? std::string(kv.value().get_string())
                                           : json::serialize(kv.value()))
                << '\n';
    }
  }
}

}  // namespace

bool is_fleet_command(std::string_view cmd) {
  for (const auto& c : kCommands)
    if (c.name == cmd) return true;
  return cmd == "logs" || cmd == "events" || cmd == "attach";
}

int run_fleet_command(std::string_view cmd, std::span<const std::string_view> args) {
  if (cmd == "logs" || cmd == "events") return run_stream_command(cmd, args);
  if (cmd == "attach") return run_attach_command(args);
  const Command* command = nullptr;
  for (const auto& c : kCommands)
    if (c.name == cmd) command = &c;
  std::string prog = "abox " + std::string(cmd);
  auto usage = [&](const std::string& m) {
    std::cerr << prog << ": " << m << " (see '" << prog << " --help')\n";
    return kExitUsage;
  };
  auto parsed = parse_options(args, command->options, false);
  if (!parsed.ok()) return usage(parsed.error());
  if (parsed->help) {
    std::cout << command->usage << kExitText;
    return kExitOk;
  }
  const auto& names = parsed->positionals;
  if (command->needs_names && names.empty()) return usage("which instance? give its NAME");
  if (command->one_name && names.size() > 1) return usage("one NAME only");
  if (!command->needs_names && !names.empty()) return usage("takes no NAME");
  bool as_json = command->options.data() != kRmOptions && !command->options.empty() && parsed->has("json");

  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) {
    std::cerr << prog << ": " << client.error() << '\n';
    return kExitFailed;
  }
  if (cmd == "ls") {
    auto reply = client->call("ls", json::object{{"all", parsed->has("all")}});
    if (!reply.ok()) {
      std::cerr << prog << ": " << reply.error() << '\n';
      return kExitFailed;
    }
    if (as_json)
      std::cout << json::serialize(json::object{{"instances", reply->at("instances")}}) << '\n';
    else
      print_table(reply->at("instances").as_array());
    return kExitOk;
  }
  int code = kExitOk;
  for (const auto& name : names) {
    json::object fields{{"name", name}};
    if (cmd == "rm") fields["force"] = parsed->has("force");
    std::string op = cmd == "inspect" || cmd == "stats" || cmd == "stop" || cmd == "start" || cmd == "rm"
                         ? std::string(cmd)
                         : std::string();
    auto reply = client->call(op, std::move(fields));
    if (!reply.ok()) {
      std::cerr << prog << ": " << name << ": " << reply.error() << '\n';
      code = kExitNo;
      continue;
    }
    if (cmd == "inspect" || cmd == "stats") {
      json::object shown = cmd == "inspect" ? reply->at("instance").as_object() : *reply;
      shown.erase("id");
      shown.erase("ok");
      if (as_json)
        std::cout << json::serialize(shown) << '\n';
      else
        print_object(shown, "");
    } else if (cmd == "start") {
      std::cout << name << std::endl;
      code = wait_until_running(*client, name, std::chrono::seconds(900), prog, std::cerr);
    } else {
      std::cout << name << '\n';
    }
  }
  return code;
}

}  // namespace abox::engine
