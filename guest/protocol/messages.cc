#include "guest/protocol/messages.h"

#include <algorithm>

#include "base/byte_reader.h"

namespace abox::guest {
namespace {

// ---- writing ----

void put_u8(std::vector<std::uint8_t>& out, std::uint8_t v) {
  out.push_back(v);
}
void put_u16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  put_u32(out, static_cast<std::uint32_t>(v >> 32));
  put_u32(out, static_cast<std::uint32_t>(v));
}
void put_str(std::vector<std::uint8_t>& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// ---- reading: every read bounded, every string capped ----

class Fields {
 public:
  explicit Fields(std::span<const std::uint8_t> p) : r_(p) {}

  bool u8(std::uint8_t& v) { return take(r_.u8(), v); }
  bool u16(std::uint16_t& v) { return take(r_.u16be(), v); }
  bool u32(std::uint32_t& v) { return take(r_.u32be(), v); }
  bool u64(std::uint64_t& v) {
    std::uint32_t hi = 0, lo = 0;
    if (!u32(hi) || !u32(lo)) return false;
    v = (std::uint64_t{hi} << 32) | lo;
    return true;
  }
  bool str(std::string& v, std::size_t cap) {
    std::uint32_t n = 0;
    if (!u32(n) || n > cap) return ok_ = false;
    auto b = r_.bytes(n);
    if (!b) return ok_ = false;
    v.assign(b->begin(), b->end());
    return true;
  }
  // A u16 count no larger than cap.
  bool count(std::size_t& n, std::size_t cap) {
    std::uint16_t c = 0;
    if (!u16(c) || c > cap) return ok_ = false;
    n = c;
    return true;
  }
  // True when every read succeeded and nothing is left over.
  bool done() const { return ok_ && r_.empty(); }

 private:
  template <class T>
  bool take(std::optional<T> got, T& v) {
    if (!got) return ok_ = false;
    v = *got;
    return true;
  }
  base::ByteReader r_;
  bool ok_ = true;
};

bool valid_probe_kind(std::uint8_t k) {
  return k >= 1 && k <= 4;
}
bool valid_outcome(std::uint8_t o) {
  return o <= 2;
}

// env (a list of name, value), as setup and exec carry it: names non-empty,
// without '=' or NUL; values without NUL.
bool env_list(Fields& f, std::vector<EnvEntry>& env) {
  std::size_t n = 0;
  if (!f.count(n, kMaxEnvEntries)) return false;
  for (std::size_t i = 0; i < n; ++i) {
    EnvEntry e;
    if (!f.str(e.name, kMaxShortText) || !f.str(e.value, kMaxPayload) || e.name.empty() ||
        e.name.find('=') != std::string::npos || e.name.find('\0') != std::string::npos ||
        e.value.find('\0') != std::string::npos)
      return false;
    env.push_back(std::move(e));
  }
  return true;
}

// argv: 1 to kMaxArgs strings without NUL.
bool argv_list(Fields& f, std::vector<std::string>& argv) {
  std::size_t n = 0;
  if (!f.count(n, kMaxArgs) || n == 0) return false;
  for (std::size_t i = 0; i < n; ++i) {
    std::string a;
    if (!f.str(a, kMaxPayload) || a.find('\0') != std::string::npos) return false;
    argv.push_back(std::move(a));
  }
  return true;
}

void put_env_list(std::vector<std::uint8_t>& out, const std::vector<EnvEntry>& env) {
  put_u16(out, static_cast<std::uint16_t>(env.size()));
  for (const auto& e : env) {
    put_str(out, e.name);
    put_str(out, e.value);
  }
}

void put_argv_list(std::vector<std::uint8_t>& out, const std::vector<std::string>& argv) {
  put_u16(out, static_cast<std::uint16_t>(argv.size()));
  for (const auto& a : argv) put_str(out, a);
}

}  // namespace

std::string_view guest_message_name(std::uint8_t type) {
  switch (static_cast<GuestMessage>(type)) {
    case GuestMessage::kHello:
      return "hello";
    case GuestMessage::kSelftestReport:
      return "selftest_report";
    case GuestMessage::kStarted:
      return "started";
    case GuestMessage::kStdout:
      return "stdout";
    case GuestMessage::kStderr:
      return "stderr";
    case GuestMessage::kExited:
      return "exited";
    case GuestMessage::kLog:
      return "log";
    case GuestMessage::kStdinCredit:
      return "stdin_credit";
    case GuestMessage::kStartFailed:
      return "start_failed";
    case GuestMessage::kCopyInDone:
      return "copy_in_done";
    case GuestMessage::kCopyOutData:
      return "copy_out_data";
    case GuestMessage::kCopyOutDone:
      return "copy_out_done";
  }
  return "unknown";
}

std::string_view host_message_name(std::uint8_t type) {
  switch (static_cast<HostMessage>(type)) {
    case HostMessage::kSetup:
      return "setup";
    case HostMessage::kGo:
      return "go";
    case HostMessage::kStdin:
      return "stdin";
    case HostMessage::kStdinEof:
      return "stdin_eof";
    case HostMessage::kOutputCredit:
      return "output_credit";
    case HostMessage::kSignal:
      return "signal";
    case HostMessage::kPoweroff:
      return "poweroff";
    case HostMessage::kResize:
      return "resize";
    case HostMessage::kCopyIn:
      return "copy_in";
    case HostMessage::kCopyData:
      return "copy_data";
    case HostMessage::kCopyEnd:
      return "copy_end";
    case HostMessage::kCopyOut:
      return "copy_out";
    case HostMessage::kCopyCredit:
      return "copy_credit";
    case HostMessage::kExec:
      return "exec";
  }
  return "unknown";
}

std::string_view start_failure_name(StartFailure r) {
  switch (r) {
    case StartFailure::kNotFound:
      return "not_found";
    case StartFailure::kNotExecutable:
      return "not_executable";
    case StartFailure::kWorkdir:
      return "workdir";
    case StartFailure::kOther:
      return "other";
    case StartFailure::kRefused:
      return "refused";
  }
  return "unknown";
}

std::string_view probe_kind_name(ProbeKind k) {
  switch (k) {
    case ProbeKind::kDeniedName:
      return "denied_name";
    case ProbeKind::kDirectAddress:
      return "direct_address";
    case ProbeKind::kForeignResolver:
      return "foreign_resolver";
    case ProbeKind::kNonceInEnv:
      return "nonce_in_env";
  }
  return "unknown";
}

std::string_view probe_outcome_name(ProbeOutcome o) {
  switch (o) {
    case ProbeOutcome::kPassed:
      return "passed";
    case ProbeOutcome::kFailed:
      return "failed";
    case ProbeOutcome::kSkipped:
      return "skipped";
  }
  return "unknown";
}

void encode(const Hello& m, std::vector<std::uint8_t>& out) {
  put_u16(out, m.version);
  put_str(out, m.agent);
  put_u64(out, m.uptime_ms);
  put_u8(out, m.network_up ? 1 : 0);
  put_str(out, m.network);
}

std::optional<Hello> decode_hello(std::span<const std::uint8_t> p) {
  Fields f(p);
  Hello m;
  std::uint8_t up = 0;
  if (!f.u16(m.version) || !f.str(m.agent, kMaxShortText) || !f.u64(m.uptime_ms) || !f.u8(up) ||
      !f.str(m.network, kMaxShortText) || up > 1 || !f.done())
    return std::nullopt;
  m.network_up = up == 1;
  return m;
}

void encode(const SelftestReport& m, std::vector<std::uint8_t>& out) {
  put_u16(out, static_cast<std::uint16_t>(m.results.size()));
  for (const auto& r : m.results) {
    put_u8(out, static_cast<std::uint8_t>(r.kind));
    put_u8(out, static_cast<std::uint8_t>(r.outcome));
    put_str(out, r.target);
    put_str(out, r.detail);
  }
}

std::optional<SelftestReport> decode_selftest_report(std::span<const std::uint8_t> p) {
  Fields f(p);
  SelftestReport m;
  std::size_t n = 0;
  if (!f.count(n, kMaxProbes)) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i) {
    ProbeResult r;
    std::uint8_t kind = 0, outcome = 0;
    if (!f.u8(kind) || !f.u8(outcome) || !f.str(r.target, kMaxShortText) || !f.str(r.detail, kMaxShortText) ||
        !valid_probe_kind(kind) || !valid_outcome(outcome))
      return std::nullopt;
    r.kind = static_cast<ProbeKind>(kind);
    r.outcome = static_cast<ProbeOutcome>(outcome);
    m.results.push_back(std::move(r));
  }
  if (!f.done()) return std::nullopt;
  return m;
}

