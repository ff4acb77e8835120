#include "engine/cli/policy_command.h"

#include <fstream>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "base/json.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/policy_apply.h"
#include "engine/cli/policy_suggest.h"
#include "policy/explain.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

using policy::Policy;
using policy::Protocol;

constexpr std::string_view kPolicyUsage =
    "usage: abox policy <command> [options]\n"
    "\n"
    "Commands:\n"
    "  check [--json] [--quiet] FILE...        validate policy files\n"
    "  explain [--json] [--udp|--icmp] FILE TARGET  say whether a policy admits TARGET, and why\n"
    "  suggest [--from POLICY] EVENTS.jsonl    write a policy allowing what an event log shows\n"
    "  apply [--json] NAME FILE                make FILE instance NAME's policy, reloaded if it runs\n"
    "\n"
    "Run 'abox policy <command> --help' (or 'abox help policy <command>') for details.\n";

constexpr std::string_view kCheckUsage =
    "usage: abox policy check [--json] [--quiet] FILE...\n"
    "\n"
    "Validates each policy file: syntax, every key and value, duplicates and\n"
    "contradictions between rules, all in one run. Problems are printed as\n"
    "FILE:LINE:COLUMN: message (FILE: message for a problem of the file as a\n"
    "whole, such as one that cannot be read), at most 50 per file and then how\n"
    "many more there are; warnings for valid settings worth a second look\n"
    "([unsafe], broad wildcards).\n"
    "\n"
    "Options:\n"
    "      --json     one JSON object on stdout: {\"files\":[{\"file\",\"valid\",\"errors\",\"warnings\"}]}\n"
    "  -q, --quiet    print nothing for valid files\n"
    "\n"
    "Exit status: 0 all files valid, 1 at least one invalid, 2 usage error, 3 a file\n"
    "could not be read (missing, a folder, no permission; the message says why).\n";

constexpr std::string_view kExplainUsage =
    "usage: abox policy explain [--json] [--udp|--icmp] FILE TARGET\n"
    "\n"
    "TARGET is NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or [IPV6]:PORT.\n"
    "For a name: whether the DNS gate resolves it, which [[allow]] rule admits\n"
    "it on the port (tcp, or udp with --udp), whether the TLS SNI / HTTP Host is\n"
    "checked, or which [[broker]] binding takes it. For an address: the reserved\n"
    "range that refuses it; with a port, whether any rule allows that port and\n"
    "protocol, and if so the names a DNS answer with this address must be for\n"
    "(answer-required: not allowed by itself). With --icmp: whether echo\n"
    "requests (ping) to NAME or ADDRESS are admitted (no port: icmp has none).\n"
    "\n"
    "Options:\n"
    "      --json     one JSON object on stdout\n"
    "  -u, --udp      ask about udp instead of tcp\n"
    "      --icmp     ask about icmp echo (ping); TARGET takes no port\n"
    "\n"
    "Exit status: 0 allowed (or a name the DNS gate resolves), 1 refused, 2 usage\n"
    "error, 3 the policy file cannot be read or is invalid, 4 answer-required: an\n"
    "address is admitted only through a DNS answer for an allowed name.\n";

constexpr std::string_view kSuggestUsage =
    "usage: abox policy suggest [--from POLICY] [--group-wildcards] EVENTS.jsonl\n"
    "\n"
    "Reads an abox-net event log (best from a run in audit mode: abox-net run\n"
    "--audit, or [mode] audit = true) and prints a policy that allows exactly\n"
    "what it shows: one [[allow]] per name and protocol with the ports seen,\n"
    "UDP where seen, each with a comment saying how many flows it covers, their\n"
    "bytes out and in (from the flows' close events), and when it was first\n"
    "seen. Flows no name was answered for, names asked with no flow after, and\n"
    "flows refused as reserved are listed as comments: no rule can allow them.\n"
    "The output passes 'abox policy check'; review it.\n"
    "\n"
    "Options:\n"
    "      --from POLICY       start from POLICY (its text, unchanged) and add only\n"
    "                          what it does not allow yet\n"
    "      --group-wildcards   put names that share a parent domain (two or more)\n"
    "                          under one '*.PARENT' rule\n"
    "\n"
    "Exit status: 0 printed, 1 nothing to allow (no flow with a name in the log),\n"
    "2 usage error, 3 EVENTS or POLICY cannot be read, or POLICY is invalid.\n";

