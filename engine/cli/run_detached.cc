#include "engine/cli/run_detached.h"

#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "engine/cli/run_command.h"

namespace abox::engine {

namespace json = boost::json;

int wait_until_running(DaemonClient& client, const std::string& name, std::chrono::seconds bound,
                       std::string_view prog, std::ostream& err) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    auto reply = client.call("inspect", json::object{{"name", name}});
    if (!reply.ok()) {
      err << prog << ": " << reply.error() << '\n';
      return kRunCouldNotStart;
    }
    const auto& inst = reply->at("instance").as_object();
    std::string state(inst.at("state").as_string());
    if (state == "running") return 0;
    if (state == "stopped" || state == "failed" || state == "stopping") {
      auto* reason = inst.if_contains("reason");
      err << prog << ": " << name << " is " << state;
      if (reason != nullptr && reason->is_string()) err << ": " << reason->as_string().c_str();
      err << '\n';
      return kRunCouldNotStart;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  err << prog << ": " << name << " did not reach running within " << bound.count()
      << " s; it may still get there (abox ls)\n";
  return kRunCouldNotStart;
}

int run_detached(std::span<const std::string_view> args, const ParsedArgs& parsed) {
  for (std::string_view flag : {"events", "json", "keep"}) {
    if (parsed.has(flag)) {
      std::cerr << "abox run: -d: --" << flag
                << " is not for a detached instance (abox logs, abox events; the state folder is kept "
                   "until abox rm) (see 'abox run --help')\n";
      return kRunCouldNotStart;
    }
  }
  // Everything but -d itself, as given: the daemon's shim parses it as `abox run` does.
  json::array sent;
  bool in_command = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (!in_command && (a == "-d" || a == "--detach")) continue;
    if (!in_command && a == "--") in_command = true;
    sent.emplace_back(a);
  }
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) == nullptr) {
    std::cerr << "abox run: the current folder is gone\n";
    return kRunCouldNotStart;
  }
  json::object fields{{"args", std::move(sent)}, {"cwd", cwd}};
  if (const char* t = std::getenv("TERM")) fields["term"] = t;
  if (const char* l = std::getenv("LANG")) fields["lang"] = l;
  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) {
    std::cerr << "abox run: " << client.error() << '\n';
    return kRunCouldNotStart;
  }
  auto reply = client->call("run", std::move(fields));
  if (!reply.ok()) {
    std::cerr << "abox run: " << reply.error() << '\n';
    return kRunCouldNotStart;
  }
  std::string name(reply->at("name").as_string());
  std::cout << name << std::endl;
  // Booting includes building the image on first use: bounded generously.
  return wait_until_running(*client, name, std::chrono::seconds(900), "abox run", std::cerr);
}

}  // namespace abox::engine
