#include "netstack/program/explain_command.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "base/control_client.h"
#include "base/json.h"
#include "netstack/program/stats_command.h"
#include "netstack/stack/admission.h"
#include "netstack/stack/guest_stack.h"
#include "policy/explain.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net explain [--json] [--udp|--icmp] SOCKET TARGET\n"
    "\n"
    "Asks the 'abox-net run' whose --stats-socket is SOCKET about TARGET now, as\n"
    "'cilium policy trace' does: TARGET is ADDRESS, ADDRESS:PORT, [IPV6]:PORT,\n"
    "NAME or NAME:PORT. For an address: the names the DNS gate answered it for\n"
    "and how long each answer has left, the rule or [[broker]] binding that\n"
    "would take a flow to it on PORT, and whether a new flow would be admitted\n"
    "at this moment. For a name: what the policy says (the answers are kept\n"
    "by address: ask about an address the name resolved to). The policy's own\n"
    "judgement, as 'abox policy explain' gives it, comes with both.\n"
    "\n"
    "Options:\n"
    "      --json   one JSON object on stdout\n"
    "  -u, --udp    ask about a UDP flow instead of TCP\n"
    "      --icmp   ask about echo (ping) to ADDRESS or NAME, given without a port\n"
    "\n"
    "Exit status: 0 a new flow would be admitted now (a name: the policy allows\n"
    "it), 1 it would be refused, 2 usage error, 3 no answer from SOCKET (nothing\n"
    "running there, not an 'abox-net run', no reply within 5 s).\n";

constexpr base::OptionSpec kOptions[] = {
    {"json", 'j', false}, {"udp", 'u', false}, {"tcp", 't', false}, {"icmp", 0, false}};

std::string seconds_text(std::int64_t ms) {
  return std::to_string((ms + 999) / 1000) + " s";
}

struct Answered {
  std::string name;
  std::int64_t expires_in_ms = 0;
};

}  // namespace

std::string answer_explain(const GuestStack& stack, std::string_view args_text, base::MonoTime now) {
  // ARGS: words separated by spaces, as the client sent them.
  std::vector<std::string> words;
  for (std::size_t i = 0; i < args_text.size();) {
    std::size_t end = args_text.find(' ', i);
    if (end == std::string_view::npos) end = args_text.size();
    if (end > i) words.emplace_back(args_text.substr(i, end - i));
    i = end + 1;
  }
  std::vector<std::string_view> views(words.begin(), words.end());
  auto parsed = base::parse_options(views, kOptions, false);
  if (!parsed.ok()) return "2\nabox-net explain: " + parsed.error();
  if (parsed->positionals.size() != 1) return "2\nabox-net explain: expected one TARGET";
  auto target = policy::ExplainTarget::parse(parsed->positionals[0]);
  if (!target) {
    return "2\nabox-net explain: cannot read target '" + parsed->positionals[0] +
           "': expected NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or [IPV6]:PORT (port 1-65535)";
  }
  const bool json = parsed->has("json");
  policy::Protocol proto = policy::Protocol::tcp;
  for (const auto& o : parsed->options) {
    if (o.name == "udp") proto = policy::Protocol::udp;
    if (o.name == "tcp") proto = policy::Protocol::tcp;
    if (o.name == "icmp") proto = policy::Protocol::icmp;
  }
  const bool icmp = proto == policy::Protocol::icmp;
  if (icmp && target->port) return "2\nabox-net explain: --icmp takes ADDRESS or NAME without a port";
  const policy::Policy& pol = stack.policy();
  const dns::AnswerTable& table = stack.table();
  const policy::Explanation pe = policy::explain(pol, *target, proto);
  const std::string shown =
      target->text + (target->port || icmp ? "/" + std::string(policy::to_string(proto)) : std::string());

  std::vector<Answered> answered;
  bool admitted = false;
  std::string reason;
  std::optional<Admission> admission;
  if (target->address) {
    for (const auto& n : table.names_for(*target->address, now)) {
      answered.push_back(
          {std::string(n.name), std::chrono::duration_cast<base::Millis>(n.expires - now).count()});
    }
    if (target->port || icmp) {
      const std::uint16_t port = target->port.value_or(0);  // echo has none
      admission = admit_flow(pol, stack.host_addresses(), table, *target->address, port, proto, now);
      admitted = admission->admitted();
      if (admitted && admission->broker != nullptr && stack.config().broker_path.empty()) {
        admitted = false;
        reason = "brokered name " + std::string(admission->name) + ", but no broker is attached (--broker)";
      } else if (admitted) {
        reason = admission->broker != nullptr
                     ? "answered for " + std::string(admission->name) +
                           ", handed to the broker ([[broker]] at " + admission->broker->where.to_string() +
                           ")"
                     : "answered for " + std::string(admission->name) + ", [[allow]] at " +
                           admission->rule->where.to_string() + " allows " +
                           (icmp ? std::string("icmp echo")
                                 : std::to_string(port) + "/" + std::string(policy::to_string(proto)));
        if (admission->needs_name) reason += "; its TLS SNI or HTTP Host must then name an answered name";
      } else {
        reason = std::string(describe(*admission->refusal));
      }
    } else if (pe.verdict == policy::Verdict::refused) {
      reason = pe.reason;
    } else if (answered.empty()) {
      reason = "no unexpired answer for an allowed name holds this address";
    } else {
      admitted = true;
      reason =
          "answered for an allowed name: flows on the ports its rule allows are admitted (give ADDRESS:PORT)";
    }
  } else {
    admitted = pe.allowed();
    reason = "the policy's verdict: " + std::string(policy::to_string(pe.verdict)) +
             " (answers are kept by address: ask about an address this name resolved to)";
  }

  std::string body;
  if (json) {
    base::JsonWriter w(body);
    w.begin_object()
        .field("target", target->text)
        .field("kind", target->address ? "address" : "name")
        .field("protocol", policy::to_string(proto));
    if (target->port) w.field("port", static_cast<unsigned>(*target->port));
    w.field("admitted", admitted).field("reason", reason);
    if (target->address) {
      w.key("answers").begin_array();
      for (const auto& a : answered) {
        w.begin_object().field("name", a.name).field("expires_in_ms", a.expires_in_ms).end_object();
      }
      w.end_array();
    }
    if (admission && admission->admitted()) {
      w.field("name", admission->name);
      if (admission->rule != nullptr) {
        w.key("rule")
            .begin_object()
            .field("line", admission->rule->where.line)
            .field("column", admission->rule->where.column)
            .end_object();
      }
      w.field("brokered", admission->broker != nullptr).field("name_check", admission->needs_name);
    }
    w.key("policy").begin_object();
    policy::write_explanation_fields(w, pe);
    w.end_object().end_object();
  } else {
    body = shown + ": " + (admitted ? "admitted now" : "refused now") + ": " + reason + "\n";
    if (target->address) {
      body += "  - answers holding " + target->address->to_string() + ": ";
      if (answered.empty()) body += "none";
      for (std::size_t i = 0; i < answered.size(); ++i) {
        body +=
            (i ? ", " : "") + answered[i].name + " (" +
            (answered[i].expires_in_ms > 0 ? seconds_text(answered[i].expires_in_ms) + " left" : "expired") +
            ")";
      }
      body += "\n";
    }
    body += "  - policy: " + std::string(policy::to_string(pe.verdict)) + ": " + pe.reason + "\n";
    for (const auto& d : pe.details) body += "    - " + d + "\n";
    if (!body.empty() && body.back() == '\n') body.pop_back();
  }
  return std::string(admitted ? "0" : "1") + "\n" + body;
}

