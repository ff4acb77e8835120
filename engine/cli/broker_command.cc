#include "engine/cli/broker_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>

#include "base/command_line.h"
#include "base/event_log.h"
#include "base/json.h"
#include "base/unique_fd.h"
#include "broker/service.h"
#include "engine/cli/control_request.h"
#include "engine/cli/exit_codes.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

constexpr std::string_view kRunUsage =
    "usage: abox broker --policy FILE (--credentials FILE | --credentials-fd N) --state DIR\n"
    "                   --listen unix:PATH|ADDR:PORT\n"
    "                   [--instance NAME] [--upstream-ca FILE] [--events FILE|-] [--stats-file FILE]\n"
    "                   [--control-socket PATH] [--no-sandbox]\n"
    "       abox broker reload SOCKET FILE\n"
    "       abox broker ca --state DIR [--instance NAME]\n"
    "       abox broker nonces --policy FILE --state DIR [--json]\n"
    "\n"
    "Runs the TLS credential broker of one instance: it terminates the guest's\n"
    "TLS with leaves minted by the instance CA, parses each request strictly,\n"
    "and only when the injection gate's conditions all hold swaps the guest's\n"
    "nonce for the real key and forwards the request over verified TLS.\n"
    "\n"
    "Options:\n"
    "  -p, --policy FILE        the instance's policy; its [[broker]] bindings (required)\n"
    "  -c, --credentials FILE   TOML: [credentials] NAME = \"KEY\", NAME as in a binding's\n"
    "                           `credential` (the store of abox credentials is such a file).\n"
    "                           Must be a regular file owned by you, mode 600 or stricter\n"
    "      --credentials-fd N   the same text read once from fd N (a pipe or memfd), then\n"
    "                           closed; every name in it must be one a binding uses. How\n"
    "                           abox run and the daemon give an instance's broker its keys\n"
    "                           (one of the two is required)\n"
    "  -s, --state DIR          the instance's state folder: CA key and certificate, nonce\n"
    "                           secret; created mode 700 on first use, and bound to the\n"
    "                           instance that made it (required)\n"
    "  -l, --listen WHERE       unix:PATH (abox-net hands flows over, each with its hand-off\n"
    "                           line) or ADDR:PORT (TCP, clients connect directly; port 0\n"
    "                           picks one, and the ready line says which) (required)\n"
    "      --instance NAME      the instance name (hand-off lines must carry it; default: default)\n"
    "      --upstream-ca FILE   also trust this CA for the providers (tests)\n"
    "      --events FILE|-      JSON-lines events appended to FILE, or '-' for stdout (default:\n"
    "                           stderr); with '-' the 'listening on' line still comes first\n"
    "      --stats-file FILE    where SIGUSR1 appends the accounting JSON, a line each time\n"
    "                           (opened at start; default: stderr)\n"
    "      --control-socket PATH  a unix socket (mode 600) through which 'abox broker reload'\n"
    "                           and 'abox policy apply' give the running broker a new policy\n"
    "      --no-sandbox         FOR DEBUGGING ONLY: keep capabilities, skip the seccomp\n"
    "                           filter (by default the broker drops every privilege and\n"
    "                           confines its syscalls before it reads a guest byte)\n"
    "\n"
    "Prints 'listening on WHERE' when ready (WHERE with the port the kernel picked),\n"
    "confined by then. SIGUSR1 writes the accounting (per binding: requests, statuses, bytes, 429/5xx,\n"
    "Retry-After) as one JSON line; SIGINT or SIGTERM writes it and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start (the\n"
    "message says why: policy, credentials file, state folder, listen address).\n";

constexpr std::string_view kReloadUsage =
    "usage: abox broker reload SOCKET FILE\n"
    "\n"
    "Gives the broker whose --control-socket is SOCKET a new policy, FILE, while it\n"
    "runs. FILE is validated first: an invalid one changes nothing, and its problems\n"
    "are printed as file:line:column. The broker holds only the keys of the bindings\n"
    "it started with, so a reload chooses which of those are in force: a binding\n"
    "FILE no longer has is removed (its next requests get 403 with abox-refused:\n"
    "binding_removed; requests already forwarded finish), one it has again is\n"
    "restored. A new binding, or one whose fields changed, needs a restart of the\n"
    "instance: such a FILE is refused and nothing changes.\n"
    "\n"
    "Exit status: 0 applied, 1 refused (nothing changed), 2 usage error, 3 FILE\n"
    "cannot be read or no answer from SOCKET.\n";

constexpr std::string_view kCaUsage =
    "usage: abox broker ca --state DIR [--instance NAME]\n"
    "\n"
    "Prints the instance CA's certificate (PEM): the guest must trust it. Creates\n"
    "the CA in DIR (mode 700, key mode 600) when there is none yet.\n"
    "\n"
    "Options:\n"
    "  -s, --state DIR     the instance's state folder (required)\n"
    "      --instance NAME the instance the folder belongs to (default: default); a folder\n"
    "                      made for another instance is refused, and the message names it\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 the state folder is unusable.\n";

