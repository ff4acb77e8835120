#include "engine/daemon/api_request.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <initializer_list>
#include <set>

#include "base/decimal.h"
#include "engine/daemon/base64.h"
#include "engine/instance/state_folder.h"

namespace abox::engine {
namespace {

namespace json = boost::json;

constexpr std::uint64_t kMaxId = 1ull << 53;

struct Op {
  std::string_view name;
  ApiOp op;
  std::initializer_list<std::string_view> fields;  // besides v, id, op
  bool needs_name;
};

const Op kOps[] = {
    {"ping", ApiOp::kPing, {}, false},
    {"run", ApiOp::kRun, {"args", "cwd", "term", "lang"}, false},
    {"ls", ApiOp::kList, {"all"}, false},
    {"inspect", ApiOp::kInspect, {"name"}, true},
    {"stop", ApiOp::kStop, {"name"}, true},
    {"start", ApiOp::kStart, {"name"}, true},
    {"rm", ApiOp::kRemove, {"name", "force"}, true},
    {"logs", ApiOp::kLogs, {"name", "follow", "from_end"}, true},
    {"events", ApiOp::kEvents, {"name", "follow"}, true},
    {"stats", ApiOp::kStats, {"name"}, true},
    {"input", ApiOp::kInput, {"name", "data", "eof"}, true},
    {"exec",
     ApiOp::kExec,
     {"name", "args", "env", "workdir", "user", "tty", "interactive", "rows", "cols"},
     true},
    {"exec_input", ApiOp::kExecInput, {"exec", "data", "eof"}, false},
    {"exec_resize", ApiOp::kExecResize, {"exec", "rows", "cols"}, false},
    {"exec_signal", ApiOp::kExecSignal, {"exec", "signal"}, false},
    {"resize", ApiOp::kResize, {"name", "rows", "cols"}, true},
};

// json::parse keeps one of two equal keys; a request that says two things is
// refused, not guessed. This pass over the bytes (before the parse) sees every
// key of the top-level object; the API has no nested objects.
class KeyCheck {
 public:
  constexpr static std::size_t max_object_size = 64;
  constexpr static std::size_t max_array_size = kMaxRunArgs;
  constexpr static std::size_t max_key_size = 64;
  constexpr static std::size_t max_string_size = kMaxRequestBytes;
  std::string problem;

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_array_begin(json::error_code&) { return ++depth_ <= 2 || stop("too deeply nested"); }
  bool on_array_end(std::size_t, json::error_code&) { return --depth_, true; }
  bool on_object_begin(json::error_code&) {
    return ++depth_ == 1 || stop("an object inside the request (the API has none)");
  }
  bool on_object_end(std::size_t, json::error_code&) { return --depth_, true; }
  bool on_string_part(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_string(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    key_.append(s.data(), s.size());
    bool fresh = keys_.insert(std::move(key_)).second;
    key_.clear();
    return fresh || stop("a key appears twice");
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t, json::string_view, json::error_code&) { return true; }
  bool on_uint64(std::uint64_t, json::string_view, json::error_code&) { return true; }
  bool on_double(double, json::string_view, json::error_code&) { return true; }
  bool on_bool(bool, json::error_code&) { return true; }
  bool on_null(json::error_code&) { return true; }
  bool on_comment_part(json::string_view, json::error_code&) { return false; }
  bool on_comment(json::string_view, json::error_code&) { return false; }

 private:
  bool stop(std::string why) {
    problem = std::move(why);
    return false;
  }
  int depth_ = 0;
  std::string key_;
  std::set<std::string> keys_;
};

base::Result<bool, std::string> get_bool(const json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return false;
  if (!v->is_bool()) return base::Err{"\"" + std::string(key) + "\" must be true or false"};
  return v->get_bool();
}

base::Result<std::string, std::string> get_string(const json::object& o, std::string_view key,
                                                  std::size_t max) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) return base::Err{"\"" + std::string(key) + "\" must be a string"};
  const auto& s = v->get_string();
  if (s.size() > max) return base::Err{"\"" + std::string(key) + "\" is too long"};
  if (s.find('\0') != json::string::npos) return base::Err{"\"" + std::string(key) + "\" holds a NUL"};
  return std::string(s);
}

// An integer field in [min, max]; absent: nullopt and no error.
base::Result<std::optional<std::uint64_t>, std::string> get_integer(const json::object& o,
                                                                    std::string_view key, std::uint64_t min,
                                                                    std::uint64_t max) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return std::optional<std::uint64_t>{};
  std::uint64_t n = 0;
  if (v->is_uint64()) {
    n = v->get_uint64();
  } else if (v->is_int64() && v->get_int64() >= 0) {
    n = static_cast<std::uint64_t>(v->get_int64());
  } else {
    return base::Err{"\"" + std::string(key) + "\" must be a whole number"};
  }
  if (n < min || n > max)
    return base::Err{"\"" + std::string(key) + "\" must be from " + std::to_string(min) + " to " +
                     std::to_string(max)};
  return std::optional<std::uint64_t>{n};
}