void encode(const Started& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u32(out, m.pid);
}

std::optional<Started> decode_started(std::span<const std::uint8_t> p) {
  Fields f(p);
  Started m;
  if (!f.u32(m.session) || !f.u32(m.pid) || !f.done()) return std::nullopt;
  return m;
}

void encode(const StartFailed& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u8(out, static_cast<std::uint8_t>(m.reason));
  put_u32(out, static_cast<std::uint32_t>(m.error));
  put_str(out, m.detail);
}

std::optional<StartFailed> decode_start_failed(std::span<const std::uint8_t> p) {
  Fields f(p);
  StartFailed m;
  std::uint8_t reason = 0;
  std::uint32_t error = 0;
  if (!f.u32(m.session) || !f.u8(reason) || !f.u32(error) || !f.str(m.detail, kMaxShortText) || !f.done() ||
      reason < 1 || reason > 5)
    return std::nullopt;
  m.reason = static_cast<StartFailure>(reason);
  m.error = static_cast<std::int32_t>(error);
  return m;
}

void encode(const Exited& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u8(out, m.signalled ? 1 : 0);
  put_u32(out, m.value);
}

std::optional<Exited> decode_exited(std::span<const std::uint8_t> p) {
  Fields f(p);
  Exited m;
  std::uint8_t signalled = 0;
  if (!f.u32(m.session) || !f.u8(signalled) || !f.u32(m.value) || !f.done() || signalled > 1)
    return std::nullopt;
  m.signalled = signalled == 1;
  // An exit status is 0-255 and a signal 1-64: anything else is not a process's end.
  if (m.signalled ? (m.value < 1 || m.value > 64) : m.value > 255) return std::nullopt;
  return m;
}

