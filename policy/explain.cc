#include "policy/explain.h"

#include <algorithm>

#include "base/decimal.h"

namespace abox::policy {

namespace {

std::string protocols_text(const AllowRule& r) {
  std::string s;
  for (const auto& [on, text] :
       {std::pair{r.tcp, "tcp"}, std::pair{r.udp, "udp"}, std::pair{r.icmp, "icmp"}}) {
    if (!on) continue;
    if (!s.empty()) s += "+";
    s += text;
  }
  return s.empty() ? "nothing" : s;
}

// What a flow question is about: "443/tcp", or "icmp echo" (no port).
std::string flow_text(std::uint16_t port, Protocol proto) {
  if (proto == Protocol::icmp) return "icmp echo";
  return std::to_string(port) + "/" + std::string(to_string(proto));
}

std::string ports_text(const AllowRule& r) {
  std::string s;
  for (const auto& p : r.ports) {
    if (!s.empty()) s += ",";
    s += p.to_string();
  }
  return s;
}

std::string names_text(const AllowRule& r) {
  std::string s;
  for (const auto& n : r.names) {
    if (!s.empty()) s += ", ";
    s += n.to_string();
  }
  return s;
}

std::string upstream_text(const Policy& p) {
  if (p.dns().use_system) return "the system's resolvers";
  std::string s;
  for (const auto& u : p.dns().upstreams) {
    if (!s.empty()) s += ", ";
    s += u.to_string();
  }
  return s;
}

std::string reserved_text(const ReservedRange& r) {
  return r.range.to_string() + " (" + std::string(r.name) + ", " + std::string(r.reference) + ")";
}

Explanation explain_address(const Policy& p, const IpAddress& a, std::optional<std::uint16_t> port,
                            Protocol proto) {
  Explanation e;
  auto v = p.check_address(a);
  e.reserved = v.reserved;
  e.lifted_by = v.lifted_by;
  if (v.refused()) {
    e.verdict = Verdict::refused;
    e.reason = "reserved range " + reserved_text(*v.reserved);
    e.details.push_back(
        "reserved addresses are refused whatever the names say, and removed from DNS answers");
    return e;
  }
  std::string lifted;
  if (v.reserved != nullptr) {
    lifted = "in reserved range " + v.reserved->range.to_string() + " (" + std::string(v.reserved->name) +
             "), lifted by [unsafe] allow_reserved " + v.lifted_by->to_string() + " at " +
             p.unsafe().where.to_string() + "; every use is logged";
  }
  // icmp (echo) has no port: asking about it is asking about a flow.
  if (!port && proto != Protocol::icmp) {
    e.verdict = Verdict::answer_required;
    e.reason =
        "a flow to this address is admitted only while the DNS gate holds an unexpired answer with it for an "
        "allowed name, on a port that name's rule allows";
    if (!lifted.empty()) e.details.push_back(lifted);
    e.details.push_back("direct connections to addresses no allowed name was answered with are refused");
    e.details.push_back("give ADDRESS:PORT to ask about a flow");
    return e;
  }

  const std::uint16_t port_or_0 = port.value_or(0);
  const std::string where = flow_text(port_or_0, proto);
  for (const auto& r : p.rules()) {
    if (r.allows(port_or_0, proto)) e.port_rules.push_back(&r);
  }
  if (proto == Protocol::tcp) {
    for (const auto& b : p.brokers()) {
      if (b.port == *port) e.port_brokers.push_back(&b);
    }
  }
  if (e.port_rules.empty() && e.port_brokers.empty()) {
    e.verdict = Verdict::refused;
    e.reason = "no rule allows " + where + " for any name, so no DNS answer can admit it";
    for (const auto& r : p.rules()) {
      e.details.push_back("rule at " + r.where.to_string() + " allows ports " + ports_text(r) + " " +
                          protocols_text(r) + " (" + names_text(r) + ")");
    }
    for (const auto& b : p.brokers()) {
      e.details.push_back("[[broker]] at " + b.where.to_string() + " takes port " + std::to_string(b.port) +
                          "/tcp (" + b.name + ")");
    }
    return e;
  }
  e.verdict = Verdict::answer_required;
  e.reason =
      "admitted on " + where +
      " only while the DNS gate holds an unexpired answer with this address for one of the names below";
  if (!lifted.empty()) e.details.push_back(lifted);
  for (const auto* r : e.port_rules) {
    e.details.push_back("[[allow]] at " + r->where.to_string() + ": " + names_text(*r));
  }
  for (const auto* b : e.port_brokers) {
    e.details.push_back("[[broker]] at " + b->where.to_string() + ": " + b->name + " (to the broker)");
  }
  e.details.push_back("direct connections to addresses no allowed name was answered with are refused");
  return e;
}

Explanation explain_name(const Policy& p, std::string_view written, std::optional<std::uint16_t> port,
                         Protocol proto) {
  Explanation e;
  auto name = CanonicalName::from(written);
  if (!name.ok()) {
    e.verdict = Verdict::refused;
    e.reason = "not a valid name: " + std::string(describe(name.error()));
    return e;
  }
  auto n = name->view();
  if (!p.allows_name(n)) {
    e.verdict = Verdict::refused;
    e.reason = "no [[allow]] or [[broker]] names it";
    e.details.push_back(std::string("the DNS gate answers it with ") +
                        (p.dns().denied == DeniedAnswer::nxdomain ? "NXDOMAIN" : "REFUSED") +
                        " and never asks upstream");
    return e;
  }
  e.details.push_back("the DNS gate resolves it through " + upstream_text(p) + ", TTL clamped to " +
                      std::to_string(p.dns().min_ttl) + ".." + std::to_string(p.dns().max_ttl) + " s");

  if (port && proto == Protocol::tcp) {
    if (const auto* b = p.broker_for(n, *port)) {
      e.broker = b;
      e.verdict = Verdict::brokered;
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

  if (!port && proto != Protocol::icmp) {
    e.verdict = Verdict::resolvable;
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

  const std::uint16_t port_or_0 = port.value_or(0);
  p.for_each_rule_matching(n, [&](const AllowRule& r, bool wildcard) {
    if (!r.allows(port_or_0, proto)) return false;
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
  std::string where = flow_text(port_or_0, proto);
  if (e.rule == nullptr) {
    e.verdict = Verdict::refused;
    e.reason = proto == Protocol::icmp ? "no rule for this name allows icmp (echo)"
                                       : "no rule for this name allows port " + where;
    p.for_each_rule_matching(n, [&](const AllowRule& r, bool) {
      e.details.push_back("rule at " + r.where.to_string() + " allows ports " + ports_text(r) + " " +
                          protocols_text(r));
      return false;
    });
    return e;
  }
  e.verdict = Verdict::allowed;
  e.reason = "[[allow]] at " + e.rule->where.to_string() + " (" + e.rule_pattern + ") allows " + where;
  if (proto == Protocol::icmp) {
    e.details.push_back("echo requests (ping) only, relayed through an unprivileged ping socket");
  }
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
  if (const auto& b = e.rule->budget) {
    std::string budget = "egress budget per " + std::to_string(b->per_s) + " s:";
    if (b->max_bytes_out) budget += " " + std::to_string(*b->max_bytes_out) + " bytes out";
    if (b->max_bytes_out && b->max_flows) budget += ",";
    if (b->max_flows) budget += " " + std::to_string(*b->max_flows) + " new flows";
    e.details.push_back(budget + " (past it new flows are refused; crossing the bytes cuts live ones)");
  }
  if (p.mode().audit) {
    e.details.push_back("[mode] audit = true: what this policy refuses is let through and logged would_deny");
  }
  return e;
}

}  // namespace

std::optional<ExplainTarget> ExplainTarget::parse(std::string_view s) {
  ExplainTarget t;
  t.text = std::string(s);
  if (auto a = IpAddress::parse(s)) {
    t.address = a;
    return t;
  }
  if (s.starts_with("[") || s.find(':') != s.rfind(':')) {
    auto ep = Endpoint::parse(s, 0);
    if (!ep || ep->port == 0) return std::nullopt;
    t.address = ep->address;
    t.port = ep->port;
    return t;
  }
  auto colon = s.find(':');
  std::string_view host = s.substr(0, colon);
  if (host.empty()) return std::nullopt;  // ":80" names nothing to explain
  if (colon != std::string_view::npos) {
    t.port = base::parse_port(s.substr(colon + 1));
    if (!t.port) return std::nullopt;
  }
  if (auto a = IpAddress::parse(host)) {
    t.address = a;
  } else {
    t.name = std::string(host);
  }
  return t;
}

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::allowed:
      return "allowed";
    case Verdict::brokered:
      return "brokered";
    case Verdict::resolvable:
      return "resolvable";
    case Verdict::answer_required:
      return "answer-required";
    case Verdict::refused:
      return "refused";
  }
  return "refused";
}

bool Explanation::allowed() const {
  return verdict == Verdict::allowed || verdict == Verdict::brokered || verdict == Verdict::resolvable;
}

Explanation explain(const Policy& policy, const ExplainTarget& target, Protocol protocol) {
  return target.address ? explain_address(policy, *target.address, target.port, protocol)
                        : explain_name(policy, target.name, target.port, protocol);
}

void write_explanation_fields(base::JsonWriter& w, const Explanation& e) {
  w.field("verdict", to_string(e.verdict)).field("allowed", e.allowed()).field("reason", e.reason);
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
  if (e.verdict == Verdict::answer_required && (!e.port_rules.empty() || !e.port_brokers.empty())) {
    // The names whose DNS answer with this address would admit the flow.
    w.key("needs_answer_for").begin_array();
    for (const auto* r : e.port_rules) {
      for (const auto& n : r->names) {
        w.begin_object()
            .field("name", n.to_string())
            .field("line", r->where.line)
            .field("column", r->where.column)
            .field("broker", false)
            .end_object();
      }
    }
    for (const auto* b : e.port_brokers) {
      w.begin_object()
          .field("name", b->name)
          .field("line", b->where.line)
          .field("column", b->where.column)
          .field("broker", true)
          .end_object();
    }
    w.end_array();
  }
  w.key("details").begin_array();
  for (const auto& d : e.details) w.value(d);
  w.end_array();
}

}  // namespace abox::policy
