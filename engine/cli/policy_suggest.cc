#include "engine/cli/policy_suggest.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "policy/name.h"
#include "policy/policy_file.h"

namespace abox::engine {

namespace {

namespace json = boost::json;
using policy::Protocol;

struct Seen {
  std::uint64_t flows = 0;
  std::uint64_t would_deny = 0;
  std::uint64_t closed = 0;  // flows whose `close` event was read (their bytes below)
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_in = 0;
  std::string first_seen;  // the earliest event time (ISO 8601 sorts as text)
};

// (protocol, port) -> what was seen, per canonical name.
using PortsSeen = std::map<std::pair<Protocol, std::uint16_t>, Seen>;

std::optional<std::string_view> string_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return std::string_view(v->get_string());
}

// A byte count: a non-negative integer field (absent or anything else: 0).
std::uint64_t count_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
  return 0;
}

// a + b, saturating (the log is untrusted: no wrap-around to a small count).
std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// The port of "ADDRESS:PORT" / "[V6]:PORT": digits after the last ':', 1-65535.
std::optional<std::uint16_t> port_of(std::string_view dst) {
  const auto colon = dst.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view digits = dst.substr(colon + 1);
  if (digits.empty() || digits.size() > 5) return std::nullopt;
  std::uint32_t port = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    port = port * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (port == 0 || port > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(port);
}

// A canonical, exact DNS name (what the gate logs), or nothing.
std::optional<std::string> canonical_name(std::string_view text) {
  auto p = policy::NamePattern::parse(text);
  if (!p.ok() || p->wildcard) return std::nullopt;
  return p->base;
}

// Only printable ASCII that needs no escaping in a TOML comment.
std::string comment_safe(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 128)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// An event time as abox writes it (ISO 8601: digits, T, Z, ':', '.', '-',
// '+'), at most 40 bytes; anything else is not a time and is dropped.
void note_time(Seen& s, std::string_view time) {
  if (time.size() > 40 || time.find_first_not_of("0123456789TZ:.-+") != std::string_view::npos) return;
  const std::string t(time);
  if (s.first_seen.empty() || (!t.empty() && t < s.first_seen)) s.first_seen = t;
}

std::string ports_list(const std::set<std::uint16_t>& ports) {
  std::string s = "[";
  for (auto p : ports) s += (s.size() > 1 ? ", " : "") + std::to_string(p);
  return s + "]";
}

}  // namespace

