#include "netstack/program/reload_command.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>

#include "base/command_line.h"
#include "base/control_client.h"
#include "base/whole_file.h"
#include "netstack/program/stats_command.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net reload SOCKET FILE\n"
    "\n"
    "Gives the 'abox-net run' whose --stats-socket is SOCKET a new policy, FILE,\n"
    "while it runs. FILE is validated first: an invalid one changes nothing, and\n"
    "its problems are printed as file:line:column. Once valid it is in force at\n"
    "once: new DNS questions and new flows follow it; live flows whose name or\n"
    "port it no longer allows are cut (an RST to the guest) and logged with the\n"
    "reason policy_revoked; flows it still allows carry on untouched; answers\n"
    "recorded for names it no longer allows are forgotten. Limits that shrank\n"
    "apply to new work. The [dns] upstreams, [dns] grace and the sizes of the\n"
    "answer table and the DNS gate keep their values from the start.\n"
    "\n"
    "SIGHUP to abox-net rereads the file it started with instead (the same\n"
    "file, written in place; see docs/netstack.md).\n"
    "\n"
    "Exit status: 0 applied, 1 refused (FILE is invalid; nothing changed),\n"
    "2 usage error, 3 FILE cannot be read or no answer from SOCKET.\n";

std::string describe_upstreams(const policy::Policy& p) {
  if (p.dns().use_system) return "system";
  std::string s;
  for (const auto& e : p.dns().upstreams) s += (s.empty() ? "" : ",") + e.to_string();
  return s;
}

}  // namespace

PolicyReloader::PolicyReloader(base::EventLog& events, std::string path, base::UniqueFd file, bool reopen)
    : events_(events), path_(std::move(path)), file_(std::move(file)), reopen_(reopen) {}

std::string PolicyReloader::apply(std::string_view source, std::string_view text, base::UniqueFd file) {
  if (stack_ == nullptr) {
    events_.emit("policy", {{"reason", "reload refused: no guest yet"}, {"policy", source}});
    return "1\nno guest yet (the VMM has not connected): nothing changed";
  }
  if (file) {
    // The file SIGHUP will read from now on must be what is applied now.
    std::string error;
    auto held = base::read_whole_fd(file.get(), policy::kMaxPolicyFileBytes);
    if (!held.ok()) {
      error = "the file sent with it cannot be read: " + held.error().message;
    } else if (*held != text) {
      error = "the file sent with it does not hold the text sent";
    }
    if (!error.empty()) {
      events_.emit("policy", {{"reason", "reload refused: " + error}, {"policy", source}});
      return "1\n" + error + ": nothing changed";
    }
  }
  auto parsed = policy::parse_policy(text, source);
  if (!parsed.ok()) {
    const policy::PolicyError& e = parsed.error();
    events_.emit("policy", {{"reason", "reload refused: the policy is invalid"},
                            {"policy", source},
                            {"error", e.diagnostics.front().to_string()},
                            {"problems", static_cast<std::uint64_t>(e.total)}});
    return "1\n" + e.to_string() + "the policy is invalid: nothing changed";
  }
  auto next = std::make_unique<const policy::Policy>(std::move(parsed).value());
  std::string notes;
  for (const auto& w : policy::policy_warnings(*next)) notes += w.to_string() + '\n';
  const std::string old_upstreams = describe_upstreams(stack_->policy());
  const std::string new_upstreams = describe_upstreams(*next);
  if (old_upstreams != new_upstreams) {
    notes += "note: [dns] upstreams stay " + old_upstreams +
             " until abox-net restarts (the new policy says " + new_upstreams + ")\n";
  }
  if (stack_->policy().dns().grace != next->dns().grace) {
    notes += "note: [dns] grace stays " + std::to_string(stack_->policy().dns().grace) +
             " s until abox-net restarts\n";
  }
  if (!next->brokers().empty() && stack_->config().broker_path.empty()) {
    notes +=
        "warning: the policy has [[broker]] bindings and this abox-net has no --broker: flows to them "
        "will be refused\n";
  }
  const GuestStack::PolicyApplied done = stack_->apply_policy(std::move(next));
  if (file) file_ = std::move(file);
  events_.emit("policy", {{"reason", "reloaded"},
                          {"policy", source},
                          {"tcp_revoked", static_cast<std::uint64_t>(done.tcp_revoked)},
                          {"udp_revoked", static_cast<std::uint64_t>(done.udp_revoked)},
                          {"echo_revoked", static_cast<std::uint64_t>(done.echo_revoked)},
                          {"answers_forgotten", static_cast<std::uint64_t>(done.answers_forgotten)}});
  return "0\n" + notes + "applied " + std::string(source) + ": " + std::to_string(done.tcp_revoked) +
         " TCP and " + std::to_string(done.udp_revoked) + " UDP flows revoked, " +
         std::to_string(done.answers_forgotten) + " answers forgotten";
}

