#include "engine/cli/broker_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>

#include "base/event_log.h"
#include "base/json.h"
#include "base/unique_fd.h"
#include "broker/service.h"
#include "engine/cli/exit_codes.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

constexpr std::string_view kRunUsage =
    "usage: abox broker --policy FILE --credentials FILE --state DIR --listen unix:PATH|ADDR:PORT\n"
    "                   [--instance NAME] [--upstream-ca FILE] [--events FILE|-] [--stats-file FILE]\n"
    "       abox broker ca --state DIR [--instance NAME]\n"
    "       abox broker nonces --policy FILE --state DIR [--json]\n"
    "\n"
    "Runs the TLS credential broker of one instance: it terminates the guest's\n"
    "TLS with leaves minted by the instance CA, parses each request strictly,\n"
    "and only when the injection gate's conditions all hold swaps the guest's\n"
    "nonce for the real key and forwards the request over verified TLS.\n"
    "\n"
    "Options:\n"
    "  --policy FILE        the instance's policy; its [[broker]] bindings (required)\n"
    "  --credentials FILE   TOML: [credentials] NAME = \"KEY\", NAME as in a binding's\n"
    "                       `credential`. Must be a regular file owned by you, mode 600\n"
    "                       or stricter (required)\n"
    "  --state DIR          the instance's state folder: CA key and certificate, nonce\n"
    "                       secret; created mode 700 on first use (required)\n"
    "  --listen WHERE       unix:PATH (abox-net hands flows over, each with its hand-off\n"
    "                       line) or ADDR:PORT (TCP, clients connect directly; port 0\n"
    "                       picks one) (required)\n"
    "  --instance NAME      the instance name (hand-off lines must carry it; default: default)\n"
    "  --upstream-ca FILE   also trust this CA for the providers (tests)\n"
    "  --events FILE|-      JSON-lines events appended to FILE, or '-' for stdout (default: stderr)\n"
    "  --stats-file FILE    where SIGUSR1 writes the accounting JSON (default: stderr)\n"
    "\n"
    "Prints 'listening on WHERE' when ready. SIGUSR1 writes the accounting (per\n"
    "binding: requests, statuses, bytes, 429/5xx, Retry-After) as one JSON line;\n"
    "SIGINT or SIGTERM writes it and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start (the\n"
    "message says why: policy, credentials file, state folder, listen address).\n";

constexpr std::string_view kCaUsage =
    "usage: abox broker ca --state DIR [--instance NAME]\n"
    "\n"
    "Prints the instance CA's certificate (PEM): the guest must trust it. Creates\n"
    "the CA in DIR (mode 700, key mode 600) when there is none yet.\n"
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
    "  --json   {\"nonces\":[{\"name\",\"port\",\"credential\",\"env\",\"nonce\"}]}\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 the policy or state folder is unusable.\n";

// Reads "--opt VALUE" pairs; returns false (and says why) on a problem.
struct Parsed {
  std::optional<std::string> policy, credentials, state, listen, instance, upstream_ca, events, stats_file;
  bool json = false;
  bool help = false;
};