constexpr std::string_view kNoncesUsage =
    "usage: abox broker nonces --policy FILE --state DIR [--json]\n"
    "\n"
    "Prints the nonce the guest gets for each [[broker]] binding, in policy order,\n"
    "as ENV=NONCE lines (ENV is the binding's nonce_env). Nonces derive from the\n"
    "instance secret in DIR (created on first use), so they stay the same across\n"
    "restarts. They are not keys: the broker accepts a nonce only from this\n"
    "instance, for its own binding.\n"
    "\n"
    "Options:\n"
    "  -p, --policy FILE   the instance's policy (required); one with no [[broker]]\n"
    "                      bindings prints nothing and says so on stderr\n"
    "  -s, --state DIR     the instance's state folder (required)\n"
    "      --json          {\"nonces\":[{\"name\",\"port\",\"credential\",\"env\",\"nonce\"}]}\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 the policy or state folder is unusable.\n";

constexpr base::OptionSpec kRunOptions[] = {
    {"policy", 'p', true},   {"credentials", 'c', true},  {"credentials-fd", 0, true}, {"state", 's', true},
    {"listen", 'l', true},   {"instance", 0, true},       {"upstream-ca", 0, true},    {"events", 0, true},
    {"stats-file", 0, true}, {"control-socket", 0, true}, {"no-sandbox", 0, false},
};
constexpr base::OptionSpec kCaOptions[] = {{"state", 's', true}, {"instance", 0, true}};
constexpr base::OptionSpec kNoncesOptions[] = {
    {"policy", 'p', true}, {"state", 's', true}, {"json", 0, false}};

int usage_error(std::ostream& err, std::string_view command, std::string_view message) {
  err << base::usage_error_line(command, message);
  return kExitUsage;
}

// Parses args for `command`; on a usage error prints its one line and
// returns nullopt (the caller returns kExitUsage). Takes no positionals.
std::optional<base::ParsedArgs> parse(std::span<const std::string_view> args,
                                      std::span<const base::OptionSpec> specs, std::string_view command,
                                      std::ostream& err) {
  auto parsed = base::parse_options(args, specs, false);
  if (!parsed.ok()) {
    usage_error(err, command, parsed.error());
    return std::nullopt;
  }
  if (!parsed->help && !parsed->positionals.empty()) {
    usage_error(err, command, "unexpected argument '" + parsed->positionals[0] + "'");
    return std::nullopt;
  }
  return std::move(parsed).value();
}

std::string missing_options(const base::ParsedArgs& p, std::initializer_list<std::string_view> required) {
  std::string missing;
  for (auto name : required) {
    if (p.has(name)) continue;
    missing += missing.empty() ? "missing --" : ", --";
    missing += name;
  }
  return missing;
}

