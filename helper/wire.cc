#include "helper/wire.h"

#include <algorithm>
#include <charconv>

#include "base/byte_reader.h"

namespace abox::helper {

namespace {

struct CodeName {
  ErrorCode code;
  std::string_view name;
};
constexpr CodeName kCodeNames[] = {
    {ErrorCode::kVersion, "version"},
    {ErrorCode::kMalformed, "malformed"},
    {ErrorCode::kUnknownOp, "unknown-op"},
    {ErrorCode::kBadField, "bad-field"},
    {ErrorCode::kOutOfRange, "out-of-range"},
    {ErrorCode::kBadName, "bad-name"},
    {ErrorCode::kNotPermitted, "not-permitted"},
    {ErrorCode::kExists, "exists"},
    {ErrorCode::kNotFound, "not-found"},
    {ErrorCode::kBusy, "busy"},
    {ErrorCode::kUnavailable, "unavailable"},
    {ErrorCode::kLimit, "limit"},
    {ErrorCode::kSystem, "system"},
};

base::Err<WireError> fail(ErrorCode code, std::string message) {
  return base::Err{WireError{code, std::move(message)}};
}

bool visible(std::uint8_t c) {
  return c >= 0x21 && c <= 0x7E;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

base::Result<void, WireError> check_name(std::string_view what, std::string_view name, std::size_t max) {
  if (name.empty()) return fail(ErrorCode::kBadName, std::string(what) + " name is empty");
  if (name.size() > max) {
    return fail(ErrorCode::kBadName, std::string(what) + " name " + quote(name) + " is longer than " +
                                         std::to_string(max) + " characters");
  }
  for (char c : name) {
    if (c == '/') {
      return fail(ErrorCode::kBadName, std::string(what) + " name " + quote(name) +
                                           ": '/' is not allowed (use A-Z a-z 0-9 . _ -)");
    }
    if (!name_char(c)) {
      return fail(ErrorCode::kBadName,
                  std::string(what) + " name " + quote(name) + ": only A-Z a-z 0-9 . _ - are allowed");
    }
  }
  if (name.front() == '.' || name.front() == '-') {
    return fail(ErrorCode::kBadName, std::string(what) + " name " + quote(name) +
                                         " starts with '.' or '-' (so '.' and '..' are never names)");
  }
  return {};
}

// A decimal number: 1-20 digits, no sign, no leading zero (except "0").
base::Result<std::uint64_t, WireError> parse_number(std::string_view key, std::string_view text) {
  const bool digits = !text.empty() && text.size() <= 20 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || (text.size() > 1 && text.front() == '0')) {
    return fail(ErrorCode::kBadField,
                std::string(key) + "=" + quote(text) + ": expected a decimal number without leading zeros");
  }
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return fail(ErrorCode::kOutOfRange, std::string(key) + "=" + quote(text) + ": too large");
  }
  return v;
}

base::Result<std::uint64_t, WireError> parse_in_range(std::string_view key, std::string_view text,
                                                      std::uint64_t lo, std::uint64_t hi) {
  auto v = parse_number(key, text);
  if (!v.ok()) return v;
  if (*v < lo || *v > hi) {
    return fail(ErrorCode::kOutOfRange, std::string(key) + "=" + std::string(text) + ": must be " +
                                            std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

// "max" or a number in [lo, hi].
base::Result<std::optional<std::uint64_t>, WireError> parse_limit(std::string_view key, std::string_view text,
                                                                  std::uint64_t lo, std::uint64_t hi) {
  if (text == "max") return std::optional<std::uint64_t>{};
  auto v = parse_in_range(key, text, lo, hi);
  if (!v.ok()) return base::Err{v.error()};
  return std::optional<std::uint64_t>{*v};
}

base::Result<std::optional<CpuMax>, WireError> parse_cpu_max(std::string_view text) {
  if (text == "max") return std::optional<CpuMax>{};
  auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    return fail(ErrorCode::kBadField,
                "cpu_max=" + quote(text) + ": expected QUOTA/PERIOD (microseconds) or max");
  }
  auto period = parse_in_range("cpu_max period", text.substr(slash + 1), kMinCpuPeriod, kMaxCpuPeriod);
  if (!period.ok()) return base::Err{period.error()};
  auto quota =
      parse_in_range("cpu_max quota", text.substr(0, slash), kMinCpuQuota, *period * kMaxCpuQuotaPerPeriod);
  if (!quota.ok()) return base::Err{quota.error()};
  return std::optional<CpuMax>{CpuMax{*quota, *period}};
}

base::Result<std::vector<pid_t>, WireError> parse_pids(std::string_view text) {
  std::vector<pid_t> pids;
  std::size_t start = 0;
  while (true) {
    if (pids.size() == kMaxPidsPerMove) {
      return fail(ErrorCode::kOutOfRange,
                  "pids: more than " + std::to_string(kMaxPidsPerMove) + " in one request");
    }
    auto comma = text.find(',', start);
    auto piece = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    auto pid = parse_in_range("pid", piece, 1, kMaxPid);
    if (!pid.ok()) return base::Err{pid.error()};
    const auto p = static_cast<pid_t>(*pid);
    if (std::find(pids.begin(), pids.end(), p) != pids.end()) {
      return fail(ErrorCode::kBadField, "pids: " + std::to_string(p) + " is given twice");
    }
    pids.push_back(p);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return pids;
}

// The tokens after the OP, checked against the keys the OP takes.
class Fields {
 public:
  explicit Fields(std::span<const std::string_view> tokens) : tokens_(tokens) {}

  // The value of the next field, which must be `key`.
  base::Result<std::string_view, WireError> next(std::string_view key) {
    if (at_ >= tokens_.size()) return fail(ErrorCode::kBadField, "missing " + std::string(key) + "=");
    std::string_view t = tokens_[at_];
    auto eq = t.find('=');
    std::string_view got = t.substr(0, eq);
    if (eq == std::string_view::npos || got != key) {
      return fail(ErrorCode::kBadField, "expected " + std::string(key) + "= as field " +
                                            std::to_string(at_ + 1) + ", found " + quote(got));
    }
    ++at_;
    return t.substr(eq + 1);
  }
  base::Result<void, WireError> end() const {
    if (at_ < tokens_.size()) {
      std::string_view t = tokens_[at_];
      return fail(ErrorCode::kBadField, "unexpected field " + quote(t.substr(0, t.find('='))));
    }
    return {};
  }

 private:
  std::span<const std::string_view> tokens_;
  std::size_t at_ = 0;
};

// Splits a message (already checked: visible bytes and single spaces, one
// final LF) into its tokens.
std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= line.size()) {
    auto sp = line.find(' ', start);
    if (sp == std::string_view::npos) {
      out.push_back(line.substr(start));
      break;
    }
    out.push_back(line.substr(start, sp - start));
    start = sp + 1;
  }
  return out;
}

// Framing shared by requests and replies: size, the final LF, allowed bytes.
// single_spaces: requests allow no empty token; replies' free text may hold
// runs of spaces. Returns the line without its LF.
base::Result<std::string_view, WireError> check_framing(std::span<const std::uint8_t> message,
                                                        bool single_spaces) {
  if (message.empty()) return fail(ErrorCode::kMalformed, "empty message");
  if (message.size() > kMaxMessage) {
    return fail(ErrorCode::kMalformed, "message longer than " + std::to_string(kMaxMessage) + " bytes");
  }
  base::ByteReader reader(message);
  std::size_t i = 0;
  std::uint8_t previous = ' ';
  while (auto c = reader.u8()) {
    const bool last = reader.empty();
    if (*c == '\n') {
      if (!last)
        return fail(ErrorCode::kMalformed,
                    "LF before the end of the message (byte " + std::to_string(i) + ")");
    } else if (*c == ' ') {
      if (single_spaces && (previous == ' ' || (reader.peek() && *reader.peek() == '\n'))) {
        return fail(ErrorCode::kMalformed,
                    "empty token at byte " + std::to_string(i) + " (one space between tokens)");
      }
    } else if (!visible(*c)) {
      return fail(ErrorCode::kMalformed, "byte " + std::to_string(i) + " is " +
                                             quote(std::string(1, static_cast<char>(*c))) +
                                             ": only visible ASCII, single spaces and the final LF");
    }
    if (last && *c != '\n') return fail(ErrorCode::kMalformed, "the message does not end with LF");
    previous = *c;
    ++i;
  }
  return std::string_view(reinterpret_cast<const char*>(message.data()), message.size() - 1);
}

}  // namespace

std::string_view code_name(ErrorCode code) {
  for (const auto& c : kCodeNames) {
    if (c.code == code) return c.name;
  }
  return "system";
}

std::optional<ErrorCode> code_from_name(std::string_view name) {
  for (const auto& c : kCodeNames) {
    if (c.name == name) return c.code;
  }
  return std::nullopt;
}

std::string quote(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  const std::size_t n = std::min<std::size_t>(bytes.size(), 64);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::uint8_t>(bytes[i]);
    if (visible(c) && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  if (bytes.size() > n) out += "...";
  out += '\'';
  return out;
}

base::Result<void, WireError> check_instance_name(std::string_view name) {
  return check_name("instance", name, kMaxInstanceName);
}
base::Result<void, WireError> check_tap_name(std::string_view name) {
  return check_name("tap", name, kMaxTapName);
}
bool valid_instance_name(std::string_view name) {
  return check_instance_name(name).ok();
}
bool valid_tap_name(std::string_view name) {
  return check_tap_name(name).ok();
}

std::string_view op_name(const Request& request) {
  struct Names {
    std::string_view operator()(const HelloRequest&) const { return "hello"; }
    std::string_view operator()(const CgroupCreateRequest&) const { return "cgroup-create"; }
    std::string_view operator()(const CgroupMoveRequest&) const { return "cgroup-move"; }
    std::string_view operator()(const CgroupDeleteRequest&) const { return "cgroup-delete"; }
    std::string_view operator()(const TapCreateRequest&) const { return "tap-create"; }
    std::string_view operator()(const TapDeleteRequest&) const { return "tap-delete"; }
  };
  return std::visit(Names{}, request);
}

std::size_t fds_needed(const Request& request) {
  return std::holds_alternative<TapCreateRequest>(request) ||
                 std::holds_alternative<TapDeleteRequest>(request)
             ? 1
             : 0;
}

base::Result<Request, WireError> parse_request(std::span<const std::uint8_t> message,
                                               std::size_t fds_attached) {
  auto line = check_framing(message, /*single_spaces=*/true);
  if (!line.ok()) return base::Err{line.error()};
  auto tokens = split(*line);
  if (tokens[0] != kWireVersion) {
    return fail(ErrorCode::kVersion,
                "expected " + std::string(kWireVersion) + " first, found " + quote(tokens[0]));
  }
  if (tokens.size() < 2) return fail(ErrorCode::kMalformed, "no operation after the version");
  const std::string_view op = tokens[1];
  Fields f(std::span<const std::string_view>(tokens).subspan(2));

  Request request;
  if (op == "hello") {
    request = HelloRequest{};
  } else if (op == "cgroup-create" || op == "cgroup-move" || op == "cgroup-delete") {
    auto instance = f.next("instance");
    if (!instance.ok()) return base::Err{instance.error()};
    if (auto ok = check_instance_name(*instance); !ok.ok()) return base::Err{ok.error()};
    if (op == "cgroup-create") {
      CgroupCreateRequest r{std::string(*instance), {}};
      auto mem = f.next("memory_max");
      if (!mem.ok()) return base::Err{mem.error()};
      auto mem_v = parse_limit("memory_max", *mem, kMinMemoryMax, kMaxMemoryMax);
      if (!mem_v.ok()) return base::Err{mem_v.error()};
      auto cpu = f.next("cpu_max");
      if (!cpu.ok()) return base::Err{cpu.error()};
      auto cpu_v = parse_cpu_max(*cpu);
      if (!cpu_v.ok()) return base::Err{cpu_v.error()};
      auto pids = f.next("pids_max");
      if (!pids.ok()) return base::Err{pids.error()};
      auto pids_v = parse_limit("pids_max", *pids, 1, kMaxPidsMax);
      if (!pids_v.ok()) return base::Err{pids_v.error()};
      r.limits = CgroupLimits{*mem_v, *cpu_v, *pids_v};
      request = std::move(r);
    } else if (op == "cgroup-move") {
      auto pids = f.next("pids");
      if (!pids.ok()) return base::Err{pids.error()};
      auto list = parse_pids(*pids);
      if (!list.ok()) return base::Err{list.error()};
      request = CgroupMoveRequest{std::string(*instance), std::move(*list)};
    } else {
      request = CgroupDeleteRequest{std::string(*instance)};
    }
  } else if (op == "tap-create" || op == "tap-delete") {
    auto tap = f.next("tap");
    if (!tap.ok()) return base::Err{tap.error()};
    if (auto ok = check_tap_name(*tap); !ok.ok()) return base::Err{ok.error()};
    if (op == "tap-create") {
      request = TapCreateRequest{std::string(*tap)};
    } else {
      request = TapDeleteRequest{std::string(*tap)};
    }
  } else {
    return fail(ErrorCode::kUnknownOp, "no operation " + quote(op) +
                                           " (hello, cgroup-create, cgroup-move, cgroup-delete, tap-create, "
                                           "tap-delete)");
  }
  if (auto end = f.end(); !end.ok()) return base::Err{end.error()};
  const std::size_t want = fds_needed(request);
  if (fds_attached != want) {
    return fail(ErrorCode::kMalformed, std::string(op_name(request)) + " takes " +
                                           (want == 1 ? "1 fd (the network namespace)" : "0 fds") + ", " +
                                           std::to_string(fds_attached) + " came with it");
  }
  return request;
}

namespace {

std::string limit_text(const std::optional<std::uint64_t>& v) {
  return v ? std::to_string(*v) : std::string("max");
}

}  // namespace

std::string format_request(const Request& request) {
  std::string out(kWireVersion);
  out += ' ';
  out += op_name(request);
  if (const auto* c = std::get_if<CgroupCreateRequest>(&request)) {
    out += " instance=" + c->instance + " memory_max=" + limit_text(c->limits.memory_max) + " cpu_max=";
    out += c->limits.cpu_max ? std::to_string(c->limits.cpu_max->quota_us) + "/" +
                                   std::to_string(c->limits.cpu_max->period_us)
                             : std::string("max");
    out += " pids_max=" + limit_text(c->limits.pids_max);
  } else if (const auto* m = std::get_if<CgroupMoveRequest>(&request)) {
    out += " instance=" + m->instance + " pids=";
    for (std::size_t i = 0; i < m->pids.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(m->pids[i]);
    }
  } else if (const auto* d = std::get_if<CgroupDeleteRequest>(&request)) {
    out += " instance=" + d->instance;
  } else if (const auto* tc = std::get_if<TapCreateRequest>(&request)) {
    out += " tap=" + tc->tap;
  } else if (const auto* td = std::get_if<TapDeleteRequest>(&request)) {
    out += " tap=" + td->tap;
  }
  out += '\n';
  return out;
}

std::string format_reply(const Reply& reply) {
  std::string out(kWireVersion);
  std::string text;
  if (reply.ok) {
    out += " ok";
  } else {
    out += " error ";
    out += code_name(reply.code);
  }
  // The text keeps to the reply's framing whatever went into it (errno
  // strings, quoted names): visible ASCII and spaces, cut to fit.
  const std::size_t room = kMaxMessage - out.size() - 2;
  for (char c : reply.text) {
    if (text.size() == room) break;
    const auto u = static_cast<std::uint8_t>(c);
    text += (visible(u) || c == ' ') ? c : '?';
  }
  if (!text.empty()) {
    out += ' ';
    out += text;
  }
  out += '\n';
  return out;
}

base::Result<Reply, std::string> parse_reply(std::span<const std::uint8_t> message) {
  auto line = check_framing(message, /*single_spaces=*/false);
  if (!line.ok()) return base::Err{line.error().message};
  std::string_view rest = *line;
  if (rest.substr(0, kWireVersion.size()) != kWireVersion || rest.size() < kWireVersion.size() + 3 ||
      rest[kWireVersion.size()] != ' ') {
    return base::Err{std::string("the reply does not start with ") + std::string(kWireVersion)};
  }
  rest.remove_prefix(kWireVersion.size() + 1);
  Reply r;
  if (rest == "ok") return r;
  if (rest.substr(0, 3) == "ok ") {
    r.text = std::string(rest.substr(3));
    return r;
  }
  if (rest.substr(0, 6) != "error ") return base::Err{std::string("the reply is neither ok nor error")};
  rest.remove_prefix(6);
  auto sp = rest.find(' ');
  auto code = code_from_name(rest.substr(0, sp));
  if (!code) return base::Err{"unknown error code " + quote(rest.substr(0, sp))};
  r.ok = false;
  r.code = *code;
  if (sp != std::string_view::npos) r.text = std::string(rest.substr(sp + 1));
  return r;
}

}  // namespace abox::helper