constexpr std::size_t kMaxEventsBytes = std::size_t{256} << 20;

void print_diagnostics_json(base::JsonWriter& w, std::string_view key,
                            const std::vector<policy::PolicyDiagnostic>& ds) {
  w.key(key).begin_array();
  for (const auto& d : ds) {
    w.begin_object();
    // A problem of the file as a whole has no place in the text: it says
    // so rather than pointing at a line 0.
    if (d.file_level()) {
      w.field("file_level", true);
    } else {
      w.field("line", d.line).field("column", d.column);
    }
    w.field("message", d.message).end_object();
  }
  w.end_array();
}

constexpr base::OptionSpec kCheckOptions[] = {{"json", 0, false}, {"quiet", 'q', false}};
constexpr base::OptionSpec kExplainOptions[] = {
    {"json", 0, false}, {"udp", 'u', false}, {"tcp", 't', false}, {"icmp", 0, false}};

constexpr base::OptionSpec kSuggestOptions[] = {{"from", 0, true}, {"group-wildcards", 0, false}};

int suggest(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox policy suggest";
  auto parsed = base::parse_options(args, kSuggestOptions, false);
  if (!parsed.ok()) {
    err << base::usage_error_line(kCommand, parsed.error());
    return kExitUsage;
  }
  if (parsed->help) {
    out << kSuggestUsage;
    return kExitOk;
  }
  if (parsed->positionals.size() != 1) {
    err << base::usage_error_line(kCommand, parsed->positionals.empty()
                                                ? "EVENTS.jsonl is required"
                                                : "unexpected argument '" + parsed->positionals[1] + "'");
    return kExitUsage;
  }
  const std::string& events_path = parsed->positionals[0];
  std::ifstream in(events_path, std::ios::binary);
  if (!in) {
    err << "abox policy suggest: cannot read " << events_path << '\n';
    return kExitFailed;
  }
  std::string events;
  events.resize(kMaxEventsBytes + 1);
  in.read(events.data(), static_cast<std::streamsize>(events.size()));
  events.resize(static_cast<std::size_t>(in.gcount()));
  if (events.size() > kMaxEventsBytes) {
    err << "abox policy suggest: " << events_path << " is larger than 256 MiB\n";
    return kExitFailed;
  }
  SuggestOptions options;
  options.group_wildcards = parsed->has("group-wildcards");
  options.events_source = events_path;
  std::optional<Policy> from;
  std::string from_text;
  if (auto f = parsed->last("from")) {
    auto loaded = policy::load_policy(*f);
    if (!loaded.ok()) {
      err << loaded.error().to_string() << "abox policy suggest: --from " << *f << " cannot be used\n";
      return kExitFailed;
    }
    from.emplace(std::move(loaded).value());
    std::ifstream text(*f, std::ios::binary);
    from_text.assign(std::istreambuf_iterator<char>(text), std::istreambuf_iterator<char>());
    options.from = &*from;
    options.from_text = from_text;
    if (from->mode().audit) {
      err << "abox policy suggest: warning: " << *f
          << " says [mode] audit = true, and so does the output: remove it to enforce the policy\n";
    }
  }
  auto s = suggest_policy(events, options);
  if (!s.ok()) {
    err << "abox policy suggest: " << s.error() << '\n';
    return kExitNo;
  }
  out << s->text;
  err << "abox policy suggest: " << s->rules << " rule(s) for " << s->flows << " flow(s); " << s->lines_read
      << " lines read, " << s->lines_skipped << " skipped\n";
  return kExitOk;
}