int run_explain_command(std::span<const std::string_view> args) {
  constexpr std::string_view kCommand = "abox-net explain";
  auto parsed = base::start_command(kCommand, kUsage, args, kOptions, std::cout, std::cerr);
  if (!parsed.ok()) return parsed.error();
  if (parsed->positionals.size() != 2) {
    std::cerr << base::usage_error_line(kCommand, "expected SOCKET and TARGET");
    return 2;
  }
  const std::string& socket = parsed->positionals[0];
  const std::string& target = parsed->positionals[1];
  const bool has_space =
      std::any_of(target.begin(), target.end(), [](char c) { return static_cast<unsigned char>(c) <= ' '; });
  if (has_space || !policy::ExplainTarget::parse(target)) {
    std::cerr << base::usage_error_line(kCommand, "cannot read target '" + target +
                                                      "': expected NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or "
                                                      "[IPV6]:PORT (port 1-65535)");
    return 2;
  }
  std::string request = "explain";
  if (parsed->has("json")) request += " --json";
  for (const auto& o : parsed->options) {
    if (o.name == "udp") request += " --udp";
    if (o.name == "tcp") request += " --tcp";
    if (o.name == "icmp") request += " --icmp";
  }
  request += " " + target;
  std::string error;
  auto reply = base::ask_control_socket(socket, request, {}, error);
  if (!reply) {
    std::cerr << kCommand << ": " << error << '\n';
    return 3;
  }
  while (!reply->empty() && (reply->back() == '\n' || reply->back() == '\r')) reply->pop_back();
  // "STATUS\nBODY" from an `abox-net run`; {"error": ...} from anything else
  // that speaks the protocol (an `abox-net dns`).
  if (reply->size() < 2 || (*reply)[1] != '\n' ||
      ((*reply)[0] != '0' && (*reply)[0] != '1' && (*reply)[0] != '2')) {
    std::cerr << kCommand << ": " << socket
              << " did not answer with an explanation: " << reply->substr(0, 300) << '\n';
    return 3;
  }
  const int status = (*reply)[0] - '0';
  (status == 2 ? std::cerr : std::cout) << reply->substr(2) << '\n';
  return status;
}

}  // namespace abox::netstack