void encode(const LogLine& m, std::vector<std::uint8_t>& out) {
  put_str(out, m.text);
}

std::optional<LogLine> decode_log(std::span<const std::uint8_t> p) {
  Fields f(p);
  LogLine m;
  if (!f.str(m.text, kMaxLogText) || !f.done()) return std::nullopt;
  return m;
}

void encode(const Credit& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.bytes);
}

std::optional<Credit> decode_credit(std::span<const std::uint8_t> p) {
  Fields f(p);
  Credit m;
  if (!f.u32(m.bytes) || !f.done()) return std::nullopt;
  return m;
}

void encode(const Setup& m, std::vector<std::uint8_t>& out) {
  put_u16(out, m.version);
  out.insert(out.end(), m.key.begin(), m.key.end());
  put_str(out, m.ca_pem);
  put_env_list(out, m.env);
  put_str(out, m.workdir);
  put_u32(out, m.uid);
  put_u32(out, m.gid);
  put_argv_list(out, m.argv);
  put_u16(out, static_cast<std::uint16_t>(m.probes.size()));
  for (const auto& pr : m.probes) {
    put_u8(out, static_cast<std::uint8_t>(pr.kind));
    put_str(out, pr.target);
  }
  put_u32(out, m.output_credit);
  put_u8(out, m.stdin_open ? 1 : 0);
  put_u8(out, m.tty ? 1 : 0);
  put_u16(out, m.window.rows);
  put_u16(out, m.window.cols);
}

std::optional<std::uint16_t> peek_setup_version(std::span<const std::uint8_t> p) {
  base::ByteReader r(p);
  return r.u16be();
}

std::optional<Setup> decode_setup(std::span<const std::uint8_t> p) {
  base::ByteReader key_reader(p);
  auto version = key_reader.u16be();
  auto key = key_reader.bytes(kKeyBytes);
  if (!version || !key) return std::nullopt;
  Setup m;
  m.version = *version;
  std::copy(key->begin(), key->end(), m.key.begin());
  Fields f(key_reader.rest());
  std::size_t n = 0;
  if (!f.str(m.ca_pem, kMaxCaPem) || !env_list(f, m.env)) return std::nullopt;
  if (!f.str(m.workdir, kMaxWorkdir) || !f.u32(m.uid) || !f.u32(m.gid) || !argv_list(f, m.argv))
    return std::nullopt;
  if (!f.count(n, kMaxProbes)) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i) {
    Probe pr;
    std::uint8_t kind = 0;
    if (!f.u8(kind) || !f.str(pr.target, kMaxShortText) || !valid_probe_kind(kind)) return std::nullopt;
    pr.kind = static_cast<ProbeKind>(kind);
    m.probes.push_back(std::move(pr));
  }
  std::uint8_t stdin_open = 0, tty = 0;
  if (!f.u32(m.output_credit) || !f.u8(stdin_open) || stdin_open > 1 || !f.u8(tty) || tty > 1 ||
      !f.u16(m.window.rows) || !f.u16(m.window.cols) || !f.done())
    return std::nullopt;
  m.stdin_open = stdin_open == 1;
  m.tty = tty == 1;
  return m;
}

void encode(const Signal& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u8(out, m.signo);
}

std::optional<Signal> decode_signal(std::span<const std::uint8_t> p) {
  Fields f(p);
  Signal m;
  if (!f.u32(m.session) || !f.u8(m.signo) || !f.done() || m.signo < 1 || m.signo > 64) return std::nullopt;
  return m;
}