bool parse_options(std::span<const std::string_view> args, Parsed& p, std::string_view command,
                   std::ostream& err) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (is_help_flag(a)) {
      p.help = true;
      return true;
    }
    if (a == "--json") {
      p.json = true;
      continue;
    }
    std::optional<std::string>* slot = nullptr;
    if (a == "--policy")
      slot = &p.policy;
    else if (a == "--credentials")
      slot = &p.credentials;
    else if (a == "--state")
      slot = &p.state;
    else if (a == "--listen")
      slot = &p.listen;
    else if (a == "--instance")
      slot = &p.instance;
    else if (a == "--upstream-ca")
      slot = &p.upstream_ca;
    else if (a == "--events")
      slot = &p.events;
    else if (a == "--stats-file")
      slot = &p.stats_file;
    if (slot == nullptr) {
      err << "abox broker" << command << ": unknown option '" << a << "'\n";
      return false;
    }
    if (i + 1 >= args.size()) {
      err << "abox broker" << command << ": " << a << " needs a value\n";
      return false;
    }
    *slot = std::string(args[++i]);
  }
  return true;
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
  Parsed p;
  if (!parse_options(args, p, " ca", err)) {
    err << kCaUsage;
    return kExitUsage;
  }
  if (p.help) {
    out << kCaUsage;
    return kExitOk;
  }
  if (!p.state || p.policy || p.credentials || p.listen || p.json) {
    err << "abox broker ca: needs --state DIR (and only --instance besides)\n" << kCaUsage;
    return kExitUsage;
  }
  std::string instance = p.instance.value_or("default");
  if (!valid_instance(instance)) {
    err << "abox broker ca: --instance must be 1-64 of [A-Za-z0-9._-]\n";
    return kExitUsage;
  }
  auto pem = broker::instance_ca_pem(*p.state, instance);
  if (!pem.ok()) {
    err << "abox broker ca: " << pem.error() << '\n';
    return kExitFailed;
  }
  out << *pem;
  return kExitOk;
}

int run_nonces(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  Parsed p;
  if (!parse_options(args, p, " nonces", err)) {
    err << kNoncesUsage;
    return kExitUsage;
  }
  if (p.help) {
    out << kNoncesUsage;
    return kExitOk;
  }
  if (!p.policy || !p.state || p.credentials || p.listen) {
    err << "abox broker nonces: needs --policy FILE and --state DIR\n" << kNoncesUsage;
    return kExitUsage;
  }
  auto loaded = policy::load_policy(*p.policy);
  if (!loaded.ok()) {
    err << loaded.error().to_string() << "abox broker nonces: the policy is invalid\n";
    return kExitFailed;
  }
  auto nonces = broker::binding_nonces(*loaded, *p.state);
  if (!nonces.ok()) {
    err << "abox broker nonces: " << nonces.error() << '\n';
    return kExitFailed;
  }
  if (p.json) {
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
  Parsed p;
  if (!parse_options(args, p, "", err)) {
    err << kRunUsage;
    return kExitUsage;
  }
  if (p.help) {
    out << kRunUsage;
    return kExitOk;
  }
  std::string missing;
  if (!p.policy) missing += " --policy";
  if (!p.credentials) missing += " --credentials";
  if (!p.state) missing += " --state";
  if (!p.listen) missing += " --listen";
  if (!missing.empty() || p.json) {
    if (!missing.empty()) err << "abox broker: missing" << missing << '\n';
    err << kRunUsage;
    return kExitUsage;
  }
  broker::BrokerOptions o;
  o.instance = p.instance.value_or("default");
  if (!valid_instance(o.instance)) {
    err << "abox broker: --instance must be 1-64 of [A-Za-z0-9._-]\n";
    return kExitUsage;
  }
  o.policy_file = *p.policy;
  o.credentials_file = *p.credentials;
  o.state_dir = *p.state;
  o.listen = *p.listen;
  o.upstream_ca = p.upstream_ca.value_or("");
  o.stats_file = p.stats_file.value_or("");

  base::UniqueFd events_file;
  int events_fd = STDERR_FILENO;
  if (p.events && *p.events == "-") {
    events_fd = STDOUT_FILENO;
  } else if (p.events) {
    events_file.reset(::open(p.events->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!events_file) {
      err << "abox broker: " << *p.events << ": " << std::strerror(errno) << '\n';
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
  out << "listening on " << (*service)->listening_on() << std::endl;
  (*service)->run();
  return kExitOk;
}

}  // namespace

int run_broker_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  if (!args.empty() && args[0] == "ca") return run_ca(args.subspan(1), out, err);
  if (!args.empty() && args[0] == "nonces") return run_nonces(args.subspan(1), out, err);
  return run_service(args, out, err);
}

}  // namespace abox::engine