int check(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox policy check";
  auto parsed = base::parse_options(args, kCheckOptions, false);
  if (!parsed.ok()) {
    err << base::usage_error_line(kCommand, parsed.error());
    return kExitUsage;
  }
  if (parsed->help) {
    out << kCheckUsage;
    return kExitOk;
  }
  const bool json = parsed->has("json");
  const bool quiet = parsed->has("quiet");
  const auto& files = parsed->positionals;
  if (files.empty()) {
    err << base::usage_error_line(kCommand, "no FILE given");
    return kExitUsage;
  }

  bool any_invalid = false;
  bool any_unreadable = false;
  std::string js;
  base::JsonWriter w(js);
  w.begin_object().key("files").begin_array();
  for (const auto& f : files) {
    auto loaded = policy::load_policy(f);
    std::vector<policy::PolicyDiagnostic> warnings;
    if (loaded.ok()) warnings = policy::policy_warnings(*loaded);
    if (!loaded.ok()) (loaded.error().unreadable ? any_unreadable : any_invalid) = true;
    if (json) {
      w.begin_object().field("file", f).field("valid", loaded.ok());
      if (!loaded.ok()) {
        const auto& e = loaded.error();
        w.field("readable", !e.unreadable).field("problems", static_cast<std::uint64_t>(e.total));
        // The list holds at most kMaxPolicyDiagnostics: say when it was cut.
        w.field("errors_omitted", static_cast<std::uint64_t>(e.omitted()));
      }
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
      const auto& e = loaded.error();
      err << e.to_string();
      if (e.unreadable) {
        err << f << ": cannot be read\n";
      } else {
        err << f << ": invalid (" << e.total << " problem" << (e.total == 1 ? "" : "s") << ")\n";
      }
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
  if (any_unreadable) return kExitFailed;
  return any_invalid ? kExitNo : kExitOk;
}

int explain(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCommand = "abox policy explain";
  auto parsed = base::parse_options(args, kExplainOptions, false);
  if (!parsed.ok()) {
    err << base::usage_error_line(kCommand, parsed.error());
    return kExitUsage;
  }
  if (parsed->help) {
    out << kExplainUsage;
    return kExitOk;
  }
  const bool json = parsed->has("json");
  Protocol proto = Protocol::tcp;
  for (const auto& o : parsed->options) {
    if (o.name == "udp") proto = Protocol::udp;
    if (o.name == "tcp") proto = Protocol::tcp;
    if (o.name == "icmp") proto = Protocol::icmp;
  }
  const auto& pos = parsed->positionals;
  if (pos.size() != 2) {
    err << base::usage_error_line(kCommand, "expected FILE and TARGET");
    return kExitUsage;
  }
  auto target = policy::ExplainTarget::parse(pos[1]);
  if (!target) {
    err << base::usage_error_line(kCommand, "cannot read target '" + pos[1] +
                                                "': expected NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or "
                                                "[IPV6]:PORT (port 1-65535)");
    return kExitUsage;
  }
  if (proto == Protocol::icmp && target->port) {
    err << base::usage_error_line(kCommand, "--icmp takes NAME or ADDRESS without a port (icmp has none)");
    return kExitUsage;
  }
  auto loaded = policy::load_policy(pos[0]);
  if (!loaded.ok()) {
    const auto& e = loaded.error();
    err << e.to_string();
    if (!e.unreadable) {
      err << kCommand << ": " << pos[0] << " is invalid (" << e.total << " problem"
          << (e.total == 1 ? "" : "s") << ")\n";
    }
    return kExitFailed;
  }
  const Policy& p = *loaded;
  policy::Explanation e = policy::explain(p, *target, proto);

  if (json) {
    std::string js;
    base::JsonWriter w(js);
    w.begin_object()
        .field("policy", pos[0])
        .field("target", target->text)
        .field("kind", target->address ? "address" : "name")
        .field("protocol", policy::to_string(proto));
    if (target->port) w.field("port", static_cast<unsigned>(*target->port));
    policy::write_explanation_fields(w, e);
    w.end_object();
    out << js << '\n';
  } else {
    std::string shown = target->text;
    if (target->port) shown += "/" + std::string(policy::to_string(proto));
    out << shown << ": " << policy::to_string(e.verdict) << ": " << e.reason << '\n';
    for (const auto& d : e.details) out << "  - " << d << '\n';
  }
  if (e.allowed()) return kExitOk;
  return e.verdict == policy::Verdict::answer_required ? kExitNeedsAnswer : kExitNo;
}

}  // namespace

int run_policy_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << base::usage_error_line("abox policy", "which command? check, explain, suggest or apply");
    return kExitUsage;
  }
  if (args[0] == "-h" || args[0] == "--help") {
    out << kPolicyUsage;
    return kExitOk;
  }
  if (args[0] == "check") return check(args.subspan(1), out, err);
  if (args[0] == "explain") return explain(args.subspan(1), out, err);
  if (args[0] == "suggest") return suggest(args.subspan(1), out, err);
  if (args[0] == "apply") return run_policy_apply(args.subspan(1), out, err);
  err << base::usage_error_line("abox policy", "unknown command '" + std::string(args[0]) + "'");
  return kExitUsage;
}

}  // namespace abox::engine
