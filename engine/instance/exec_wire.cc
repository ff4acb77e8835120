#include "engine/instance/exec_wire.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <initializer_list>

#include "engine/daemon/base64.h"
#include "engine/instance/guest_environment.h"

namespace abox::engine {
namespace {

namespace json = boost::json;

base::Result<json::object, std::string> parse_object(std::string_view text) {
  if (text.size() > kMaxExecLine)
    return base::Err{"a line longer than " + std::to_string(kMaxExecLine) + " bytes"};
  json::parse_options opts;
  opts.max_depth = 3;
  opts.allow_invalid_utf8 = false;
  opts.allow_comments = false;
  opts.allow_trailing_commas = false;
  std::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec, json::storage_ptr(), opts);
  if (ec) return base::Err{"not JSON: " + ec.message()};
  if (!v.is_object()) return base::Err{std::string("not a JSON object")};
  return std::move(v.get_object());
}

// Every key of o is one of `known`.
base::Result<void, std::string> only(const json::object& o, std::initializer_list<std::string_view> known) {
  for (const auto& kv : o) {
    std::string_view key(kv.key().data(), kv.key().size());
    bool ok = false;
    for (auto k : known) ok = ok || k == key;
    if (!ok) return base::Err{"an unknown field \"" + std::string(key.substr(0, 64)) + "\""};
  }
  return {};
}

// An integer field in [0, max]; absent: `fallback`.
base::Result<std::uint64_t, std::string> integer(const json::object& o, std::string_view key,
                                                 std::uint64_t max, std::uint64_t fallback) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return fallback;
  std::uint64_t n = 0;
  if (v->is_uint64()) {
    n = v->get_uint64();
  } else if (v->is_int64() && v->get_int64() >= 0) {
    n = static_cast<std::uint64_t>(v->get_int64());
  } else {
    return base::Err{"\"" + std::string(key) + "\" must be a whole number"};
  }
  if (n > max) return base::Err{"\"" + std::string(key) + "\" is over " + std::to_string(max)};
  return n;
}

base::Result<bool, std::string> flag(const json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return false;
  if (!v->is_bool()) return base::Err{"\"" + std::string(key) + "\" must be true or false"};
  return v->get_bool();
}

// What box-guest says (a start failure's detail) as printable ASCII: it is
// the guest's text, shown on the operator's terminal and carried in JSON.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

std::string line(const json::object& o) {
  std::string s = json::serialize(o);
  s.push_back('\n');
  return s;
}

}  // namespace

base::Result<ExecRequest, std::string> parse_exec_request(std::string_view text) {
  auto parsed = parse_object(text);
  if (!parsed.ok()) return base::Err{parsed.error()};
  const json::object& o = *parsed;
  if (auto k = only(o, {"argv", "env", "workdir", "uid", "gid", "tty", "stdin", "rows", "cols"}); !k.ok())
    return base::Err{k.error()};
  ExecRequest r;
  auto* argv = o.if_contains("argv");
  if (argv == nullptr || !argv->is_array() || argv->get_array().empty())
    return base::Err{std::string("\"argv\" must be an array of 1 or more strings")};
  if (argv->get_array().size() > guest::kMaxArgs)
    return base::Err{"\"argv\" holds more than " + std::to_string(guest::kMaxArgs) + " strings"};
  for (const auto& a : argv->get_array()) {
    if (!a.is_string()) return base::Err{std::string("\"argv\" must hold only strings")};
    if (a.get_string().find('\0') != json::string::npos)
      return base::Err{std::string("an argument holds a NUL")};
    r.argv.emplace_back(a.get_string());
  }
  if (r.argv.front().empty()) return base::Err{std::string("the command's name is empty")};
  if (auto* env = o.if_contains("env")) {
    if (!env->is_array()) return base::Err{std::string("\"env\" must be an array of NAME=VALUE strings")};
    if (env->get_array().size() > kMaxExecEnv)
      return base::Err{"\"env\" holds more than " + std::to_string(kMaxExecEnv) + " entries"};
    for (const auto& e : env->get_array()) {
      if (!e.is_string()) return base::Err{std::string("\"env\" must hold only NAME=VALUE strings")};
      std::string_view assignment(e.get_string().data(), e.get_string().size());
      if (assignment.find('\0') != std::string_view::npos)
        return base::Err{std::string("an env entry holds a NUL")};
      auto entry = parse_env_assignment(assignment);
      if (!entry.ok()) return base::Err{entry.error()};
      r.env.push_back(std::move(entry).value());
    }
  }
  if (auto* w = o.if_contains("workdir")) {
    if (!w->is_string()) return base::Err{std::string("\"workdir\" must be a string")};
    r.workdir = std::string(w->get_string());
    if (r.workdir.size() > guest::kMaxWorkdir || r.workdir.find('\0') != std::string::npos ||
        (!r.workdir.empty() && r.workdir[0] != '/'))
      return base::Err{std::string("\"workdir\" must be an absolute path (at most 4096 bytes)")};
  }
  auto uid = integer(o, "uid", 0xFFFFFFFFu, 1000);
  auto gid = integer(o, "gid", 0xFFFFFFFFu, 1000);
  auto rows = integer(o, "rows", 0xFFFF, 0);
  auto cols = integer(o, "cols", 0xFFFF, 0);
  auto tty = flag(o, "tty");
  auto in = flag(o, "stdin");
  for (const auto* bad : {&uid, &gid, &rows, &cols}) {
    if (!bad->ok()) return base::Err{bad->error()};
  }
  if (!tty.ok()) return base::Err{tty.error()};
  if (!in.ok()) return base::Err{in.error()};
  r.uid = static_cast<std::uint32_t>(*uid);
  r.gid = static_cast<std::uint32_t>(*gid);
  r.window = {static_cast<std::uint16_t>(*rows), static_cast<std::uint16_t>(*cols)};
  r.tty = *tty;
  r.stdin_open = *in;
  return r;
}

