#include "engine/cli/policy_apply.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "base/command_line.h"
#include "base/json.h"
#include "engine/cli/control_request.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/instance_record_writer.h"
#include "engine/instance/state_folder.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

constexpr std::string_view kCommand = "abox policy apply";

constexpr std::string_view kUsage =
    "usage: abox policy apply [--json] NAME FILE\n"
    "\n"
    "Makes FILE the policy of instance NAME. FILE is validated first: an invalid\n"
    "one changes nothing, and its problems are printed as FILE:LINE:COLUMN. If\n"
    "NAME runs, the new policy is in force at once: its broker and abox-net\n"
    "reload it (new DNS questions and new flows follow it; live flows to names\n"
    "or ports it no longer allows are cut, logged as policy_revoked; requests\n"
    "under a [[broker]] binding it no longer has are refused). FILE then\n"
    "becomes the instance's policy of record, so 'abox start NAME' uses it.\n"
    "\n"
    "The broker holds only the keys of the bindings the instance started with:\n"
    "a FILE that adds a binding, or changes one, is refused while NAME runs\n"
    "(stop it, apply, start it). The [dns] upstreams and the table sizes keep\n"
    "their values until a restart (the output notes it).\n"
    "\n"
    "Works for instances started with 'abox run -d', and for a foreground\n"
    "'abox run' while it runs. An instance still starting is waited for (at\n"
    "most 10 s) until its supervisor answers on api.sock.\n"
    "\n"
    "Options:\n"
    "      --json   one JSON object: {\"instance\",\"policy\",\"running\",\"applied\",\n"
    "               \"names_added\",\"names_removed\",\"bindings_added\",\"bindings_removed\",\n"
    "               \"network\",\"broker\"} (network and broker: what each reload said)\n"
    "\n"
    "Exit status: 0 applied (or recorded, when NAME is not running), 1 refused\n"
    "(FILE is invalid, or the running instance refused it: nothing changed),\n"
    "2 usage error, 3 FILE cannot be read, no such instance, or a part of it\n"
    "does not answer.\n";

constexpr base::OptionSpec kOptions[] = {{"json", 0, false}};

std::vector<std::string> sorted(std::set<std::string> s) {
  return {s.begin(), s.end()};
}

std::set<std::string> allow_names(const policy::Policy& p) {
  std::set<std::string> out;
  for (const auto& r : p.rules())
    for (const auto& n : r.names) out.insert(n.to_string());
  return out;
}

std::set<std::string> binding_names(const policy::Policy& p) {
  std::set<std::string> out;
  for (const auto& b : p.brokers()) out.insert(b.name + ":" + std::to_string(b.port));
  return out;
}

std::vector<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return sorted(std::move(out));
}

// One part's answer to a reload: status 0/1, or failed to answer (-1).
struct PartReply {
  bool asked = false;
  int status = -1;
  std::string text;
};

// file (>= 0): the staged policy of record, which abox-net keeps for SIGHUP.
PartReply ask_reload(const std::string& socket, const std::string& source, std::string_view text,
                     int file = -1) {
  PartReply r;
  r.asked = true;
  std::string error;
  auto reply = ask_control_socket(socket, "reload " + source, text, error, std::chrono::seconds(10), file);
  if (!reply) {
    r.text = error;
    return r;
  }
  ReloadReply parsed = parse_reload_reply(*reply);
  r.status = parsed.status == 0 || parsed.status == 1 ? parsed.status : -1;
  r.text = parsed.status == -1 ? socket + " did not answer a reload: " + parsed.text : parsed.text;
  return r;
}

// Does something accept connections on this unix socket? (A socket file a
// process that is gone left behind refuses them.)
bool answers(const std::string& socket) {
  std::string error;
  return ask_control_socket(socket, "stats", {}, error, std::chrono::seconds(5)).has_value();
}

