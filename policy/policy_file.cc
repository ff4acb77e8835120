// How a policy file is read.
//
// toml++ parses the text; this file walks the resulting tree once, section by
// section, and checks every key against what that section may hold. Each
// problem becomes a diagnostic at the key's or value's own line and column,
// and the walk goes on so that one run reports every mistake (up to a cap).
// Only when there are none is the Policy assembled and returned. TOML types
// never leave this file.
#include "policy/policy_file.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "base/decimal.h"
#include "base/whole_file.h"
#include "policy/toml.h"

namespace abox::policy {

std::string PolicyDiagnostic::to_string() const {
  if (line == 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string PolicyError::to_string() const {
  std::string out;
  for (const auto& d : diagnostics) {
    out += d.to_string();
    out += '\n';
  }
  if (omitted() > 0 && !diagnostics.empty()) {
    out += diagnostics.front().file + ": " + std::to_string(omitted()) + " more problem" +
           (omitted() == 1 ? "" : "s") + " not listed (only the first " + std::to_string(diagnostics.size()) +
           " are)\n";
  }
  return out;
}

// Assembles a Policy; the only code allowed to write one (friend of Policy).
class PolicyBuilder {
 public:
  static Policy build(std::string source, std::vector<AllowRule> rules, std::vector<BrokerBinding> brokers,
                      DnsSettings dns, Limits limits, Timeouts timeouts, Unsafe unsafe, Mode mode) {
    Policy p;
    p.source_ = std::move(source);
    p.rules_ = std::move(rules);
    p.brokers_ = std::move(brokers);
    p.dns_ = std::move(dns);
    p.limits_ = limits;
    p.timeouts_ = timeouts;
    p.unsafe_ = std::move(unsafe);
    p.mode_ = std::move(mode);
    for (const auto& r : p.rules_)
      for (const auto& n : r.names) p.matcher_.add(n, static_cast<std::uint32_t>(r.index));
    for (const auto& b : p.brokers_)
      p.matcher_.add(NamePattern{b.name, false}, Policy::kBrokerBit | static_cast<std::uint32_t>(b.index));
    return p;
  }
};

namespace {

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// Collects diagnostics for one file.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  void error(const toml::source_region& where, std::string message) {
    add(static_cast<std::uint32_t>(where.begin.line), static_cast<std::uint32_t>(where.begin.column),
        std::move(message));
  }
  void error(const toml::node& n, std::string message) { error(n.source(), std::move(message)); }
  // A problem of the file as a whole: no line, no column.
  void file_error(std::string message) { add(0, 0, std::move(message)); }

  SourceLocation location(const toml::source_region& where) const {
    return SourceLocation{source_, static_cast<std::uint32_t>(where.begin.line),
                          static_cast<std::uint32_t>(where.begin.column)};
  }

  bool failed() const { return total_ != 0; }
  // In file order, whatever order the checks ran in (toml++ walks keys
  // sorted); file-level problems first. The first kMaxPolicyDiagnostics
  // found are kept, the rest only counted.
  PolicyError take() {
    std::stable_sort(diags_.begin(), diags_.end(), [](const PolicyDiagnostic& a, const PolicyDiagnostic& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    return PolicyError{std::move(diags_), total_, false};
  }
  const std::string& source() const { return source_; }

 private:
  void add(std::uint32_t line, std::uint32_t column, std::string message) {
    ++total_;
    if (diags_.size() >= kMaxPolicyDiagnostics) return;
    diags_.push_back(PolicyDiagnostic{source_, line, column, std::move(message)});
  }

  std::string source_;
  std::vector<PolicyDiagnostic> diags_;
  std::size_t total_ = 0;
};

// A table's keys checked against the ones a section knows. Each handler
// reads its value; keys with no handler are errors naming the known keys.
class Section {
 public:
  using Handler = std::function<void(const toml::node&)>;
  Section(Reader& r, std::string name) : r_(r), name_(std::move(name)) {}

  Section& on(std::string key, Handler h) {
    handlers_.emplace(std::move(key), std::move(h));
    return *this;
  }

  // Runs the handlers for the keys present; reports unknown keys.
  void read(const toml::table& t) {
    for (auto&& [k, v] : t) {
      auto it = handlers_.find(std::string(k.str()));
      if (it == handlers_.end()) {
        r_.error(k.source(), "unknown key '" + std::string(k.str()) + "' in " + name_ +
                                 " (expected one of: " + known_keys() + ")");
        continue;
      }
      seen_.insert(it->first);
      it->second(v);
    }
  }
  bool has(const std::string& key) const { return seen_.count(key) != 0; }

 private:
  std::string known_keys() const {
    std::string out;
    for (const auto& [k, _] : handlers_) {
      if (!out.empty()) out += ", ";
      out += k;
    }
    return out;
  }

  Reader& r_;
  std::string name_;
  std::map<std::string, Handler> handlers_;
  std::set<std::string> seen_;
};

// Typed value readers: each reports a mistake at the value and returns
// nullopt, so callers keep their defaults and the walk goes on.
// "8443" for a string that holds a plain decimal number (a common slip:
// quoting a number), else nullopt.
std::optional<std::string> quoted_number(const toml::node& n) {
  const auto* s = n.as_string();
  if (s == nullptr) return std::nullopt;
  const std::string& t = s->get();
  if (t.empty() || t.size() > 18) return std::nullopt;
  if (!std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return t;
}

std::optional<std::int64_t> read_int(Reader& r, const toml::node& n, std::string_view what, std::int64_t lo,
                                     std::int64_t hi) {
  const auto* v = n.as_integer();
  if (v == nullptr) {
    if (auto q = quoted_number(n)) {
      r.error(n, std::string(what) + ": write " + *q + " as an integer, without quotes");
      return std::nullopt;
    }
    r.error(n, std::string(what) + ": expected an integer, found " + std::string(type_name(n)));
    return std::nullopt;
  }
  std::int64_t x = v->get();
  if (x < lo || x > hi) {
    r.error(n, std::string(what) + ": expected an integer from " + std::to_string(lo) + " to " +
                   std::to_string(hi) + ", found " + std::to_string(x));
    return std::nullopt;
  }
  return x;
}

template <class T>
void read_uint_into(Reader& r, const toml::node& n, std::string_view what, std::int64_t lo, std::int64_t hi,
                    T& out) {
  if (auto v = read_int(r, n, what, lo, hi)) out = static_cast<T>(*v);
}

std::optional<bool> read_bool(Reader& r, const toml::node& n, std::string_view what) {
  const auto* v = n.as_boolean();
  if (v == nullptr) {
    r.error(n, std::string(what) + ": expected true or false, found " + std::string(type_name(n)));
    return std::nullopt;
  }
  return v->get();
}

std::optional<std::string> read_string(Reader& r, const toml::node& n, std::string_view what) {
  const auto* v = n.as_string();
  if (v == nullptr) {
    r.error(n, std::string(what) + ": expected a string, found " + std::string(type_name(n)));
    return std::nullopt;
  }
  return v->get();
}

// A non-empty array; each element goes to fn. Returns false when n is not one.
bool read_array(Reader& r, const toml::node& n, std::string_view what,
                const std::function<void(const toml::node&)>& fn) {
  const auto* a = n.as_array();
  if (a == nullptr) {
    r.error(n, std::string(what) + ": expected an array, found " + std::string(type_name(n)));
    return false;
  }
  if (a->empty()) {
    r.error(n, std::string(what) + ": expected at least one element, found an empty array");
    return false;
  }
  for (const auto& e : *a) fn(e);
  return true;
}

const toml::table* expect_table(Reader& r, const toml::node& n, std::string_view what) {
  const auto* t = n.as_table();
  if (t == nullptr) r.error(n, std::string(what) + ": expected a table, found " + std::string(type_name(n)));
  return t;
}

// "443" as an integer, or "8000-8100" as a string.
std::optional<PortRange> read_port_range(Reader& r, const toml::node& n) {
  if (n.is_integer()) {
    auto p = read_int(r, n, "port", 1, 65535);
    if (!p) return std::nullopt;
    return PortRange{static_cast<std::uint16_t>(*p), static_cast<std::uint16_t>(*p)};
  }
  const auto* s = n.as_string();
  if (s == nullptr) {
    r.error(n, "port: expected an integer or a \"first-last\" string, found " + std::string(type_name(n)));
    return std::nullopt;
  }
  const std::string& text = s->get();
  if (auto q = quoted_number(n)) {
    r.error(n, "port \"" + text + "\": write " + *q + " as an integer (ports = [" + *q +
                   "]); a string is only for a range such as \"8000-8100\"");
    return std::nullopt;
  }
  if (text.ends_with("/tcp") || text.ends_with("/udp")) {
    r.error(n, "port \"" + text + "\": write the port as an integer and the protocol in protocols = [\"" +
                   text.substr(text.size() - 3) + "\"]");
    return std::nullopt;
  }
  auto dash = text.find('-');
  auto parse_num = [](std::string_view d) { return base::parse_decimal<std::uint32_t>(d); };
  std::optional<std::uint32_t> lo;
  std::optional<std::uint32_t> hi;
  if (dash != std::string::npos) {
    lo = parse_num(std::string_view(text).substr(0, dash));
    hi = parse_num(std::string_view(text).substr(dash + 1));
  }
  if (!lo || !hi || *lo < 1 || *hi > 65535 || *lo > *hi) {
    r.error(n,
            "port range: expected \"first-last\" with 1 <= first <= last <= 65535, found \"" + text + "\"");
    return std::nullopt;
  }
  return PortRange{static_cast<std::uint16_t>(*lo), static_cast<std::uint16_t>(*hi)};
}

bool ranges_overlap(const PortRange& a, const PortRange& b) {
  return a.first <= b.last && b.first <= a.last;
}

constexpr std::string_view kAddressIsNotAName =
    "an IP address is not a name: the DNS gate never answers it, so it would match nothing. Addresses are "
    "admitted only through the DNS gate's answers for an allowed name: name the host instead";

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "host" from "host", "host:443", "[v6]" or "[v6]:443"; the port text
// after the colon, when there is one.
std::pair<std::string_view, std::string_view> split_host_port(std::string_view text) {
  if (text.starts_with("[")) {
    auto close = text.find(']');
    if (close == std::string_view::npos) return {text, {}};
    std::string_view rest = text.substr(close + 1);
    return {text.substr(1, close - 1), rest.starts_with(":") ? rest.substr(1) : std::string_view{}};
  }
  auto colon = text.find(':');
  if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos)
    return {text, {}};
  return {text.substr(0, colon), text.substr(colon + 1)};
}

// What a name that is really an address, a URL or host:port should have
// been; nullopt when it looks like an attempt at a plain name (whose own
// problems NamePattern::parse names).
std::optional<std::string> name_hint(std::string_view text) {
  std::string_view rest = text;
  const bool url = rest.find("://") != std::string_view::npos;
  if (url) {
    rest = rest.substr(rest.find("://") + 3);
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (auto at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
  }
  auto [host, port] = split_host_port(rest);
  if (IpAddress::parse(host)) return std::string(kAddressIsNotAName);
  if (url) {
    return "names hold host names, not URLs: write \"" + std::string(host) + "\"" +
           (all_digits(port) ? " and put " + std::string(port) + " in ports" : " (its port goes in ports)");
  }
  if (all_digits(port)) {
    return "names hold host names without a port: write \"" + std::string(host) + "\" and put " +
           std::string(port) + " in ports";
  }
  if (auto slash = text.find('/'); slash != std::string_view::npos && slash > 0) {
    return "names hold host names, not paths: write \"" + std::string(text.substr(0, slash)) + "\"";
  }
  return std::nullopt;
}

std::optional<NamePattern> read_name_pattern(Reader& r, const toml::node& n, bool allow_wildcard) {
  auto s = read_string(r, n, "name");
  if (!s) return std::nullopt;
  if (auto hint = name_hint(*s)) {
    r.error(n, "name \"" + *s + "\": " + *hint);
    return std::nullopt;
  }
  auto p = NamePattern::parse(*s);
  if (!p.ok()) {
    r.error(n, "name \"" + *s + "\": " + std::string(describe(p.error())));
    return std::nullopt;
  }
  if (p->wildcard && !allow_wildcard) {
    r.error(n, "name \"" + *s + "\": a broker binding names one exact host, not a wildcard");
    return std::nullopt;
  }
  return std::move(p).value();
}

bool is_http_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

struct Parsed {
  std::vector<AllowRule> rules;
  std::vector<BrokerBinding> brokers;
  DnsSettings dns;
  Limits limits;
  Timeouts timeouts;
  Unsafe unsafe;
  Mode mode;
};

void read_dns(Reader& r, const toml::table& t, DnsSettings& dns) {
  bool system_seen = false;
  std::size_t endpoints = 0;
  Section(r, "[dns]")
      .on("upstreams",
          [&](const toml::node& n) {
            read_array(r, n, "upstreams", [&](const toml::node& e) {
              auto s = read_string(r, e, "upstream");
              if (!s) return;
              if (*s == "system") {
                if (system_seen) r.error(e, "upstream \"system\" is listed twice");
                system_seen = true;
                return;
              }
              auto ep = Endpoint::parse(*s, 53);
              if (!ep) {
                r.error(e, "upstream \"" + *s +
                               "\": expected \"system\" or an address with an optional port, such as "
                               "\"192.0.2.53\", \"192.0.2.53:5353\" or \"[2001:db8::53]:53\"");
                return;
              }
              if (std::find(dns.upstreams.begin(), dns.upstreams.end(), *ep) != dns.upstreams.end()) {
                r.error(e, "upstream \"" + *s + "\" is listed twice");
                return;
              }
              dns.upstreams.push_back(*ep);
              ++endpoints;
            });
            if (system_seen && endpoints > 0)
              r.error(n, "upstreams: \"system\" cannot be mixed with addresses; use one or the other");
          })
      .on("min_ttl", [&](const toml::node& n) { read_uint_into(r, n, "min_ttl", 0, 86400, dns.min_ttl); })
      .on("max_ttl", [&](const toml::node& n) { read_uint_into(r, n, "max_ttl", 1, 604800, dns.max_ttl); })
      .on("grace", [&](const toml::node& n) { read_uint_into(r, n, "grace", 0, 86400, dns.grace); })
      .on("timeout_ms",
          [&](const toml::node& n) { read_uint_into(r, n, "timeout_ms", 50, 60000, dns.timeout_ms); })
      .on("attempts", [&](const toml::node& n) { read_uint_into(r, n, "attempts", 1, 5, dns.attempts); })
      .on("denied",
          [&](const toml::node& n) {
            auto s = read_string(r, n, "denied");
            if (!s) return;
            if (*s == "refused") {
              dns.denied = DeniedAnswer::refused;
            } else if (*s == "nxdomain") {
              dns.denied = DeniedAnswer::nxdomain;
            } else {
              r.error(n, "denied: expected \"refused\" or \"nxdomain\", found \"" + *s + "\"");
            }
          })
      .read(t);
  dns.use_system = endpoints == 0;
  if (dns.min_ttl > dns.max_ttl) {
    r.error(t.source(), "[dns]: min_ttl (" + std::to_string(dns.min_ttl) + ") is greater than max_ttl (" +
                            std::to_string(dns.max_ttl) + ")");
  }
}

void read_allow(Reader& r, const toml::table& t, std::size_t index, std::vector<AllowRule>& rules) {
  AllowRule rule;
  rule.index = index;
  rule.where = r.location(t.source());
  std::vector<std::string> protocols;
  std::uint32_t per_s = 0;  // `per`, when given
  Section s(r, "[[allow]]");
  s.on("names",
       [&](const toml::node& n) {
         read_array(r, n, "names", [&](const toml::node& e) {
           auto p = read_name_pattern(r, e, true);
           if (!p) return;
           if (std::find(rule.names.begin(), rule.names.end(), *p) != rule.names.end()) {
             r.error(e, "name \"" + p->to_string() + "\" is listed twice in this rule");
             return;
           }
           rule.names.push_back(std::move(*p));
         });
       })
      .on("ports",
          [&](const toml::node& n) {
            read_array(r, n, "ports", [&](const toml::node& e) {
              auto pr = read_port_range(r, e);
              if (!pr) return;
              for (const auto& other : rule.ports) {
                if (ranges_overlap(other, *pr)) {
                  r.error(e, "port " + pr->to_string() + " overlaps port " + other.to_string() +
                                 " already listed in this rule");
                  return;
                }
              }
              rule.ports.push_back(*pr);
            });
          })
      .on("protocols",
          [&](const toml::node& n) {
            rule.tcp = false;
            rule.udp = false;
            rule.icmp = false;
            read_array(r, n, "protocols", [&](const toml::node& e) {
              auto p = read_string(r, e, "protocol");
              if (!p) return;
              bool* slot = *p == "tcp"    ? &rule.tcp
                           : *p == "udp"  ? &rule.udp
                           : *p == "icmp" ? &rule.icmp
                                          : nullptr;
              if (slot == nullptr) {
                r.error(e, "protocol: expected \"tcp\", \"udp\" or \"icmp\", found \"" + *p + "\"");
              } else if (*slot) {
                r.error(e, "protocol \"" + *p + "\" is listed twice");
              } else {
                *slot = true;
              }
            });
          })
      .on("verify_name",
          [&](const toml::node& n) {
            if (auto b = read_bool(r, n, "verify_name")) rule.verify_name = *b;
          })
      .on("max_bytes_out",
          [&](const toml::node& n) {
            if (auto v = read_int(r, n, "max_bytes_out", 1, std::int64_t{1} << 50)) {
              if (!rule.budget) rule.budget.emplace();
              rule.budget->max_bytes_out = static_cast<std::uint64_t>(*v);
            }
          })
      .on("max_flows",
          [&](const toml::node& n) {
            if (auto v = read_int(r, n, "max_flows", 1, 1'000'000'000)) {
              if (!rule.budget) rule.budget.emplace();
              rule.budget->max_flows = static_cast<std::uint32_t>(*v);
            }
          })
      .on("per", [&](const toml::node& n) {
        auto text = read_string(r, n, "per");
        if (!text) return;
        // N followed by s, m, h or d; 1 s to 30 days.
        std::uint64_t v = 0;
        std::size_t i = 0;
        while (i < text->size() && i < 9 && (*text)[i] >= '0' && (*text)[i] <= '9')
          v = v * 10 + ((*text)[i++] - '0');
        const std::string unit = text->substr(i);
        const std::uint64_t mult = unit == "s"   ? 1
                                   : unit == "m" ? 60
                                   : unit == "h" ? 3600
                                   : unit == "d" ? 86400
                                                 : 0;
        if (i == 0 || mult == 0 || v * mult < 1 || v * mult > 30ull * 86400) {
          r.error(n,
                  "per: expected a duration such as \"30s\", \"10m\", \"1h\" or \"1d\" (1 s to 30 days), "
                  "found \"" +
                      *text + "\"");
          return;
        }
        per_s = static_cast<std::uint32_t>(v * mult);
      });
  s.read(t);
  if (per_s != 0) {
    if (!rule.budget) {
      r.error(t.source(), "[[allow]]: per needs max_bytes_out or max_flows (the budget it is the window of)");
    } else {
      rule.budget->per_s = per_s;
    }
  }
  if (!s.has("names")) r.error(t.source(), "[[allow]]: missing key 'names' (the names this rule allows)");
  // icmp (echo) has no ports: a rule that allows only icmp needs none, and
  // ports there would say something the rule does not do.
  const bool icmp_only = rule.icmp && !rule.tcp && !rule.udp;
  if (icmp_only && s.has("ports")) {
    r.error(t.source(),
            "[[allow]]: ports apply to tcp and udp, and this rule allows only icmp (echo, which "
            "has no ports); remove ports or add \"tcp\" or \"udp\" to protocols");
  }
  if (!s.has("ports") && !icmp_only) {
    r.error(t.source(),
            "[[allow]]: missing key 'ports' (for example ports = [443]); no port is allowed by default");
  }
  if (rule.verify_name == true && !rule.tcp) {
    r.error(t.source(), "[[allow]]: verify_name = true needs tcp: names are read from TLS and HTTP");
  }
  rules.push_back(std::move(rule));
}

void read_broker(Reader& r, const toml::table& t, std::size_t index, std::vector<BrokerBinding>& out) {
  BrokerBinding b;
  b.index = index;
  b.where = r.location(t.source());
  bool methods_seen = false;
  bool paths_seen = false;
  Section s(r, "[[broker]]");
  s.on("name",
       [&](const toml::node& n) {
         if (auto p = read_name_pattern(r, n, false)) b.name = p->base;
       })
      .on("port", [&](const toml::node& n) { read_uint_into(r, n, "port", 1, 65535, b.port); })
      .on("credential",
          [&](const toml::node& n) {
            auto v = read_string(r, n, "credential");
            if (!v) return;
            if (!valid_credential_name(*v)) {
              r.error(n, "credential \"" + *v + "\": expected 1 to 128 letters, digits, '-', '_' or '.'");
              return;
            }
            b.credential = *v;
          })
      .on("header",
          [&](const toml::node& n) {
            auto v = read_string(r, n, "header");
            if (!v) return;
            if (!is_http_token(*v)) {
              r.error(n, "header \"" + *v +
                             "\": expected an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)");
              return;
            }
            std::string h = lower(*v);
            static const std::set<std::string, std::less<>> kFramingHeaders = {
                "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"};
            if (kFramingHeaders.count(h) != 0) {
              r.error(n, "header \"" + *v +
                             "\": the key cannot go into a header that frames or routes the request");
              return;
            }
            b.header = h;
          })
      .on("nonce_env",
          [&](const toml::node& n) {
            auto v = read_string(r, n, "nonce_env");
            if (!v) return;
            bool ok = !v->empty() && v->size() <= 128 && !((*v)[0] >= '0' && (*v)[0] <= '9') &&
                      std::all_of(v->begin(), v->end(), [](char c) {
                        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                               c == '_';
                      });
            if (!ok) {
              r.error(n,
                      "nonce_env \"" + *v +
                          "\": expected an environment variable name (letters, digits and '_', not starting "
                          "with a digit)");
              return;
            }
            b.nonce_env = *v;
          })
      .on("methods",
          [&](const toml::node& n) {
            methods_seen = true;
            read_array(r, n, "methods", [&](const toml::node& e) {
              auto v = read_string(r, e, "method");
              if (!v) return;
              static const std::set<std::string, std::less<>> kMethods = {"GET",   "HEAD",   "POST",   "PUT",
                                                                          "PATCH", "DELETE", "OPTIONS"};
              if (kMethods.count(*v) == 0) {
                r.error(e,
                        "method \"" + *v +
                            "\": expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (upper case; "
                            "CONNECT and TRACE are never brokered)");
                return;
              }
              if (std::find(b.methods.begin(), b.methods.end(), *v) != b.methods.end()) {
                r.error(e, "method \"" + *v + "\" is listed twice");
                return;
              }
              b.methods.push_back(*v);
            });
          })
      .on("paths",
          [&](const toml::node& n) {
            paths_seen = true;
            read_array(r, n, "paths", [&](const toml::node& e) {
              auto v = read_string(r, e, "path");
              if (!v) return;
              bool printable = std::all_of(v->begin(), v->end(), [](char c) {
                return c > 0x20 && c < 0x7F && c != '?' && c != '#' && c != '%' && c != '\\';
              });
              bool dot_segment = v->find("/../") != std::string::npos ||
                                 v->find("/./") != std::string::npos || v->ends_with("/..") ||
                                 v->ends_with("/.");
              if (v->empty() || (*v)[0] != '/' || !printable || dot_segment) {
                r.error(
                    e, "path \"" + *v +
                           "\": expected a path prefix starting with '/', printable ASCII, without '?', '#', "
                           "'%', '\\' or dot segments");
                return;
              }
              if (std::find(b.path_prefixes.begin(), b.path_prefixes.end(), *v) != b.path_prefixes.end()) {
                r.error(e, "path \"" + *v + "\" is listed twice");
                return;
              }
              b.path_prefixes.push_back(*v);
            });
          })
      .on("allow_upgrade",
          [&](const toml::node& n) {
            if (auto v = read_bool(r, n, "allow_upgrade")) b.allow_upgrade = *v;
          })
      .on("backoff", [&](const toml::node& n) {
        if (auto v = read_bool(r, n, "backoff")) b.backoff = *v;
      });
  s.read(t);
  for (const char* key : {"name", "credential", "header", "nonce_env"}) {
    if (!s.has(key)) r.error(t.source(), std::string("[[broker]]: missing key '") + key + "'");
  }
  if (!methods_seen) b.methods = {"GET", "POST"};
  if (!paths_seen) b.path_prefixes = {"/"};
  out.push_back(std::move(b));
}

void read_limits(Reader& r, const toml::table& t, Limits& l) {
  Section(r, "[limits]")
      .on("flows", [&](const toml::node& n) { read_uint_into(r, n, "flows", 1, 1'000'000, l.flows); })
      .on("half_open",
          [&](const toml::node& n) { read_uint_into(r, n, "half_open", 1, 1'000'000, l.half_open); })
      .on("flow_buffer_bytes",
          [&](const toml::node& n) {
            read_uint_into(r, n, "flow_buffer_bytes", 4096, 64 << 20, l.flow_buffer_bytes);
          })
      .on("dns_in_flight",
          [&](const toml::node& n) { read_uint_into(r, n, "dns_in_flight", 1, 65536, l.dns_in_flight); })
      .on("answer_entries",
          [&](const toml::node& n) {
            read_uint_into(r, n, "answer_entries", 16, 1'000'000, l.answer_entries);
          })
      .on("peek_bytes",
          [&](const toml::node& n) { read_uint_into(r, n, "peek_bytes", 512, 65536, l.peek_bytes); })
      .on("http_head_bytes",
          [&](const toml::node& n) {
            read_uint_into(r, n, "http_head_bytes", 1024, 1 << 20, l.http_head_bytes);
          })
      .on("http_body_bytes",
          [&](const toml::node& n) {
            read_uint_into(r, n, "http_body_bytes", 0, std::int64_t{1} << 32, l.http_body_bytes);
          })
      .read(t);
  if (l.half_open > l.flows) {
    r.error(t.source(), "[limits]: half_open (" + std::to_string(l.half_open) + ") is greater than flows (" +
                            std::to_string(l.flows) + ")");
  }
}

void read_timeouts(Reader& r, const toml::table& t, Timeouts& to) {
  Section(r, "[timeouts]")
      .on("connect_ms",
          [&](const toml::node& n) { read_uint_into(r, n, "connect_ms", 100, 120000, to.connect_ms); })
      .on("peek_ms", [&](const toml::node& n) { read_uint_into(r, n, "peek_ms", 100, 60000, to.peek_ms); })
      .on("tcp_idle_s",
          [&](const toml::node& n) { read_uint_into(r, n, "tcp_idle_s", 1, 86400, to.tcp_idle_s); })
      .on("udp_idle_s",
          [&](const toml::node& n) { read_uint_into(r, n, "udp_idle_s", 1, 3600, to.udp_idle_s); })
      .on("icmp_idle_s",
          [&](const toml::node& n) { read_uint_into(r, n, "icmp_idle_s", 1, 3600, to.icmp_idle_s); })
      .on("tls_handshake_ms",
          [&](const toml::node& n) {
            read_uint_into(r, n, "tls_handshake_ms", 100, 120000, to.tls_handshake_ms);
          })
      .on("http_head_ms",
          [&](const toml::node& n) { read_uint_into(r, n, "http_head_ms", 100, 600000, to.http_head_ms); })
      .on("http_body_ms",
          [&](const toml::node& n) { read_uint_into(r, n, "http_body_ms", 100, 3600000, to.http_body_ms); })
      .read(t);
}

void read_mode(Reader& r, const toml::table& t, Mode& m) {
  m.where = r.location(t.source());
  Section(r, "[mode]")
      .on("audit",
          [&](const toml::node& n) {
            if (auto v = read_bool(r, n, "audit")) m.audit = *v;
          })
      .read(t);
}

void read_unsafe(Reader& r, const toml::table& t, Unsafe& u) {
  u.where = r.location(t.source());
  Section(r, "[unsafe]")
      .on("allow_reserved",
          [&](const toml::node& n) {
            read_array(r, n, "allow_reserved", [&](const toml::node& e) {
              auto s = read_string(r, e, "allow_reserved");
              if (!s) return;
              auto c = Cidr::parse(*s);
              if (!c) {
                r.error(
                    e, "allow_reserved \"" + *s +
                           "\": expected a range such as \"127.0.0.0/8\" (no host bits set past the prefix)");
                return;
              }
              // A lift stays inside one reserved range, so that it can never
              // open ordinary addresses or several kinds of reserved space at once.
              const ReservedRange* home = find_reserved(c->base());
              bool inside_one = false;
              for (const auto& rr : reserved_ranges())
                if (rr.range.covers(*c)) inside_one = true;
              if (home == nullptr || !inside_one) {
                r.error(e, "allow_reserved \"" + *s + "\": expected a range inside one reserved range" +
                               (home ? " (it reaches past " + home->range.to_string() + ", " +
                                           std::string(home->name) + ")"
                                     : " (it is not reserved at all)"));
                return;
              }
              for (const auto& rr : reserved_ranges()) {
                if (rr.never_lifted && c->covers(rr.range)) {
                  r.error(e, "allow_reserved \"" + *s + "\": it would open " + rr.range.to_string() + " (" +
                                 std::string(rr.name) + "), which is never allowed");
                  return;
                }
              }
              if (std::find(u.allow_reserved.begin(), u.allow_reserved.end(), *c) != u.allow_reserved.end()) {
                r.error(e, "allow_reserved \"" + *s + "\" is listed twice");
                return;
              }
              u.allow_reserved.push_back(*c);
            });
          })
      .read(t);
}

// Rules against each other: one (name, port, protocol) is granted once, and
// a name that is brokered on a port is not also allowed directly there.
void check_overlaps(Reader& r, const Parsed& p) {
  struct Grant {
    const AllowRule* rule;
    PortRange ports;
  };
  std::map<std::string, std::vector<Grant>> by_name;     // key: pattern text
  std::map<std::string, const AllowRule*> icmp_by_name;  // echo has no ports: granted once per name
  for (const auto& rule : p.rules) {
    for (const auto& name : rule.names) {
      if (rule.icmp) {
        auto [it, fresh] = icmp_by_name.emplace(name.to_string(), &rule);
        if (!fresh) {
          r.error(toml::source_region{{rule.where.line, rule.where.column}, {}, nullptr},
                  "[[allow]]: \"" + name.to_string() + "\" icmp is already allowed by the rule at " +
                      it->second->where.to_string());
        }
      }
      auto& grants = by_name[name.to_string()];
      for (const auto& g : grants) {
        bool same_proto = (g.rule->tcp && rule.tcp) || (g.rule->udp && rule.udp);
        if (!same_proto) continue;
        for (const auto& pr : rule.ports) {
          if (ranges_overlap(g.ports, pr)) {
            r.error(toml::source_region{{rule.where.line, rule.where.column}, {}, nullptr},
                    "[[allow]]: \"" + name.to_string() + "\" on port " + pr.to_string() +
                        " is already allowed by the rule at " + g.rule->where.to_string());
            goto next_name;
          }
        }
      }
      for (const auto& pr : rule.ports) grants.push_back(Grant{&rule, pr});
    next_name:;
    }
  }
  for (std::size_t i = 0; i < p.brokers.size(); ++i) {
    const auto& b = p.brokers[i];
    if (b.name.empty()) continue;
    toml::source_region where{{b.where.line, b.where.column}, {}, nullptr};
    for (std::size_t j = 0; j < i; ++j) {
      if (p.brokers[j].name == b.name && p.brokers[j].port == b.port) {
        r.error(where, "[[broker]]: \"" + b.name + "\" port " + std::to_string(b.port) +
                           " already has a binding at " + p.brokers[j].where.to_string());
      }
      if (!b.nonce_env.empty() && p.brokers[j].nonce_env == b.nonce_env) {
        r.error(where, "[[broker]]: nonce_env \"" + b.nonce_env + "\" is already used by the binding at " +
                           p.brokers[j].where.to_string());
      }
    }
    auto it = by_name.find(b.name);
    if (it == by_name.end()) continue;
    for (const auto& g : it->second) {
      if (g.rule->tcp && g.ports.contains(b.port)) {
        r.error(where, "[[broker]]: \"" + b.name + "\" port " + std::to_string(b.port) +
                           " is also allowed directly by the rule at " + g.rule->where.to_string() +
                           "; a flow is either brokered or direct, remove one");
        break;
      }
    }
  }
}

// TOML allows non-ASCII text only inside strings and comments. A non-ASCII
// byte anywhere else (after a leading UTF-8 byte order mark) is refused
// here with a plain message, before toml++ reports it in its own terms;
// inside a string a name gets its own, better error. A rough lexer: it
// knows comments and the four kinds of strings, nothing else, so what it
// takes for a string may still be bad TOML (toml++ then says why). Returns
// the 1-based line and column (in bytes) of the first such byte.
std::optional<std::pair<std::size_t, std::size_t>> stray_non_ascii(std::string_view text) {
  enum class In : std::uint8_t { code, comment, basic, literal, ml_basic, ml_literal };
  In in = In::code;
  std::size_t line = 1;
  std::size_t line_start = 0;
  std::size_t i = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  auto at = [&](std::size_t k, std::string_view what) { return text.substr(k, what.size()) == what; };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      if (in == In::comment || in == In::basic || in == In::literal)
        in = In::code;  // unterminated: toml++ says so
      ++i;
      continue;
    }
    switch (in) {
      case In::code:
        if (static_cast<unsigned char>(c) >= 0x80) return std::pair{line, i - line_start + 1};
        if (c == '#') {
          in = In::comment;
        } else if (at(i, "\"\"\"")) {
          in = In::ml_basic;
          i += 2;
        } else if (c == '"') {
          in = In::basic;
        } else if (at(i, "'''")) {
          in = In::ml_literal;
          i += 2;
        } else if (c == '\'') {
          in = In::literal;
        }
        break;
      case In::comment:
        break;
      case In::basic:
      case In::ml_basic:
        if (c == '\\') {
          ++i;  // the escaped character (a newline after it is counted next time round)
          if (i < text.size() && text[i] == '\n') continue;
        } else if (in == In::basic && c == '"') {
          in = In::code;
        } else if (in == In::ml_basic && at(i, "\"\"\"")) {
          in = In::code;
          i += 2;
        }
        break;
      case In::literal:
        if (c == '\'') in = In::code;
        break;
      case In::ml_literal:
        if (at(i, "'''")) {
          in = In::code;
          i += 2;
        }
        break;
    }
    ++i;
  }
  return std::nullopt;
}

}  // namespace

base::Result<Policy, PolicyError> parse_policy(std::string_view text, std::string_view source) {
  Reader r(source);
  if (auto stray = stray_non_ascii(text)) {
    r.error(toml::source_region{{static_cast<toml::source_index>(stray->first),
                                 static_cast<toml::source_index>(stray->second)},
                                {},
                                nullptr},
            "a non-ASCII character outside a string or comment (write names as A-labels, \"xn--...\")");
    return base::Err{r.take()};
  }
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    r.error(e.source(), "TOML syntax: " + std::string(e.description()));
    return base::Err{r.take()};
  }

  Parsed p;
  std::size_t allow_count = 0;
  Section top(r, "the policy file");
  top.on("version",
         [&](const toml::node& n) {
           auto v = read_int(r, n, "version", 1, 1);
           (void)v;  // only version 1 exists; the check above is the point
         })
      .on("dns",
          [&](const toml::node& n) {
            if (const auto* t = expect_table(r, n, "[dns]")) read_dns(r, *t, p.dns);
          })
      .on("allow",
          [&](const toml::node& n) {
            const auto* a = n.as_array();
            if (a == nullptr || !a->is_array_of_tables()) {
              r.error(n, "allow: expected [[allow]] tables, found " + std::string(type_name(n)));
              return;
            }
            for (const auto& e : *a) read_allow(r, *e.as_table(), allow_count++, p.rules);
          })
      .on("broker",
          [&](const toml::node& n) {
            const auto* a = n.as_array();
            if (a == nullptr || !a->is_array_of_tables()) {
              r.error(n, "broker: expected [[broker]] tables, found " + std::string(type_name(n)));
              return;
            }
            std::size_t i = 0;
            for (const auto& e : *a) read_broker(r, *e.as_table(), i++, p.brokers);
          })
      .on("limits",
          [&](const toml::node& n) {
            if (const auto* t = expect_table(r, n, "[limits]")) read_limits(r, *t, p.limits);
          })
      .on("timeouts",
          [&](const toml::node& n) {
            if (const auto* t = expect_table(r, n, "[timeouts]")) read_timeouts(r, *t, p.timeouts);
          })
      .on("unsafe",
          [&](const toml::node& n) {
            if (const auto* t = expect_table(r, n, "[unsafe]")) read_unsafe(r, *t, p.unsafe);
          })
      .on("mode", [&](const toml::node& n) {
        if (const auto* t = expect_table(r, n, "[mode]")) read_mode(r, *t, p.mode);
      });
  top.read(root);

  // The rules against each other, whatever else is wrong: every problem in
  // one run. A rule with a broken field still has the parts that were
  // readable, and a conflict among those is a real one.
  check_overlaps(r, p);
  if (!top.has("allow") && !top.has("broker")) {
    r.file_error(
        "the policy allows nothing: add an [[allow]] or [[broker]] table (deny-all needs no policy file)");
  }
  if (r.failed()) return base::Err{r.take()};
  return PolicyBuilder::build(std::string(source), std::move(p.rules), std::move(p.brokers), std::move(p.dns),
                              p.limits, p.timeouts, std::move(p.unsafe), std::move(p.mode));
}

base::Result<Policy, PolicyError> load_policy(const std::filesystem::path& path) {
  auto fail = [&](std::string message) {
    return base::Err{PolicyError{{PolicyDiagnostic{path.string(), 0, 0, std::move(message)}}, 1, true}};
  };
  auto text = base::read_whole_file(path.string(), kMaxPolicyFileBytes);
  if (!text.ok()) {
    const base::WholeFileError& e = text.error();
    switch (e.kind) {
      case base::WholeFileError::Kind::kCannotOpen:
        return fail("cannot open the policy file: " + e.message);
      case base::WholeFileError::Kind::kTooLarge:
        return fail("the policy file is " + e.message);
      default:
        return fail("cannot read the policy file: " + e.message);
    }
  }
  return parse_policy(*text, path.string());
}

std::vector<PolicyDiagnostic> policy_warnings(const Policy& policy) {
  std::vector<PolicyDiagnostic> out;
  auto warn = [&](const SourceLocation& at, std::string message) {
    out.push_back(PolicyDiagnostic{at.file, at.line, at.column, std::move(message)});
  };
  if (policy.mode().audit) {
    warn(
        policy.mode().where,
        "warning: [mode] audit = true: nothing the policy would refuse is refused (each is logged "
        "would_deny) but reserved ranges and this host's addresses; for learning what a guest needs, not for "
        "production");
  }
  for (const auto& c : policy.unsafe().allow_reserved) {
    warn(policy.unsafe().where, "warning: [unsafe] allow_reserved lifts " + c.to_string() +
                                    ": guests may reach it; for test rigs only, every use is logged");
  }
  for (const auto& rule : policy.rules()) {
    for (const auto& n : rule.names) {
      if (n.wildcard && n.base.find('.') == std::string::npos) {
        warn(rule.where, "warning: \"" + n.to_string() + "\" allows every name under a top-level domain");
      }
    }
    for (const auto& pr : rule.ports) {
      if (pr.last - pr.first >= 1024) {
        warn(rule.where, "warning: port range " + pr.to_string() + " spans " +
                             std::to_string(pr.last - pr.first + 1) + " ports");
      }
    }
  }
  return out;
}

}  // namespace abox::policy