std::string exec_request_json(const ExecRequest& r) {
  json::array argv, env;
  for (const auto& a : r.argv) argv.emplace_back(a);
  for (const auto& e : r.env) env.emplace_back(e.name + "=" + e.value);
  json::object o{{"argv", std::move(argv)},
                 {"env", std::move(env)},
                 {"workdir", r.workdir},
                 {"uid", r.uid},
                 {"gid", r.gid},
                 {"tty", r.tty},
                 {"stdin", r.stdin_open},
                 {"rows", r.window.rows},
                 {"cols", r.window.cols}};
  return json::serialize(o);
}

base::Result<ExecInput, std::string> parse_exec_input(std::string_view text) {
  auto parsed = parse_object(text);
  if (!parsed.ok()) return base::Err{parsed.error()};
  const json::object& o = *parsed;
  ExecInput in;
  if (o.contains("stdin")) {
    if (auto k = only(o, {"stdin"}); !k.ok()) return base::Err{k.error()};
    const auto& v = o.at("stdin");
    if (!v.is_string()) return base::Err{std::string("\"stdin\" must be base64")};
    if (v.get_string().size() > (kMaxExecStdin + 2) / 3 * 4)
      return base::Err{"\"stdin\" holds more than " + std::to_string(kMaxExecStdin) + " bytes"};
    auto bytes = base64_decode(std::string_view(v.get_string().data(), v.get_string().size()));
    if (!bytes) return base::Err{std::string("\"stdin\" must be base64")};
    in.kind = ExecInput::Kind::kStdin;
    in.data = std::move(*bytes);
    return in;
  }
  if (o.contains("eof")) {
    if (auto k = only(o, {"eof"}); !k.ok()) return base::Err{k.error()};
    auto v = flag(o, "eof");
    if (!v.ok() || !*v) return base::Err{std::string("\"eof\" must be true")};
    in.kind = ExecInput::Kind::kEof;
    return in;
  }
  if (o.contains("rows") || o.contains("cols")) {
    if (auto k = only(o, {"rows", "cols"}); !k.ok()) return base::Err{k.error()};
    if (!o.contains("rows") || !o.contains("cols"))
      return base::Err{std::string("a resize needs rows and cols")};
    auto rows = integer(o, "rows", 0xFFFF, 0);
    auto cols = integer(o, "cols", 0xFFFF, 0);
    if (!rows.ok()) return base::Err{rows.error()};
    if (!cols.ok()) return base::Err{cols.error()};
    in.kind = ExecInput::Kind::kResize;
    in.window = {static_cast<std::uint16_t>(*rows), static_cast<std::uint16_t>(*cols)};
    return in;
  }
  if (o.contains("signal")) {
    if (auto k = only(o, {"signal"}); !k.ok()) return base::Err{k.error()};
    auto n = integer(o, "signal", 64, 0);
    if (!n.ok() || *n < 1) return base::Err{std::string("\"signal\" must be a signal number, 1-64")};
    in.kind = ExecInput::Kind::kSignal;
    in.signo = static_cast<int>(*n);
    return in;
  }
  return base::Err{std::string("expected one of stdin, eof, rows and cols, signal")};
}

std::string exec_stdin_line(std::span<const std::uint8_t> bytes) {
  return line(json::object{{"stdin", base64_encode(bytes)}});
}

std::string exec_eof_line() {
  return line(json::object{{"eof", true}});
}

std::string exec_resize_line(std::uint16_t rows, std::uint16_t cols) {
  return line(json::object{{"rows", rows}, {"cols", cols}});
}

std::string exec_signal_line(int signo) {
  return line(json::object{{"signal", signo}});
}

std::string exec_accepted_line(std::uint32_t session) {
  return line(json::object{{"ok", true}, {"session", session}});
}

std::string exec_refused_line(std::string_view error) {
  return line(json::object{{"ok", false}, {"error", error}});
}

std::string exec_started_line(std::uint32_t pid) {
  return line(json::object{{"started", json::object{{"pid", pid}}}});
}

std::string exec_output_line(bool is_stderr, std::span<const std::uint8_t> bytes) {
  return line(json::object{{is_stderr ? "stderr" : "stdout", base64_encode(bytes)}});
}

std::string exec_end_line(const ExecEnd& end) {
  json::object o{{"done", true}};
  if (end.exit) {
    o["exit"] = json::object{{"signalled", end.exit->signalled}, {"value", end.exit->value}};
  } else if (end.start_failed) {
    o["start_failed"] = json::object{{"reason", guest::start_failure_name(end.start_failed->reason)},
                                     {"errno", end.start_failed->error},
                                     {"detail", printable(end.start_failed->detail)}};
  } else {
    o["error"] = end.error.empty() ? std::string("the exec ended without a status") : end.error;
  }
  return line(o);
}

}  // namespace abox::engine
