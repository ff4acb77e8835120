// exec_wire: the lines of an exec on an instance's api.sock (the shim's end
// of `abox exec`; the daemon is the client, docs/api.md "exec" shows the
// same messages with an "id"). JSON lines, one message a line:
//
//   client: ABOX-EXEC/1 {"argv":[...],"env":["K=V",...],"workdir":"/dir","uid":N,"gid":N,
//                        "tty":B,"stdin":B,"rows":N,"cols":N}
//   shim:   {"ok":true,"session":S} | {"ok":false,"error":"..."} (then it closes)
//   client: {"stdin":"BASE64"} | {"eof":true} | {"rows":R,"cols":C} | {"signal":N}, any number
//   shim:   {"started":{"pid":P}}, {"stdout":"BASE64"}, {"stderr":"BASE64"}, ... then one of
//           {"done":true,"exit":{"signalled":B,"value":V}}
//           {"done":true,"start_failed":{"reason":"not_found","errno":E,"detail":"..."}}
//           {"done":true,"error":"..."}
//   The client closing its end is the client gone: the command is killed.
//
// The parsers are strict and bounded: a line is at most kMaxExecLine bytes
// of UTF-8 JSON, one object, each field of its type and range, no field of
// another message, no field unknown. argv is 1-1024 strings without NUL, env
// at most 256 NAME=VALUE strings (a valid name), workdir empty or absolute
// (at most 4096 bytes, no NUL), uid and gid 0..2^32-1, rows and cols
// 0..65535, stdin data canonical base64 of at most kMaxExecStdin bytes, a
// signal 1-64.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/instance/exec_multiplexer.h"

namespace abox::engine {

inline constexpr std::string_view kExecVerb = "ABOX-EXEC/1 ";
// The main command's window (its tty): "ABOX-RESIZE/1 ROWS COLS\n", answered "OK\n" or "ERR why\n".
inline constexpr std::string_view kResizeVerb = "ABOX-RESIZE/1 ";
// `abox policy apply` made PATH (absolute) the policy in force: "ABOX-POLICY/1 PATH\n", answered
// "OK\n" (instance.json's "policy" names it from then on) or "ERR why\n".
inline constexpr std::string_view kPolicyVerb = "ABOX-POLICY/1 ";
inline constexpr std::size_t kMaxPolicyPath = 4096;
inline constexpr std::size_t kMaxExecLine = 256 * 1024;
inline constexpr std::size_t kMaxExecStdin = 64 * 1024;
inline constexpr std::size_t kMaxExecEnv = 256;

base::Result<ExecRequest, std::string> parse_exec_request(std::string_view json);
std::string exec_request_json(const ExecRequest& r);

struct ExecInput {
  enum class Kind { kStdin, kEof, kResize, kSignal };
  Kind kind = Kind::kEof;
  std::vector<std::uint8_t> data;  // kStdin
  guest::WindowSize window;        // kResize
  int signo = 0;                   // kSignal
};
base::Result<ExecInput, std::string> parse_exec_input(std::string_view json);

// The client's lines (with their newline).
std::string exec_stdin_line(std::span<const std::uint8_t> bytes);
std::string exec_eof_line();
std::string exec_resize_line(std::uint16_t rows, std::uint16_t cols);
std::string exec_signal_line(int signo);

// The shim's lines (with their newline).
std::string exec_accepted_line(std::uint32_t session);
std::string exec_refused_line(std::string_view error);
std::string exec_started_line(std::uint32_t pid);
std::string exec_output_line(bool is_stderr, std::span<const std::uint8_t> bytes);
std::string exec_end_line(const ExecEnd& end);

}  // namespace abox::engine
