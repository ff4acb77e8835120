#include "engine/cli/policy_command.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/json.h"
#include "engine/cli/exit_codes.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

using policy::AllowRule;
using policy::BrokerBinding;
using policy::Policy;
using policy::Protocol;

constexpr std::string_view kPolicyUsage =
    "usage: abox policy <command> [options]\n"
    "\n"
    "Commands:\n"
    "  check [--json] [--quiet] FILE...        validate policy files\n"
    "  explain [--json] [--udp] FILE TARGET    say whether a policy admits TARGET, and why\n"
    "\n"
    "Run 'abox policy <command> --help' for details.\n";

constexpr std::string_view kCheckUsage =
    "usage: abox policy check [--json] [--quiet] FILE...\n"
    "\n"
    "Validates each policy file: syntax, every key and value, duplicates and\n"
    "contradictions. Problems are printed as FILE:LINE:COLUMN: message, with\n"
    "warnings for valid settings worth a second look ([unsafe], broad wildcards).\n"
    "\n"
    "Options:\n"
    "  --json     one JSON object on stdout: {\"files\":[{\"file\",\"valid\",\"errors\",\"warnings\"}]}\n"
    "  --quiet    print nothing for valid files\n"
    "\n"
    "Exit status: 0 all files valid, 1 at least one invalid, 2 usage error.\n";

constexpr std::string_view kExplainUsage =
    "usage: abox policy explain [--json] [--udp] FILE TARGET\n"
    "\n"
    "TARGET is NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or [IPV6]:PORT.\n"
    "For a name: whether the DNS gate resolves it, which [[allow]] rule admits\n"
    "it on the port (tcp, or udp with --udp), whether the TLS SNI / HTTP Host is\n"
    "checked, or which [[broker]] binding takes it. For an address: the reserved\n"
    "range that refuses it, or what a flow to it needs.\n"
    "\n"
    "Options:\n"
    "  --json     one JSON object on stdout\n"
    "  --udp      ask about udp instead of tcp\n"
    "\n"
    "Exit status: 0 allowed, 1 refused, 2 usage error, 3 the policy file is invalid.\n";

void print_diagnostics_json(base::JsonWriter& w, std::string_view key,
                            const std::vector<policy::PolicyDiagnostic>& ds) {
  w.key(key).begin_array();
  for (const auto& d : ds) {
    w.begin_object().field("line", d.line).field("column", d.column).field("message", d.message).end_object();
  }
  w.end_array();
}