bool valid_instance(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

int run_ca(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox broker ca";
  auto p = parse(args, kCaOptions, kCommand, err);
  if (!p) return kExitUsage;
  if (p->help) {
    out << kCaUsage;
    return kExitOk;
  }
  if (auto missing = missing_options(*p, {"state"}); !missing.empty())
    return usage_error(err, kCommand, missing);
  std::string instance = p->last("instance").value_or("default");
  if (!valid_instance(instance))
    return usage_error(err, kCommand, "--instance must be 1-64 of [A-Za-z0-9._-]");
  auto pem = broker::instance_ca_pem(*p->last("state"), instance);
  if (!pem.ok()) {
    err << "abox broker ca: " << pem.error() << '\n';
    return kExitFailed;
  }
  out << *pem;
  return kExitOk;
}

int run_nonces(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox broker nonces";
  auto p = parse(args, kNoncesOptions, kCommand, err);
  if (!p) return kExitUsage;
  if (p->help) {
    out << kNoncesUsage;
    return kExitOk;
  }
  if (auto missing = missing_options(*p, {"policy", "state"}); !missing.empty())
    return usage_error(err, kCommand, missing);
  const std::string policy_file = *p->last("policy");
  auto loaded = policy::load_policy(policy_file);
  if (!loaded.ok()) {
    err << loaded.error().to_string() << kCommand << ": " << policy_file << ": "
        << (loaded.error().unreadable ? "cannot be read" : "the policy is invalid") << '\n';
    return kExitFailed;
  }
  if (loaded->brokers().empty()) {
    // Not an error (there is simply nothing to print), but an empty answer
    // should not look like a state folder that lost its nonces.
    err << kCommand << ": " << policy_file
        << " has no [[broker]] bindings, so the guest gets no nonces (a binding names a provider whose key "
           "the broker adds: docs/broker.md)\n";
  }
  auto nonces = broker::binding_nonces(*loaded, *p->last("state"));
  if (!nonces.ok()) {
    err << "abox broker nonces: " << nonces.error() << '\n';
    return kExitFailed;
  }
  if (p->has("json")) {
    std::string js;
    base::JsonWriter w(js);
    w.begin_object().key("nonces").begin_array();
    for (const auto& n : *nonces) {
      w.begin_object()
          .field("name", n.name)
          .field("port", static_cast<std::uint64_t>(n.port))
          .field("credential", n.credential)
          .field("env", n.env)
          .field("nonce", n.nonce)
          .end_object();
    }
    w.end_array().end_object();
    out << js << '\n';
    return kExitOk;
  }
  for (const auto& n : *nonces) out << n.env << '=' << n.nonce << '\n';
  return kExitOk;
}

int run_service(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox broker";
  auto p = parse(args, kRunOptions, kCommand, err);
  if (!p) return kExitUsage;
  if (p->help) {
    out << kRunUsage;
    return kExitOk;
  }
  if (auto missing = missing_options(*p, {"policy", "state", "listen"}); !missing.empty())
    return usage_error(err, kCommand, missing);
  if (p->has("credentials") == p->has("credentials-fd"))
    return usage_error(err, kCommand, "give the keys with one of --credentials FILE and --credentials-fd N");
  broker::BrokerOptions o;
  o.instance = p->last("instance").value_or("default");
  if (!valid_instance(o.instance))
    return usage_error(err, kCommand, "--instance must be 1-64 of [A-Za-z0-9._-]");
  o.policy_file = *p->last("policy");
  o.credentials_file = p->last("credentials").value_or("");
  if (auto fd = p->last("credentials-fd")) {
    int n = -1;
    auto [end, ec] = std::from_chars(fd->data(), fd->data() + fd->size(), n);
    if (ec != std::errc() || end != fd->data() + fd->size() || n < 3 || ::fcntl(n, F_GETFD) < 0)
      return usage_error(err, kCommand, "--credentials-fd " + *fd + ": not an open fd of 3 or more");
    o.credentials_fd = n;
  }
  o.state_dir = *p->last("state");
  o.listen = *p->last("listen");
  o.upstream_ca = p->last("upstream-ca").value_or("");
  o.stats_file = p->last("stats-file").value_or("");
  o.control_socket = p->last("control-socket").value_or("");

  base::UniqueFd events_file;
  int events_fd = STDERR_FILENO;
  const auto events_path = p->last("events");
  if (events_path && *events_path == "-") {
    events_fd = STDOUT_FILENO;
  } else if (events_path) {
    events_file.reset(::open(events_path->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!events_file) {
      err << "abox broker: " << *events_path << ": " << std::strerror(errno) << '\n';
      return kExitFailed;
    }
    events_fd = events_file.get();
  }
  base::EventLog events = base::EventLog::to_fd(o.instance, events_fd);
  auto service = broker::BrokerService::create(o, events);
  if (!service.ok()) {
    err << "abox broker: " << service.error() << '\n';
    return kExitFailed;
  }
  // Confined before it says it listens, so no guest byte is ever read
  // unconfined (broker/sandbox.h).
  if (!p->has("no-sandbox")) {
    if (auto confined = (*service)->enter_sandbox(); !confined.ok()) {
      err << "abox broker: cannot enter the sandbox: " << confined.error() << '\n';
      return kExitFailed;
    }
  } else {
    err << "abox broker: WARNING: --no-sandbox: running with every privilege and no syscall filter\n";
  }
  out << "listening on " << (*service)->listening_on() << std::endl;
  (*service)->run();
  return kExitOk;
}

int run_reload(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox broker reload";
  auto parsed = base::parse_options(args, {}, false);
  if (!parsed.ok()) return usage_error(err, kCommand, parsed.error());
  if (parsed->help) {
    out << kReloadUsage;
    return kExitOk;
  }
  if (parsed->positionals.size() != 2) {
    return usage_error(err, kCommand,
                       parsed->positionals.size() < 2
                           ? "SOCKET and FILE are required"
                           : "unexpected argument '" + parsed->positionals[2] + "'");
  }
  const std::string& socket = parsed->positionals[0];
  const std::string& file = parsed->positionals[1];
  auto text = read_policy_text(file);
  if (!text.ok()) {
    err << kCommand << ": cannot read " << file << ": " << text.error() << '\n';
    return kExitFailed;
  }
  std::string error;
  auto reply = ask_control_socket(socket, "reload " + file, *text, error, std::chrono::seconds(10));
  if (!reply) {
    err << kCommand << ": " << error << '\n';
    return kExitFailed;
  }
  const ReloadReply r = parse_reload_reply(*reply);
  if (r.status != 0 && r.status != 1) {
    err << kCommand << ": " << socket << ": " << r.text << '\n';
    return kExitFailed;
  }
  (r.status == 0 ? out : err) << r.text << '\n';
  return r.status == 0 ? kExitOk : kExitNo;
}

}  // namespace

int run_broker_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  if (!args.empty() && args[0] == "ca") return run_ca(args.subspan(1), out, err);
  if (!args.empty() && args[0] == "nonces") return run_nonces(args.subspan(1), out, err);
  if (!args.empty() && args[0] == "reload") return run_reload(args.subspan(1), out, err);
  return run_service(args, out, err);
}

}  // namespace abox::engine
