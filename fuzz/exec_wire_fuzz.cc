// Fuzz target: engine/instance/exec_wire. The shim parses every line an
// exec's client (the daemon) sends on api.sock; whatever the bytes: no
// crash, no hang, and
//   - an accepted request has 1-1024 argv strings without NUL (the first not
//     empty), at most 256 env entries with a valid name, an empty or
//     absolute workdir, and reads back the same from its own JSON;
//   - accepted input is one kind: stdin of at most kMaxExecStdin bytes, eof,
//     a window, or a signal 1-64;
//   - a refusal always says why.
// The first byte picks the parser (even: a request, odd: an input line).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/instance/exec_wire.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::engine;  // NOLINT(google-build-using-namespace): a test driver for this one
  if (size < 1) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto r = parse_exec_request(text);
    if (!r.ok()) {
      check(!r.error().empty());
      return 0;
    }
    check(!r->argv.empty() && r->argv.size() <= 1024 && !r->argv[0].empty());
    for (const auto& a : r->argv) check(a.find('\0') == std::string::npos);
    check(r->env.size() <= kMaxExecEnv);
    for (const auto& e : r->env) check(!e.name.empty() && e.name.find('=') == std::string::npos);
    check(r->workdir.empty() || r->workdir[0] == '/');
    auto again = parse_exec_request(exec_request_json(*r));
    check(again.ok() && again->argv == r->argv && again->env.size() == r->env.size() &&
          again->uid == r->uid && again->gid == r->gid && again->workdir == r->workdir &&
          again->tty == r->tty && again->stdin_open == r->stdin_open &&
          again->window.rows == r->window.rows && again->window.cols == r->window.cols);
    return 0;
  }
  auto in = parse_exec_input(text);
  if (!in.ok()) {
    check(!in.error().empty());
    return 0;
  }
  switch (in->kind) {
    case ExecInput::Kind::kStdin:
      check(in->data.size() <= kMaxExecStdin);
      break;
    case ExecInput::Kind::kSignal:
      check(in->signo >= 1 && in->signo <= 64);
      break;
    case ExecInput::Kind::kEof:
    case ExecInput::Kind::kResize:
      check(in->data.empty());
      break;
  }
  return 0;
}