int check(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  bool json = false;
  bool quiet = false;
  std::vector<std::string_view> files;
  for (auto a : args) {
    if (is_help_flag(a)) {
      out << kCheckUsage;
      return kExitOk;
    }
    if (a == "--json") {
      json = true;
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (a.starts_with("-") && a != "-") {
      err << "abox policy check: unknown option '" << a << "'\n" << kCheckUsage;
      return kExitUsage;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    err << "abox policy check: no FILE given\n" << kCheckUsage;
    return kExitUsage;
  }

  int status = kExitOk;
  std::string js;
  base::JsonWriter w(js);
  w.begin_object().key("files").begin_array();
  for (auto f : files) {
    auto loaded = policy::load_policy(std::string(f));
    std::vector<policy::PolicyDiagnostic> warnings;
    if (loaded.ok()) warnings = policy::policy_warnings(*loaded);
    if (!loaded.ok()) status = kExitNo;
    if (json) {
      w.begin_object().field("file", f).field("valid", loaded.ok());
      print_diagnostics_json(
          w, "errors", loaded.ok() ? std::vector<policy::PolicyDiagnostic>{} : loaded.error().diagnostics);
      print_diagnostics_json(w, "warnings", warnings);
      if (loaded.ok()) {
        w.field("rules", static_cast<std::uint64_t>(loaded->rules().size()))
            .field("brokers", static_cast<std::uint64_t>(loaded->brokers().size()));
      }
      w.end_object();
      continue;
    }
    if (!loaded.ok()) {
      err << loaded.error().to_string();
      err << f << ": invalid (" << loaded.error().diagnostics.size() << " problem"
          << (loaded.error().diagnostics.size() == 1 ? "" : "s") << ")\n";
      continue;
    }
    for (const auto& d : warnings) err << d.to_string() << '\n';
    if (!quiet) {
      out << f << ": valid (" << loaded->rules().size() << " allow rule"
          << (loaded->rules().size() == 1 ? "" : "s") << ", " << loaded->brokers().size() << " broker binding"
          << (loaded->brokers().size() == 1 ? "" : "s") << ")\n";
    }
  }
  w.end_array().end_object();
  if (json) out << js << '\n';
  return status;
}

// TARGET, split into what it names.
struct Target {
  std::string text;
  std::optional<policy::IpAddress> address;
  std::string name;  // as written, when not an address
  std::optional<std::uint16_t> port;
};

std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

std::optional<Target> parse_target(std::string_view s) {
  Target t;
  t.text = std::string(s);
  if (auto a = policy::IpAddress::parse(s)) {
    t.address = a;
    return t;
  }
  if (s.starts_with("[") || s.find(':') != s.rfind(':')) {
    auto ep = policy::Endpoint::parse(s, 0);
    if (!ep || ep->port == 0) return std::nullopt;
    t.address = ep->address;
    t.port = ep->port;
    return t;
  }
  auto colon = s.find(':');
  std::string_view host = s.substr(0, colon);
  if (colon != std::string_view::npos) {
    t.port = parse_port(s.substr(colon + 1));
    if (!t.port) return std::nullopt;
  }
  if (auto a = policy::IpAddress::parse(host)) {
    t.address = a;
  } else {
    t.name = std::string(host);
  }
  return t;
}

std::string protocols_text(const AllowRule& r) {
  if (r.tcp && r.udp) return "tcp+udp";
  return r.tcp ? "tcp" : "udp";
}

std::string ports_text(const AllowRule& r) {
  std::string s;
  for (const auto& p : r.ports) {
    if (!s.empty()) s += ",";
    s += p.to_string();
  }
  return s;
}

struct Explanation {
  std::string verdict;  // "allowed", "refused", "brokered", "resolvable"
  std::string reason;
  std::vector<std::string> details;
  bool allowed = false;
  const AllowRule* rule = nullptr;
  bool rule_wildcard = false;
  std::string rule_pattern;
  const BrokerBinding* broker = nullptr;
  const policy::ReservedRange* reserved = nullptr;
  const policy::Cidr* lifted_by = nullptr;
  std::optional<bool> name_check;
};

std::string upstream_text(const Policy& p) {
  if (p.dns().use_system) return "the system's resolvers";
  std::string s;
  for (const auto& u : p.dns().upstreams) {
    if (!s.empty()) s += ", ";
    s += u.to_string();
  }
  return s;
}

Explanation explain_address(const Policy& p, const policy::IpAddress& a) {
  Explanation e;
  auto v = p.check_address(a);
  e.reserved = v.reserved;
  e.lifted_by = v.lifted_by;
  if (v.refused()) {
    e.verdict = "refused";
    e.reason = "reserved range " + v.reserved->range.to_string() + " (" + std::string(v.reserved->name) +
               ", " + std::string(v.reserved->reference) + ")";
    e.details.push_back(
        "reserved addresses are refused whatever the names say, and removed from DNS answers");
    return e;
  }
  e.allowed = true;
  e.verdict = "answer-required";
  e.reason =
      "a flow to this address is admitted only while the DNS gate holds an unexpired answer with it for an "
      "allowed name, on a port that name's rule allows";
  if (v.reserved != nullptr) {
    e.details.push_back("in reserved range " + v.reserved->range.to_string() + " (" +
                        std::string(v.reserved->name) + "), lifted by [unsafe] allow_reserved " +
                        v.lifted_by->to_string() + " at " + p.unsafe().where.to_string() +
                        "; every use is logged");
  }
  e.details.push_back("direct connections to addresses no allowed name was answered with are refused");
  return e;
}

Explanation explain_name(const Policy& p, std::string_view written, std::optional<std::uint16_t> port,
                         Protocol proto) {
  Explanation e;
  auto name = policy::CanonicalName::from(written);
  if (!name.ok()) {
    e.verdict = "refused";
    e.reason = "not a valid name: " + std::string(policy::describe(name.error()));
    return e;
  }
  auto n = name->view();
  if (!p.allows_name(n)) {
    e.verdict = "refused";
    e.reason = "no [[allow]] or [[broker]] names it";
    e.details.push_back(std::string("the DNS gate answers it with ") +
                        (p.dns().denied == policy::DeniedAnswer::nxdomain ? "NXDOMAIN" : "REFUSED") +
                        " and never asks upstream");
    return e;
  }
  e.details.push_back("the DNS gate resolves it through " + upstream_text(p) + ", TTL clamped to " +
                      std::to_string(p.dns().min_ttl) + ".." + std::to_string(p.dns().max_ttl) + " s");

  if (port && proto == Protocol::tcp) {
    if (const auto* b = p.broker_for(n, *port)) {
      e.broker = b;
      e.allowed = true;
      e.verdict = "brokered";
      e.reason = "[[broker]] at " + b->where.to_string() + " takes HTTPS to it; the guest's nonce in $" +
                 b->nonce_env + " is swapped for credential '" + b->credential + "' in header '" + b->header +
                 "'";
      std::string methods;
      for (const auto& m : b->methods) methods += (methods.empty() ? "" : ",") + m;
      std::string paths;
      for (const auto& pp : b->path_prefixes) paths += (paths.empty() ? "" : " ") + pp;
      e.details.push_back("methods " + methods + "; path prefixes " + paths);
      return e;
    }
  }

  if (!port) {
    e.allowed = true;
    e.verdict = "resolvable";
    e.reason = "names it; give NAME:PORT to ask about a flow";
    p.for_each_rule_matching(n, [&](const AllowRule& r, bool wildcard) {
      e.details.push_back("rule at " + r.where.to_string() + (wildcard ? " (wildcard)" : " (exact)") +
                          ": ports " + ports_text(r) + " " + protocols_text(r));
      return false;
    });
    for (const auto& b : p.brokers()) {
      if (b.name == n)
        e.details.push_back("[[broker]] at " + b.where.to_string() + ": port " + std::to_string(b.port));
    }
    return e;
  }

  p.for_each_rule_matching(n, [&](const AllowRule& r, bool wildcard) {
    if (!r.allows(*port, proto)) return false;
    e.rule = &r;
    e.rule_wildcard = wildcard;
    for (const auto& pat : r.names) {
      bool hit = wildcard ? (pat.wildcard && n.size() > pat.base.size() && n.ends_with("." + pat.base))
                          : (!pat.wildcard && pat.base == n);
      if (hit && (e.rule_pattern.empty() || pat.base.size() > e.rule_pattern.size()))
        e.rule_pattern = pat.to_string();
    }
    return true;
  });
  std::string where = std::to_string(*port) + "/" + std::string(policy::to_string(proto));
  if (e.rule == nullptr) {
    e.verdict = "refused";
    e.reason = "no rule for this name allows port " + where;
    p.for_each_rule_matching(n, [&](const AllowRule& r, bool) {
      e.details.push_back("rule at " + r.where.to_string() + " allows ports " + ports_text(r) + " " +
                          protocols_text(r));
      return false;
    });
    return e;
  }
  e.allowed = true;
  e.verdict = "allowed";
  e.reason = "[[allow]] at " + e.rule->where.to_string() + " (" + e.rule_pattern + ") allows " + where;
  if (proto == Protocol::tcp) {
    e.name_check = e.rule->requires_name(*port);
    std::string why = e.rule->verify_name
                          ? "verify_name = " + std::string(*e.rule->verify_name ? "true" : "false")
                          : std::string("the default for port ") + std::to_string(*port);
    e.details.push_back(*e.name_check
                            ? "the flow's TLS SNI or HTTP Host must name " + std::string(n) + " (" + why + ")"
                            : "the flow's first bytes are not checked for a name (" + why + ")");
  }
  e.details.push_back("only to addresses the DNS gate answered for this name, never to a reserved range");
  return e;
}

int explain(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  bool json = false;
  Protocol proto = Protocol::tcp;
  std::vector<std::string_view> pos;
  for (auto a : args) {
    if (is_help_flag(a)) {
      out << kExplainUsage;
      return kExitOk;
    }
    if (a == "--json") {
      json = true;
    } else if (a == "--udp") {
      proto = Protocol::udp;
    } else if (a == "--tcp") {
      proto = Protocol::tcp;
    } else if (a.starts_with("-")) {
      err << "abox policy explain: unknown option '" << a << "'\n" << kExplainUsage;
      return kExitUsage;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) {
    err << "abox policy explain: expected FILE and TARGET\n" << kExplainUsage;
    return kExitUsage;
  }
  auto target = parse_target(pos[1]);
  if (!target) {
    err << "abox policy explain: cannot read target '" << pos[1]
        << "': expected NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or [IPV6]:PORT (port 1-65535)\n";
    return kExitUsage;
  }
  auto loaded = policy::load_policy(std::string(pos[0]));
  if (!loaded.ok()) {
    err << loaded.error().to_string();
    err << "abox policy explain: " << pos[0] << " is invalid; run 'abox policy check " << pos[0] << "'\n";
    return kExitFailed;
  }
  const Policy& p = *loaded;
  Explanation e = target->address ? explain_address(p, *target->address)
                                  : explain_name(p, target->name, target->port, proto);

  if (json) {
    std::string js;
    base::JsonWriter w(js);
    w.begin_object()
        .field("policy", pos[0])
        .field("target", target->text)
        .field("kind", target->address ? "address" : "name")
        .field("protocol", policy::to_string(proto))
        .field("verdict", e.verdict)
        .field("allowed", e.allowed)
        .field("reason", e.reason);
    if (target->port) w.field("port", static_cast<unsigned>(*target->port));
    if (e.rule != nullptr) {
      w.key("rule")
          .begin_object()
          .field("line", e.rule->where.line)
          .field("column", e.rule->where.column)
          .field("pattern", e.rule_pattern)
          .field("wildcard", e.rule_wildcard)
          .end_object();
    }
    if (e.name_check) w.field("name_check", *e.name_check);
    if (e.broker != nullptr) {
      w.key("broker")
          .begin_object()
          .field("line", e.broker->where.line)
          .field("column", e.broker->where.column)
          .field("credential", e.broker->credential)
          .field("header", e.broker->header)
          .field("nonce_env", e.broker->nonce_env)
          .end_object();
    }
    if (e.reserved != nullptr) {
      w.key("reserved")
          .begin_object()
          .field("range", e.reserved->range.to_string())
          .field("name", e.reserved->name)
          .field("reference", e.reserved->reference)
          .field("lifted", e.lifted_by != nullptr)
          .end_object();
    }
    w.key("details").begin_array();
    for (const auto& d : e.details) w.value(d);
    w.end_array().end_object();
    out << js << '\n';
  } else {
    std::string shown = target->text;
    if (!target->address && target->port) shown += "/" + std::string(policy::to_string(proto));
    out << shown << ": " << e.verdict << ": " << e.reason << '\n';
    for (const auto& d : e.details) out << "  - " << d << '\n';
  }
  return e.allowed ? kExitOk : kExitNo;
}

}  // namespace

int run_policy_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << kPolicyUsage;
    return kExitUsage;
  }
  if (is_help_flag(args[0])) {
    out << kPolicyUsage;
    return kExitOk;
  }
  if (args[0] == "check") return check(args.subspan(1), out, err);
  if (args[0] == "explain") return explain(args.subspan(1), out, err);
  err << "abox policy: unknown command '" << args[0] << "'\n" << kPolicyUsage;
  return kExitUsage;
}

}  // namespace abox::engine
