// The helper's wire format: what a client (the daemon) asks abox-helper, and
// what it answers. docs/helper.md is the reference; this is its code.
//
// Transport: AF_UNIX SOCK_SEQPACKET. One request is one message, one reply
// follows each request, in order. A message is ASCII text of at most
// kMaxMessage bytes ending in one LF:
//
//   abox-helper/1 OP [KEY=VALUE ...]\n
//
// The version token comes first in every request and reply. Tokens are
// separated by exactly one space; every other byte is visible ASCII
// (0x21-0x7E): no NUL, tab, CR, second LF or byte >= 0x80 anywhere. Each OP
// has a fixed list of keys, in a fixed order, each exactly once:
//
//   hello
//   cgroup-create instance=NAME memory_max=BYTES|max cpu_max=QUOTA/PERIOD|max pids_max=N|max
//   cgroup-move   instance=NAME pids=PID[,PID...]
//   cgroup-delete instance=NAME
//   tap-create    tap=NAME        (with one fd: the network namespace)
//   tap-delete    tap=NAME        (with one fd: the network namespace)
//
// Replies: `abox-helper/1 ok[ TEXT]\n` or `abox-helper/1 error CODE TEXT\n`.
//
// Parsing is strict and total: parse_request() either returns a request
// whose every field is in range (names checked by valid_instance_name and
// valid_tap_name, numbers by the limits below), or an error whose code and
// message say which field is wrong and why. Nothing is done with a request
// before it has parsed, so a refused request changes nothing. Error messages
// quote the client's bytes only through quote(): visible ASCII, escaped
// otherwise, cut at 64 bytes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.h"

namespace abox::helper {

inline constexpr std::string_view kWireVersion = "abox-helper/1";
inline constexpr std::size_t kMaxMessage = 512;

// Field limits (docs/helper.md lists them).
inline constexpr std::size_t kMaxInstanceName = 64;
inline constexpr std::size_t kMaxTapName = 15;              // IFNAMSIZ - 1
inline constexpr std::uint64_t kMinMemoryMax = 1ULL << 20;  // 1 MiB
inline constexpr std::uint64_t kMaxMemoryMax = 1ULL << 40;  // 1 TiB
inline constexpr std::uint64_t kMinCpuPeriod = 1000;        // us, the kernel's bounds
inline constexpr std::uint64_t kMaxCpuPeriod = 1000000;
inline constexpr std::uint64_t kMinCpuQuota = 1000;
inline constexpr std::uint64_t kMaxCpuQuotaPerPeriod = 1024;  // quota <= period x this (CPUs)
inline constexpr std::uint64_t kMaxPidsMax = 4194304;         // PID_MAX_LIMIT
inline constexpr std::uint64_t kMaxPid = 4194304;
inline constexpr std::size_t kMaxPidsPerMove = 64;
// How many instance cgroups the helper keeps under its root at once.
inline constexpr std::size_t kMaxCgroups = 256;

// Why a request was refused or failed. The wire spelling is code_name().
enum class ErrorCode {
  kVersion,       // not "abox-helper/1"
  kMalformed,     // not one well-formed message: bytes, spaces, LF, length, fds
  kUnknownOp,     // an OP this helper does not have
  kBadField,      // a key missing, unknown, repeated, out of order, or a value of the wrong shape
  kOutOfRange,    // a number outside its limits
  kBadName,       // an instance or tap name that breaks the name rules
  kNotPermitted,  // the peer, the process or the namespace is not the operator's
  kExists,        // the cgroup or tap is already there
  kNotFound,      // no such cgroup, tap or process
  kBusy,          // the cgroup still has processes
  kUnavailable,   // this helper cannot do it on this host (cgroup v2 controllers missing)
  kLimit,         // as many cgroups as the helper allows already exist
  kSystem,        // the kernel refused (the message has errno's text)
};
std::string_view code_name(ErrorCode code);
std::optional<ErrorCode> code_from_name(std::string_view name);

struct WireError {
  ErrorCode code = ErrorCode::kMalformed;
  std::string message;
};

// A limit the kernel spells "max" is nullopt here.
struct CpuMax {
  std::uint64_t quota_us = 0;
  std::uint64_t period_us = 0;
  bool operator==(const CpuMax&) const = default;
};
struct CgroupLimits {
  std::optional<std::uint64_t> memory_max;  // bytes
  std::optional<CpuMax> cpu_max;
  std::optional<std::uint64_t> pids_max;
  bool operator==(const CgroupLimits&) const = default;
};

struct HelloRequest {
  bool operator==(const HelloRequest&) const = default;
};
struct CgroupCreateRequest {
  std::string instance;
  CgroupLimits limits;
  bool operator==(const CgroupCreateRequest&) const = default;
};
struct CgroupMoveRequest {
  std::string instance;
  std::vector<pid_t> pids;  // 1..kMaxPidsPerMove, no repeats
  bool operator==(const CgroupMoveRequest&) const = default;
};
struct CgroupDeleteRequest {
  std::string instance;
  bool operator==(const CgroupDeleteRequest&) const = default;
};
// The network namespace travels beside the message (SCM_RIGHTS), not in it.
struct TapCreateRequest {
  std::string tap;
  bool operator==(const TapCreateRequest&) const = default;
};
struct TapDeleteRequest {
  std::string tap;
  bool operator==(const TapDeleteRequest&) const = default;
};
using Request = std::variant<HelloRequest, CgroupCreateRequest, CgroupMoveRequest, CgroupDeleteRequest,
                             TapCreateRequest, TapDeleteRequest>;

// The OP token of a request, and how many fds it carries (0 or 1).
std::string_view op_name(const Request& request);
std::size_t fds_needed(const Request& request);

// Name rules. Instance: 1-64 of A-Z a-z 0-9 . _ -, not starting with '.' or
// '-' (the engine's rule for instance names; so never "." or ".."). Tap: the
// same characters, 1-15 of them (the kernel's IFNAMSIZ). The error says
// which rule the name breaks.
base::Result<void, WireError> check_instance_name(std::string_view name);
base::Result<void, WireError> check_tap_name(std::string_view name);
bool valid_instance_name(std::string_view name);
bool valid_tap_name(std::string_view name);

// The whole check of one received message. fds_attached is how many fds came
// with it; a request needs exactly fds_needed() of them.
base::Result<Request, WireError> parse_request(std::span<const std::uint8_t> message,
                                               std::size_t fds_attached);
// The canonical text of a request (what parse_request accepts; a request
// that parsed formats back to the same bytes). The request must be valid.
std::string format_request(const Request& request);

struct Reply {
  bool ok = true;
  ErrorCode code = ErrorCode::kSystem;  // when !ok
  std::string text;                     // after "ok " (may be empty), or the error's message
};
std::string format_reply(const Reply& reply);
// What a client accepts from the helper: the same framing rules, a known
// CODE, TEXT of visible ASCII and single spaces.
base::Result<Reply, std::string> parse_reply(std::span<const std::uint8_t> message);

// Client bytes as they may appear in a message: visible ASCII as is, the
// rest as \xNN, at most 64 bytes (then "...").
std::string quote(std::string_view bytes);

}  // namespace abox::helper
