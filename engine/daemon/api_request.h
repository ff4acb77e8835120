// ApiRequest: one request line of the daemon's API (docs/api.md), parsed
// strictly from bytes a client sent.
//
//   {"v":1,"id":N,"op":"OP", ...the op's fields...}\n
//
// Invariants of parse_api_request:
// - the line is at most kMaxRequestBytes and valid UTF-8 JSON (Boost.JSON,
//   nesting at most 4 deep); anything else is refused with a reason;
// - "v" is exactly 1, "id" an integer 0..2^53, "op" one of the known ops;
// - every field is the op's own with the right type: an unknown or misplaced
//   field is refused, never ignored (a client that means something we do not
//   do hears so); a repeated key is refused;
// - names are valid instance names (state_folder.h), run's args are at most
//   kMaxRunArgs strings, cwd is absolute; input's data is canonical base64 of
//   at most kMaxInputBytes;
// - exec: args 1-kMaxRunArgs strings without NUL (the command), env at most
//   kMaxExecEnvEntries strings NAME=VALUE (a valid name), workdir empty or
//   absolute, user UID or UID:GID (decimal, 0..2^32-1), rows and cols
//   0..65535; exec_input, exec_resize and exec_signal name an exec by the
//   id of its request ("exec"), a signal is 1-64; resize has rows and cols.
// The id of a refused request is given back when it could be read, so the
// client can match the error; otherwise it is 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::engine {

inline constexpr int kApiVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 256 * 1024;
inline constexpr std::size_t kMaxRunArgs = 1024;
inline constexpr std::size_t kMaxInputBytes = 64 * 1024;

inline constexpr std::size_t kMaxExecEnvEntries = 256;

enum class ApiOp {
  kPing,
  kRun,
  kList,
  kInspect,
  kStop,
  kStart,
  kRemove,
  kLogs,
  kEvents,
  kStats,
  kInput,
  kExec,        // a command beside the instance's main one (a stream)
  kExecInput,   // stdin for an exec of this connection
  kExecResize,  // its window
  kExecSignal,  // a signal to it
  kResize,      // the main command's window (an instance started with -t)
};
// Every op, in the order of the enum: what ping lists as "ops".
std::vector<std::string_view> api_op_names();
std::string_view api_op_name(ApiOp op);

struct ApiRequest {
  std::uint64_t id = 0;
  ApiOp op = ApiOp::kPing;
  std::string name;                // every op on one instance
  bool all = false;                // ls: stopped and failed ones too
  bool force = false;              // rm: kill a running instance first
  bool follow = false;             // logs, events: keep streaming until the instance ends
  bool from_end = false;           // logs: only what comes from now on (abox attach)
  std::vector<std::uint8_t> data;  // input: bytes for the command's stdin (base64 on the wire)
  bool eof = false;                // input: then close the command's stdin
  std::vector<std::string> args;   // run: `abox run`'s options and command (no -d, -i, -t)
  std::string cwd;                 // run: where relative paths in args start
  std::string term, lang;          // run: the client's TERM and LANG, for the guest
  // exec: args is the command; these its options.
  std::vector<std::string> env;  // "NAME=VALUE", on top of the instance's environment
  std::string workdir;           // "" = the user's home
  std::uint32_t uid = 1000, gid = 1000;
  bool tty = false, interactive = false;
  std::uint16_t rows = 0, cols = 0;  // exec, exec_resize, resize
  std::uint64_t exec = 0;            // exec_input, exec_resize, exec_signal: the exec's request id
  int signal = 0;                    // exec_signal
};

struct ApiRequestError {
  std::uint64_t id = 0;
  std::string message;
};

base::Result<ApiRequest, ApiRequestError> parse_api_request(std::string_view line);

// "UID" or "UID:GID" (decimal; the gid is the uid when not given), or nullopt.
std::optional<std::pair<std::uint32_t, std::uint32_t>> parse_user(std::string_view text);

}  // namespace abox::engine