base::Result<Suggestion, std::string> suggest_policy(std::string_view events, const SuggestOptions& options) {
  Suggestion out;
  std::map<std::string, PortsSeen> observed;
  std::map<std::string, std::uint64_t> unnamed;   // "dst/proto" -> flows
  std::map<std::string, std::uint64_t> reserved;  // "dst/proto" -> refusals
  std::set<std::string> asked;                    // DNS would_deny names

  while (!events.empty()) {
    const auto nl = events.find('\n');
    const std::string_view line = events.substr(0, nl);
    events = nl == std::string_view::npos ? std::string_view() : events.substr(nl + 1);
    if (line.empty()) continue;
    ++out.lines_read;
    auto skip = [&] { ++out.lines_skipped; };
    if (line.size() > kMaxEventLine) {
      skip();
      continue;
    }
    std::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) {
      skip();
      continue;
    }
    const json::object& o = v.get_object();
    const auto kind = string_field(o, "kind");
    if (!kind || (*kind != "admit" && *kind != "would_deny" && *kind != "deny" && *kind != "close")) {
      skip();
      continue;
    }
    const auto name_text = string_field(o, "name");
    const auto time = string_field(o, "time").value_or("");
    if (*kind == "would_deny" && o.contains("type")) {  // the DNS gate's
      if (auto n = name_text ? canonical_name(*name_text) : std::nullopt) {
        asked.insert(*n);
      } else {
        skip();
      }
      continue;
    }
    const auto proto_text = string_field(o, "proto");
    const auto dst = string_field(o, "dst");
    // An echo flow's dst is an address alone (icmp has no port): port 0.
    const bool icmp = proto_text == std::optional<std::string_view>("icmp");
    std::uint16_t port = 0;
    if (!icmp) {
      const std::optional<std::uint16_t> port_found = dst ? port_of(*dst) : std::optional<std::uint16_t>();
      if (!proto_text || (*proto_text != "tcp" && *proto_text != "udp") || !port_found.has_value()) {
        skip();
        continue;
      }
      port = port_found.value();
    } else if (!dst) {
      skip();
      continue;
    }
    const Protocol proto = icmp ? Protocol::icmp : *proto_text == "udp" ? Protocol::udp : Protocol::tcp;
    const std::string where = comment_safe(dst->substr(0, 64)) + "/" + std::string(*proto_text);
    if (*kind == "deny") {
      const auto reason = string_field(o, "reason").value_or("");
      if (reason.find("reserved") != std::string_view::npos ||
          reason.find("this host") != std::string_view::npos)
        ++reserved[where];
      else
        skip();
      continue;
    }
    // A flow audit mode let through is logged twice, would_deny then admit
    // ("audit mode: ..."): counted once, by its would_deny.
    if (*kind == "admit" && string_field(o, "reason").value_or("").starts_with("audit mode")) continue;
    std::optional<std::string> name;
    if (name_text && !name_text->empty()) {
      name = canonical_name(*name_text);
      if (!name) {
        skip();
        continue;
      }
    }
    if (*kind == "close") {
      // A flow's end: its bytes go to what its admit counted (a flow with
      // no admit read, or one `from` allows, is not in `observed`).
      auto by_name = name ? observed.find(*name) : observed.end();
      if (by_name == observed.end()) continue;
      auto seen = by_name->second.find({proto, port});
      if (seen == by_name->second.end()) continue;
      ++seen->second.closed;
      seen->second.bytes_out = add(seen->second.bytes_out, count_field(o, "bytes_out"));
      seen->second.bytes_in = add(seen->second.bytes_in, count_field(o, "bytes_in"));
      continue;
    }
    if (!name) {
      ++unnamed[where];
      continue;
    }
    if (options.from != nullptr &&
        (options.from->admits(*name, port, proto) != nullptr ||
         (proto == Protocol::tcp && options.from->broker_for(*name, port) != nullptr)))
      continue;
    Seen& s = observed[*name][{proto, port}];
    ++s.flows;
    if (*kind == "would_deny") ++s.would_deny;
    note_time(s, time);
  }

  // Patterns: each name itself, or with group_wildcards "*.PARENT" for two
  // or more names under one parent that is not a top-level domain.
  std::map<std::string, std::vector<std::string>> patterns;  // pattern -> names it covers
  if (options.group_wildcards) {
    std::map<std::string, std::vector<std::string>> by_parent;
    for (const auto& [name, _] : observed) {
      const auto dot = name.find('.');
      const std::string parent = dot == std::string::npos ? std::string() : name.substr(dot + 1);
      if (parent.find('.') != std::string::npos) by_parent[parent].push_back(name);
    }
    std::set<std::string> grouped;
    for (const auto& [parent, names] : by_parent) {
      if (names.size() < 2) continue;
      patterns["*." + parent] = names;
      grouped.insert(names.begin(), names.end());
    }
    for (const auto& [name, _] : observed)
      if (!grouped.contains(name)) patterns[name] = {name};
  } else {
    for (const auto& [name, _] : observed) patterns[name] = {name};
  }

  std::string rules;
  for (const auto& [pattern, names] : patterns) {
    for (const Protocol proto : {Protocol::tcp, Protocol::udp, Protocol::icmp}) {
      std::set<std::uint16_t> ports;
      Seen total;
      for (const auto& name : names) {
        for (const auto& [key, s] : observed.at(name)) {
          if (key.first != proto) continue;
          ports.insert(key.second);
          total.flows += s.flows;
          total.would_deny += s.would_deny;
          total.closed += s.closed;
          total.bytes_out = add(total.bytes_out, s.bytes_out);
          total.bytes_in = add(total.bytes_in, s.bytes_in);
          note_time(total, s.first_seen);
        }
      }
      if (ports.empty()) continue;
      rules += "\n# " + std::to_string(total.flows) + " flow" + (total.flows == 1 ? "" : "s");
      if (total.would_deny > 0) rules += " (" + std::to_string(total.would_deny) + " would_deny)";
      if (total.closed > 0) {
        rules += ", " + std::to_string(total.bytes_out) + " bytes out and " + std::to_string(total.bytes_in) +
                 " in";
        if (total.closed < total.flows) rules += " (of the " + std::to_string(total.closed) + " that closed)";
      }
      if (!total.first_seen.empty()) rules += ", first seen " + total.first_seen;
      if (names.size() > 1 || names.front() != pattern) {
        rules += "; names seen:";
        for (const auto& n : names) rules += " " + n;
      }
      rules += "\n[[allow]]\nnames = [\"" + pattern + "\"]\n";
      // Echo has no ports: its rule is protocols = ["icmp"] alone.
      if (proto != Protocol::icmp) rules += "ports = " + ports_list(ports) + "\n";
      if (proto == Protocol::udp) rules += "protocols = [\"udp\"]\n";
      if (proto == Protocol::icmp) rules += "protocols = [\"icmp\"]\n";
      ++out.rules;
      out.flows += total.flows;
    }
  }

  std::string notes;
  for (const auto& [where, n] : unnamed)
    notes += "#   " + where + ": " + std::to_string(n) + " flow(s) to an address no name was answered for\n";
  for (const auto& name : asked)
    if (!observed.contains(name)) notes += "#   " + name + ": asked by DNS, no flow followed\n";
  for (const auto& [where, n] : reserved)
    notes += "#   " + where + ": " + std::to_string(n) + " refused as reserved (never allowed)\n";

  if (out.rules == 0 && options.from == nullptr) {
    return base::Err{std::string("nothing to allow: no flow with a name in the event log (") +
                     std::to_string(out.lines_read) + " lines read, " + std::to_string(out.lines_skipped) +
                     " skipped)"};
  }
  std::string text = "# Suggested by abox policy suggest from " + comment_safe(options.events_source) + ": " +
                     std::to_string(out.flows) + " flow(s) observed under " + std::to_string(out.rules) +
                     " rule(s).\n# It allows exactly what the log shows: review it before use.\n";
  if (options.from != nullptr) {
    text += "# First, unchanged: " + comment_safe(options.from->source()) + "\n\n";
    text += std::string(options.from_text);
    if (!text.ends_with('\n')) text += '\n';
    text += "\n# Observed, and not allowed by " + comment_safe(options.from->source()) + ":\n";
    if (out.rules == 0) text += "# (nothing)\n";
  }
  text += rules;
  if (!notes.empty()) text += "\n# Observed, and not written as rules:\n" + notes;
  auto checked = policy::parse_policy(text, "<suggested>");
  if (!checked.ok())
    return base::Err{"the suggested policy does not validate:\n" + checked.error().to_string()};
  out.text = std::move(text);
  return out;
}

}  // namespace abox::engine