// How long apply waits for an instance's supervisor to open api.sock (it
// does once its VMM has started: abox-net and the broker start first, a
// second or two) before it gives up with nothing changed, and again for the
// record at the end.
constexpr auto kSupervisorWait = std::chrono::seconds(10);

void write_list(base::JsonWriter& w, std::string_view key, const std::vector<std::string>& v) {
  w.key(key).begin_array();
  for (const auto& s : v) w.value(s);
  w.end_array();
}

void print_list(std::ostream& out, std::string_view what, const std::vector<std::string>& v) {
  if (v.empty()) return;
  out << what << ':';
  for (const auto& s : v) out << ' ' << s;
  out << '\n';
}

}  // namespace

PolicyDiff diff_policies(const policy::Policy& before, const policy::Policy& after) {
  PolicyDiff d;
  const auto names_before = allow_names(before);
  const auto names_after = allow_names(after);
  const auto bindings_before = binding_names(before);
  const auto bindings_after = binding_names(after);
  d.names_added = minus(names_after, names_before);
  d.names_removed = minus(names_before, names_after);
  d.bindings_added = minus(bindings_after, bindings_before);
  d.bindings_removed = minus(bindings_before, bindings_after);
  return d;
}

int run_policy_apply(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  auto parsed = base::parse_options(args, kOptions, false);
  if (!parsed.ok()) {
    err << base::usage_error_line(kCommand, parsed.error());
    return kExitUsage;
  }
  if (parsed->help) {
    out << kUsage;
    return kExitOk;
  }
  if (parsed->positionals.size() != 2) {
    err << base::usage_error_line(kCommand, parsed->positionals.size() < 2
                                                ? "NAME and FILE are required"
                                                : "unexpected argument '" + parsed->positionals[2] + "'");
    return kExitUsage;
  }
  const bool json = parsed->has("json");
  const std::string& name = parsed->positionals[0];
  const std::string& file = parsed->positionals[1];
  if (!valid_instance_name(name)) {
    err << base::usage_error_line(kCommand,
                                  "NAME must be 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'");
    return kExitUsage;
  }

  // 1. FILE, validated.
  auto text = read_policy_text(file);
  if (!text.ok()) {
    err << kCommand << ": cannot read " << file << ": " << text.error() << '\n';
    return kExitFailed;
  }
  auto next = policy::parse_policy(*text, file);
  if (!next.ok()) {
    err << next.error().to_string() << kCommand << ": " << file << " is invalid: nothing changed\n";
    return kExitNo;
  }
  for (const auto& w : policy::policy_warnings(*next)) err << w.to_string() << '\n';

  // 2. The instance.
  auto root = default_instances_root();
  if (!root.ok()) {
    err << kCommand << ": " << root.error() << '\n';
    return kExitFailed;
  }
  auto folder = StateFolder::open(*root, name);
  if (!folder.ok()) {
    err << kCommand << ": no instance '" << name << "' (" << folder.error() << ")\n";
    return kExitFailed;
  }
  // An instance on its way up or down has a supervisor that writes its
  // folder (policy.toml at its start, instance.json on every step) and may
  // not answer yet: wait until it does (instance_record_writer.h), so that
  // it is the one that records what this apply did.
  if (auto writer = wait_for_record_writer(*folder, kSupervisorWait); !writer.ok()) {
    err << kCommand << ": '" << name << "': " << writer.error()
        << ": nothing changed; try again once it runs\n";
    return kExitFailed;
  }
  auto old_text = read_policy_text(folder->policy());
  if (!old_text.ok()) {
    err << kCommand << ": " << folder->policy() << ": " << old_text.error() << '\n';
    return kExitFailed;
  }
  auto before = policy::parse_policy(*old_text, folder->policy());
  if (!before.ok()) {
    err << kCommand << ": the instance's policy of record does not load:\n" << before.error().to_string();
    return kExitFailed;
  }
  const PolicyDiff diff = diff_policies(*before, *next);
  // The new policy of record, written beside the old one now and renamed
  // into place at step 4: abox-net is handed this very file with its reload,
  // so that a SIGHUP later rereads it (its sandbox cannot open the path).
  auto staged = folder->stage_file("policy.toml", *text);
  if (!staged.ok()) {
    err << kCommand << ": cannot record it: " << staged.error() << ": nothing changed\n";
    return kExitFailed;
  }

  // 3. The running parts.
  const bool running = answers(folder->net_stats_socket());
  const bool has_broker = running && answers(folder->broker_control_socket());
  PartReply broker_reply;
  PartReply net_reply;
  if (running) {
    if (!has_broker && !next->brokers().empty()) {
      err << kCommand << ": " << file << " has [[broker]] bindings and '" << name
          << "' runs no broker (its keys are handed over at start): stop it, apply, and start it: nothing "
             "changed\n";
      return kExitNo;
    }
    if (has_broker) {
      broker_reply = ask_reload(folder->broker_control_socket(), file, *text);
      if (broker_reply.status != 0) {
        err << kCommand << ": the broker of '" << name << "' "
            << (broker_reply.status == 1 ? "refused " + file : "did not answer") << ":\n"
            << broker_reply.text << '\n';
        return broker_reply.status == 1 ? kExitNo : kExitFailed;
      }
    }
    net_reply = ask_reload(folder->net_stats_socket(), file, *text, staged->read());
    if (net_reply.status != 0) {
      // The broker took it: give it back what it had.
      if (has_broker) (void)ask_reload(folder->broker_control_socket(), folder->policy(), *old_text);
      err << kCommand << ": abox-net of '" << name << "' "
          << (net_reply.status == 1 ? "refused " + file : "did not answer") << ":\n"
          << net_reply.text << '\n';
      return net_reply.status == 1 ? kExitNo : kExitFailed;
    }
  }

  // 4. The policy of record.
  if (auto w = staged->commit(); !w.ok()) {
    err << kCommand << ": " << (running ? "applied to the running instance, but " : "")
        << "cannot record it: " << w.error() << '\n';
    return kExitFailed;
  }
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(file, ec);
  if (auto recorded =
          record_policy_source(*folder, ec ? file : absolute.lexically_normal().string(), kSupervisorWait);
      !recorded.ok()) {
    err << kCommand << ": " << (running ? "applied to the running instance and " : "")
        << "recorded in policy.toml, but instance.json still names the policy before: " << recorded.error()
        << '\n';
    return kExitFailed;
  }

  if (json) {
    std::string js;
    base::JsonWriter w(js);
    w.begin_object()
        .field("instance", name)
        .field("policy", file)
        .field("running", running)
        .field("applied", running);
    write_list(w, "names_added", diff.names_added);
    write_list(w, "names_removed", diff.names_removed);
    write_list(w, "bindings_added", diff.bindings_added);
    write_list(w, "bindings_removed", diff.bindings_removed);
    if (net_reply.asked) {
      w.field("network", net_reply.text);
    } else {
      w.key("network").null();
    }
    if (broker_reply.asked) {
      w.field("broker", broker_reply.text);
    } else {
      w.key("broker").null();
    }
    w.end_object();
    out << js << '\n';
    return kExitOk;
  }
  out << (running ? "applied " : "recorded ") << file << " to " << name
      << (running ? " (running)" : " (not running: it takes effect at the next start)") << '\n';
  print_list(out, "names allowed", diff.names_added);
  print_list(out, "names no longer allowed", diff.names_removed);
  print_list(out, "bindings added", diff.bindings_added);
  print_list(out, "bindings removed", diff.bindings_removed);
  if (diff.names_added.empty() && diff.names_removed.empty() && diff.bindings_added.empty() &&
      diff.bindings_removed.empty())
    out << "no name or binding changed\n";
  if (net_reply.asked) out << "abox-net: " << net_reply.text << '\n';
  if (broker_reply.asked) out << "broker: " << broker_reply.text << '\n';
  return kExitOk;
}

}  // namespace abox::engine