void PolicyReloader::reread_file() {
  std::string error;
  if (reopen_) {
    base::UniqueFd again(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (again) {
      file_ = std::move(again);
    } else {
      error = std::strerror(errno);
    }
  } else if (file_) {
    // The sandbox lets abox-net read only the file it opened at start: one
    // replaced since would be read as it was, silently. Say so instead.
    struct stat kept {};
    struct stat now {};
    if (::fstat(file_.get(), &kept) == 0 && (kept.st_nlink == 0 || ::stat(path_.c_str(), &now) != 0 ||
                                             now.st_ino != kept.st_ino || now.st_dev != kept.st_dev)) {
      error =
          "the file was replaced (renamed over or deleted) since abox-net started, and the sandbox lets it "
          "read only the file it opened: use 'abox-net reload SOCKET " +
          path_ + "'";
    }
  }
  std::optional<std::string> text;
  if (error.empty()) {
    if (!file_) {
      error = "the file could not be opened at start";
    } else if (auto read = base::read_whole_fd(file_.get(), policy::kMaxPolicyFileBytes); read.ok()) {
      text = std::move(read).value();
    } else {
      error = read.error().message;
    }
  }
  if (!text) {
    events_.emit(
        "policy",
        {{"reason", "reload refused: the policy cannot be read"}, {"policy", path_}, {"error", error}});
    std::cerr << "abox-net run: SIGHUP: cannot read " << path_ << ": " << error << "; nothing changed\n";
    return;
  }
  const std::string reply = apply(path_, *text);
  std::cerr << "abox-net run: SIGHUP: " << reply.substr(2) << '\n';
}

int run_reload_command(std::span<const std::string_view> args) {
  constexpr std::string_view kCommand = "abox-net reload";
  auto parsed = base::start_command(kCommand, kUsage, args, {}, std::cout, std::cerr);
  if (!parsed.ok()) return parsed.error();
  if (parsed->positionals.size() != 2) {
    std::cerr << base::usage_error_line(
        kCommand, parsed->positionals.size() < 2 ? "SOCKET and FILE are required"
                                                 : "unexpected argument '" + parsed->positionals[2] + "'");
    return 2;
  }
  const std::string& socket = parsed->positionals[0];
  const std::string& file = parsed->positionals[1];
  auto text = base::read_whole_file(file, policy::kMaxPolicyFileBytes);
  if (!text.ok()) {
    std::cerr << "abox-net reload: cannot read " << file << ": " << text.error().message << '\n';
    return 3;
  }
  std::string reply_error;
  auto reply = base::ask_control_socket(socket, "reload " + file, *text, reply_error);
  if (!reply) {
    std::cerr << "abox-net reload: " << reply_error << '\n';
    return 3;
  }
  const auto nl = reply->find('\n');
  const std::string status = reply->substr(0, nl);
  std::string body = nl == std::string::npos ? std::string() : reply->substr(nl + 1);
  while (!body.empty() && body.back() == '\n') body.pop_back();
  if (status == "3") {
    std::cerr << "abox-net reload: " << socket << ": " << body << '\n';
    return 3;
  }
  if (status != "0" && status != "1") {
    std::cerr << "abox-net reload: " << socket << " did not answer a reload: " << *reply << '\n';
    return 3;
  }
  (status == "0" ? std::cout : std::cerr) << body << '\n';
  return status == "0" ? 0 : 1;
}

}  // namespace abox::netstack
