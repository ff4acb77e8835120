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
//   at most kMaxInputBytes.
// The id of a refused request is given back when it could be read, so the
// client can match the error; otherwise it is 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::engine {

inline constexpr int kApiVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 256 * 1024;
inline constexpr std::size_t kMaxRunArgs = 1024;
inline constexpr std::size_t kMaxInputBytes = 64 * 1024;

enum class ApiOp { kPing, kRun, kList, kInspect, kStop, kStart, kRemove, kLogs, kEvents, kStats, kInput };
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
};

struct ApiRequestError {
  std::uint64_t id = 0;
  std::string message;
};

base::Result<ApiRequest, ApiRequestError> parse_api_request(std::string_view line);

}  // namespace abox::engine