// A JSON array of strings without NUL, at most max of them.
base::Result<std::vector<std::string>, std::string> get_strings(const json::object& o, std::string_view key,
                                                                std::size_t max) {
  std::vector<std::string> out;
  auto* v = o.if_contains(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return base::Err{"\"" + std::string(key) + "\" must be an array of strings"};
  if (v->get_array().size() > max)
    return base::Err{"\"" + std::string(key) + "\" holds more than " + std::to_string(max) + " strings"};
  for (const auto& a : v->get_array()) {
    if (!a.is_string()) return base::Err{"\"" + std::string(key) + "\" must hold only strings"};
    if (a.get_string().find('\0') != json::string::npos)
      return base::Err{"\"" + std::string(key) + "\" holds a NUL"};
    out.emplace_back(a.get_string());
  }
  return out;
}

}  // namespace

std::optional<std::pair<std::uint32_t, std::uint32_t>> parse_user(std::string_view text) {
  auto number = [](std::string_view t) { return base::parse_decimal<std::uint32_t>(t); };
  auto colon = text.find(':');
  auto uid = number(text.substr(0, colon));
  if (!uid) return std::nullopt;
  if (colon == std::string_view::npos) return std::pair{*uid, *uid};
  auto gid = number(text.substr(colon + 1));
  if (!gid) return std::nullopt;
  return std::pair{*uid, *gid};
}

std::vector<std::string_view> api_op_names() {
  std::vector<std::string_view> out;
  for (const auto& o : kOps) out.push_back(o.name);
  return out;
}

std::string_view api_op_name(ApiOp op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "unknown";
}