void encode(const CopyResult& m, std::vector<std::uint8_t>& out) {
  put_u8(out, m.ok ? 1 : 0);
  put_str(out, m.detail);
}

std::optional<CopyResult> decode_copy_result(std::span<const std::uint8_t> p) {
  Fields f(p);
  CopyResult m;
  std::uint8_t ok = 0;
  if (!f.u8(ok) || ok > 1 || !f.str(m.detail, kMaxShortText) || !f.done()) return std::nullopt;
  m.ok = ok == 1;
  return m;
}

void encode(const WindowSize& m, std::vector<std::uint8_t>& out) {
  put_u16(out, m.rows);
  put_u16(out, m.cols);
}

std::optional<WindowSize> decode_window_size(std::span<const std::uint8_t> p) {
  Fields f(p);
  WindowSize m;
  if (!f.u16(m.rows) || !f.u16(m.cols) || !f.done()) return std::nullopt;
  return m;
}

void encode(const CopyPath& m, std::vector<std::uint8_t>& out) {
  put_str(out, m.path);
}

std::optional<CopyPath> decode_copy_path(std::span<const std::uint8_t> p) {
  Fields f(p);
  CopyPath m;
  if (!f.str(m.path, kMaxGuestPath) || !f.done() || m.path.empty() || m.path[0] != '/' ||
      m.path.find('\0') != std::string::npos)
    return std::nullopt;
  return m;
}

void encode(const SessionData& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  out.insert(out.end(), m.bytes.begin(), m.bytes.end());
}

std::optional<SessionData> decode_session_data(std::span<const std::uint8_t> p) {
  // The bytes are the rest of the payload: no length of their own, so no
  // length to lie with. A frame's payload is at most kMaxPayload, so they
  // are at most kMaxStreamBytes.
  base::ByteReader r(p);
  auto session = r.u32be();
  if (!session) return std::nullopt;
  return SessionData{*session, r.rest()};
}

void encode(const SessionCredit& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u32(out, m.bytes);
}

std::optional<SessionCredit> decode_session_credit(std::span<const std::uint8_t> p) {
  Fields f(p);
  SessionCredit m;
  if (!f.u32(m.session) || !f.u32(m.bytes) || !f.done()) return std::nullopt;
  return m;
}

void encode(const SessionRef& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
}

std::optional<SessionRef> decode_session_ref(std::span<const std::uint8_t> p) {
  Fields f(p);
  SessionRef m;
  if (!f.u32(m.session) || !f.done()) return std::nullopt;
  return m;
}

void encode(const Resize& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_u16(out, m.window.rows);
  put_u16(out, m.window.cols);
}

std::optional<Resize> decode_resize(std::span<const std::uint8_t> p) {
  Fields f(p);
  Resize m;
  if (!f.u32(m.session) || !f.u16(m.window.rows) || !f.u16(m.window.cols) || !f.done()) return std::nullopt;
  return m;
}

void encode(const Exec& m, std::vector<std::uint8_t>& out) {
  put_u32(out, m.session);
  put_env_list(out, m.env);
  put_str(out, m.workdir);
  put_u32(out, m.uid);
  put_u32(out, m.gid);
  put_argv_list(out, m.argv);
  put_u32(out, m.output_credit);
  put_u8(out, m.stdin_open ? 1 : 0);
  put_u8(out, m.tty ? 1 : 0);
  put_u16(out, m.window.rows);
  put_u16(out, m.window.cols);
}

std::optional<Exec> decode_exec(std::span<const std::uint8_t> p) {
  Fields f(p);
  Exec m;
  std::uint8_t stdin_open = 0, tty = 0;
  if (!f.u32(m.session) || m.session == kMainSession || !env_list(f, m.env) ||
      !f.str(m.workdir, kMaxWorkdir) || !f.u32(m.uid) || !f.u32(m.gid) || !argv_list(f, m.argv) ||
      !f.u32(m.output_credit) || !f.u8(stdin_open) || stdin_open > 1 || !f.u8(tty) || tty > 1 ||
      !f.u16(m.window.rows) || !f.u16(m.window.cols) || !f.done())
    return std::nullopt;
  // A working directory is absolute (or "" for the home), as for copy paths.
  if (!m.workdir.empty() && (m.workdir[0] != '/' || m.workdir.find('\0') != std::string::npos))
    return std::nullopt;
  m.stdin_open = stdin_open == 1;
  m.tty = tty == 1;
  return m;
}

}  // namespace abox::guest