base::Result<ApiRequest, ApiRequestError> parse_api_request(std::string_view line) {
  ApiRequest r;
  auto refuse = [&r](std::string message) { return base::Err{ApiRequestError{r.id, std::move(message)}}; };
  if (line.size() > kMaxRequestBytes)
    return refuse("the request is longer than " + std::to_string(kMaxRequestBytes) + " bytes");

  json::parse_options opts;
  opts.max_depth = 4;
  opts.allow_invalid_utf8 = false;
  opts.allow_comments = false;
  opts.allow_trailing_commas = false;
  std::error_code ec;
  json::value v = json::parse(json::string_view(line.data(), line.size()), ec, json::storage_ptr(), opts);
  if (ec) return refuse("not a JSON request: " + ec.message());
  if (!v.is_object()) return refuse("the request must be a JSON object");
  const json::object& o = v.get_object();

  // The id first, so that every later refusal names it.
  if (auto* id = o.if_contains("id")) {
    if (id->is_uint64() && id->get_uint64() <= kMaxId) {
      r.id = id->get_uint64();
    } else if (id->is_int64() && id->get_int64() >= 0 &&
               static_cast<std::uint64_t>(id->get_int64()) <= kMaxId) {
      r.id = static_cast<std::uint64_t>(id->get_int64());
    } else {
      return refuse("\"id\" must be an integer from 0 to 2^53");
    }
  } else {
    return refuse("the request has no \"id\"");
  }
  {
    json::parse_options check_opts;
    check_opts.max_depth = 4;
    json::basic_parser<KeyCheck> check(check_opts);
    json::error_code cec;
    check.write_some(false, line.data(), line.size(), cec);
    if (!check.handler().problem.empty()) return refuse("refused: " + check.handler().problem);
    if (cec) return refuse("not a JSON request: " + cec.message());
  }
  auto* ver = o.if_contains("v");
  if (ver == nullptr) return refuse("the request has no \"v\" (the API version, 1)");
  if (!((ver->is_int64() && ver->get_int64() == kApiVersion) ||
        (ver->is_uint64() && ver->get_uint64() == kApiVersion)))
    return refuse("API version " + json::serialize(*ver) + " is not spoken here (this daemon speaks 1)");
  auto* opv = o.if_contains("op");
  if (opv == nullptr || !opv->is_string()) return refuse("the request has no \"op\" string");
  const Op* op = nullptr;
  for (const auto& k : kOps)
    if (opv->get_string() == k.name) op = &k;
  if (op == nullptr) return refuse("unknown op '" + std::string(opv->get_string().subview(0, 64)) + "'");
  r.op = op->op;

  for (const auto& kv : o) {
    std::string_view key(kv.key().data(), kv.key().size());
    if (key == "v" || key == "id" || key == "op") continue;
    bool known = false;
    for (auto f : op->fields) known = known || f == key;
    if (!known)
      return refuse("op '" + std::string(op->name) + "' takes no field \"" + std::string(key.substr(0, 64)) +
                    "\"");
  }

  if (op->needs_name) {
    auto name = get_string(o, "name", 64);
    if (!name.ok()) return refuse(name.error());
    if (!valid_instance_name(*name))
      return refuse("\"name\" must be 1-64 of A-Z a-z 0-9 . _ - (not starting with . or -)");
    r.name = *name;
  }
  auto flag = [&](std::string_view key, bool& out) -> bool {
    auto b = get_bool(o, key);
    if (!b.ok()) return false;
    out = *b;
    return true;
  };
  if (!flag("all", r.all)) return refuse("\"all\" must be true or false");
  if (!flag("force", r.force)) return refuse("\"force\" must be true or false");
  if (!flag("follow", r.follow)) return refuse("\"follow\" must be true or false");
  if (!flag("from_end", r.from_end)) return refuse("\"from_end\" must be true or false");
  if (!flag("eof", r.eof)) return refuse("\"eof\" must be true or false");
  if (r.op == ApiOp::kInput || r.op == ApiOp::kExecInput) {
    auto data = get_string(o, "data", (kMaxInputBytes + 2) / 3 * 4);
    if (!data.ok()) return refuse(data.error());
    auto bytes = base64_decode(*data);
    if (!bytes) return refuse("\"data\" must be base64");
    if (bytes->size() > kMaxInputBytes) return refuse("\"data\" holds more than 64 KiB");
    r.data = std::move(*bytes);
  }

  if (r.op == ApiOp::kExec) {
    auto args = get_strings(o, "args", kMaxRunArgs);
    if (!args.ok()) return refuse(args.error());
    if (args->empty() || (*args)[0].empty())
      return refuse("exec needs \"args\", the command: 1 or more strings");
    r.args = std::move(args).value();
    auto env = get_strings(o, "env", kMaxExecEnvEntries);
    if (!env.ok()) return refuse(env.error());
    for (const auto& e : *env) {
      auto eq = e.find('=');
      if (eq == std::string::npos || eq == 0) return refuse("\"env\" entries are NAME=VALUE");
    }
    r.env = std::move(env).value();
    auto workdir = get_string(o, "workdir", 4096);
    if (!workdir.ok()) return refuse(workdir.error());
    if (!workdir->empty() && (*workdir)[0] != '/') return refuse("\"workdir\" must be an absolute path");
    r.workdir = *workdir;
    auto user = get_string(o, "user", 32);
    if (!user.ok()) return refuse(user.error());
    if (!user->empty()) {
      auto ids = parse_user(*user);
      if (!ids) return refuse("\"user\" is UID or UID:GID (numbers)");
      r.uid = ids->first;
      r.gid = ids->second;
    }
    if (!flag("tty", r.tty)) return refuse("\"tty\" must be true or false");
    if (!flag("interactive", r.interactive)) return refuse("\"interactive\" must be true or false");
  }
  if (r.op == ApiOp::kExec || r.op == ApiOp::kExecResize || r.op == ApiOp::kResize) {
    auto rows = get_integer(o, "rows", 0, 0xFFFF);
    if (!rows.ok()) return refuse(rows.error());
    auto cols = get_integer(o, "cols", 0, 0xFFFF);
    if (!cols.ok()) return refuse(cols.error());
    if (r.op != ApiOp::kExec && (!*rows || !*cols))
      return refuse(std::string(op->name) + " needs rows and cols");
    r.rows = static_cast<std::uint16_t>(rows->value_or(0));
    r.cols = static_cast<std::uint16_t>(cols->value_or(0));
  }
  if (r.op == ApiOp::kExecInput || r.op == ApiOp::kExecResize || r.op == ApiOp::kExecSignal) {
    auto exec = get_integer(o, "exec", 0, kMaxId);
    if (!exec.ok()) return refuse(exec.error());
    if (!*exec) return refuse(std::string(op->name) + " needs \"exec\", the id of the exec request");
    r.exec = **exec;
  }
  if (r.op == ApiOp::kExecSignal) {
    auto sig = get_integer(o, "signal", 1, 64);
    if (!sig.ok()) return refuse(sig.error());
    if (!*sig) return refuse("exec_signal needs \"signal\", 1-64");
    r.signal = static_cast<int>(**sig);
  }

  if (r.op == ApiOp::kRun) {
    auto* args = o.if_contains("args");
    if (args == nullptr || !args->is_array()) return refuse("run needs \"args\", an array of strings");
    if (args->get_array().size() > kMaxRunArgs)
      return refuse("\"args\" holds more than " + std::to_string(kMaxRunArgs) + " strings");
    for (const auto& a : args->get_array()) {
      if (!a.is_string()) return refuse("\"args\" must hold only strings");
      if (a.get_string().find('\0') != json::string::npos) return refuse("an argument holds a NUL");
      r.args.emplace_back(a.get_string());
    }
    auto cwd = get_string(o, "cwd", 4096);
    if (!cwd.ok()) return refuse(cwd.error());
    if (cwd->empty() || (*cwd)[0] != '/') return refuse("run needs \"cwd\", an absolute path");
    r.cwd = *cwd;
    auto term = get_string(o, "term", 256);
    if (!term.ok()) return refuse(term.error());
    auto lang = get_string(o, "lang", 256);
    if (!lang.ok()) return refuse(lang.error());
    r.term = *term;
    r.lang = *lang;
  }
  return r;
}

}  // namespace abox::engine
