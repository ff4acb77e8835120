// The guest control channel's messages: the payloads of frame.h's frames,
// one struct per type, with encode() and a bounded decode() each
// (docs/control-protocol.md has the table and the order of a session).
//
// Guest to host:  Hello (unkeyed), then SelftestReport, Started | StartFailed,
//                 Output (stdout and stderr kept apart), Exited, Log, StdinCredit,
//                 CopyInDone, CopyOutData, CopyOutDone.
// Host to guest:  Setup (unkeyed: it carries the key), then Go, Stdin, StdinEof,
//                 OutputCredit, Signal, Poweroff, Resize, CopyIn, CopyData,
//                 CopyEnd, CopyOut, CopyCredit, Exec.
//
// Command sessions (version 3): the main command is session 0 (setup, go);
// each `exec` opens another, with an id the host picks (1 and up, never 0).
// Every message of a command's life starts with its u32 session id: started,
// start_failed, stdout, stderr, exited, stdin_credit from the guest; stdin,
// stdin_eof, output_credit, signal, resize from the host. The decoders check
// the shape only; whether a session id is open is the receiver's table's
// business (an unknown one is dropped, counted and logged there).
//
// Every field is big-endian; a string or byte field is u32be length + bytes,
// each with its own cap; a list is u16be count + items, capped. decode()
// fails on any short field, any cap exceeded and any byte left over, so one
// payload has exactly one reading. The host decodes only guest-to-host
// messages: that is the parser of guest-controlled bytes (fuzz/guest_control_fuzz.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "guest/protocol/frame.h"

namespace abox::guest {

enum class GuestMessage : std::uint8_t {
  kHello = 1,
  kSelftestReport = 2,
  kStarted = 3,
  kStdout = 4,
  kStderr = 5,
  kExited = 6,
  kLog = 7,
  kStdinCredit = 8,
  kStartFailed = 9,
  kCopyInDone = 10,   // CopyResult: the tar stream of a copy_in was unpacked (or not)
  kCopyOutData = 11,  // bytes of a copy_out's tar stream, within the copy credit
  kCopyOutDone = 12,  // CopyResult: the copy_out's stream is complete (or failed)
};

enum class HostMessage : std::uint8_t {
  kSetup = 1,
  kGo = 2,
  kStdin = 3,
  kStdinEof = 4,
  kOutputCredit = 5,
  kSignal = 6,
  kPoweroff = 7,
  kResize = 8,       // WindowSize: the operator's terminal changed size (tty only)
  kCopyIn = 9,       // CopyPath: a tar stream follows, to unpack under path
  kCopyData = 10,    // bytes of the open copy_in's tar stream
  kCopyEnd = 11,     // empty: the copy_in's tar stream is complete
  kCopyOut = 12,     // CopyPath: send path as a tar stream
  kCopyCredit = 13,  // Credit: that many more copy_out bytes may come
  kExec = 14,        // Exec: open a command session beside the main one (version 3)
};

std::string_view guest_message_name(std::uint8_t type);
std::string_view host_message_name(std::uint8_t type);

// Caps on what a decoder accepts.
inline constexpr std::size_t kMaxShortText = 256;  // names, versions, details
inline constexpr std::size_t kMaxLogText = 4096;
inline constexpr std::size_t kMaxEnvEntries = 256;
inline constexpr std::size_t kMaxArgs = 1024;
inline constexpr std::size_t kMaxProbes = 16;
inline constexpr std::size_t kMaxCaPem = 16 * 1024;
inline constexpr std::size_t kMaxGuestPath = 4096;
inline constexpr std::size_t kMaxWorkdir = 4096;
// The session id every command-session message starts with.
inline constexpr std::size_t kSessionIdBytes = 4;
// What one stdout, stderr or stdin frame carries after its session id.
inline constexpr std::size_t kMaxStreamBytes = kMaxPayload - kSessionIdBytes;
// The main command's session (setup and go); exec sessions are 1 and up.
inline constexpr std::uint32_t kMainSession = 0;

// ---- guest to host ----

struct Hello {
  std::uint16_t version = kProtocolVersion;
  std::string agent;            // box-guest's version string
  std::uint64_t uptime_ms = 0;  // the guest kernel's uptime when box-guest said hello
  bool network_up = false;      // DHCP gave a lease and the interface is configured
  std::string network;          // "10.0.2.15/24 via 10.0.2.2 dns 10.0.2.2 mtu 65520", or what failed
};

enum class ProbeKind : std::uint8_t {
  kDeniedName = 1,       // target: a name the policy refuses; passes when no address comes back
  kDirectAddress = 2,    // target: ADDR:PORT nobody answered for; passes when TCP connect fails
  kForeignResolver = 3,  // target: ADDR:PORT of a resolver that is not the gateway; passes on no answer
  kNonceInEnv = 4,       // target: an environment variable; passes when it holds a nonce
};
std::string_view probe_kind_name(ProbeKind k);

enum class ProbeOutcome : std::uint8_t { kPassed = 0, kFailed = 1, kSkipped = 2 };
std::string_view probe_outcome_name(ProbeOutcome o);

struct ProbeResult {
  ProbeKind kind = ProbeKind::kDeniedName;
  ProbeOutcome outcome = ProbeOutcome::kFailed;
  std::string target;
  std::string detail;  // what the guest saw ("REFUSED", "connect: Connection refused", "answer from ...")
};

struct SelftestReport {
  std::vector<ProbeResult> results;
};

struct Started {
  std::uint32_t session = kMainSession;
  std::uint32_t pid = 0;
};

// kRefused (version 3): box-guest did not open the session: too many run
// already, the id is in use, or the instance is not running its main command.
enum class StartFailure : std::uint8_t {
  kNotFound = 1,
  kNotExecutable = 2,
  kWorkdir = 3,
  kOther = 4,
  kRefused = 5
};
std::string_view start_failure_name(StartFailure r);
struct StartFailed {
  std::uint32_t session = kMainSession;
  StartFailure reason = StartFailure::kOther;
  std::int32_t error = 0;  // errno in the guest
  std::string detail;
};

struct Exited {
  std::uint32_t session = kMainSession;
  bool signalled = false;
  std::uint32_t value = 0;  // exit status, or the signal number
};

// stdout and stderr (guest to host), stdin (host to guest): a session's
// bytes. Decoded, `bytes` points into the payload (valid as long as it is).
struct SessionData {
  std::uint32_t session = kMainSession;
  std::span<const std::uint8_t> bytes;  // at most kMaxStreamBytes
};

// stdin_credit (guest to host), output_credit (host to guest).
struct SessionCredit {
  std::uint32_t session = kMainSession;
  std::uint32_t bytes = 0;
};

// stdin_eof.
struct SessionRef {
  std::uint32_t session = kMainSession;
};

struct LogLine {
  std::string text;
};

struct Credit {
  std::uint32_t bytes = 0;
};

// The end of a copy (copy_in_done, copy_out_done).
struct CopyResult {
  bool ok = false;
  std::string detail;  // what tar said, or why it did not run (<= 256)
};

// ---- host to guest ----

struct EnvEntry {
  std::string name;
  std::string value;
};

struct Probe {
  ProbeKind kind = ProbeKind::kDeniedName;
  std::string target;
};

struct WindowSize {
  std::uint16_t rows = 0;
  std::uint16_t cols = 0;
};

// A path in the guest (absolute, no NUL, <= kMaxGuestPath).
struct CopyPath {
  std::string path;
};

struct Setup {
  std::uint16_t version = kProtocolVersion;  // the host's: box-guest refuses another
  ChannelKey key{};
  std::string ca_pem;         // the instance CA the guest's TLS clients trust ("" without bindings)
  std::vector<EnvEntry> env;  // the command's environment (nonces included)
  std::string workdir;        // "" = the user's home
  std::uint32_t uid = 1000;
  std::uint32_t gid = 1000;
  std::vector<std::string> argv;    // at least one
  std::vector<Probe> probes;        // the self-test; empty = none
  std::uint32_t output_credit = 0;  // stdout+stderr bytes the guest may send before more credit
  bool stdin_open = false;          // false: the command's stdin is /dev/null
  // A pty for the command: its stdin, stdout and stderr are the pty (one
  // output stream, `stdout`), the window starts at `window`.
  bool tty = false;
  WindowSize window;
};

struct Signal {
  std::uint32_t session = kMainSession;
  std::uint8_t signo = 0;
};

struct Resize {
  std::uint32_t session = kMainSession;
  WindowSize window;
};

// A command session beside the main one: the command runs as the main
// command does (command_launcher.h), with the main command's environment
// (setup's env) and `env` on top of it (a name given again replaces it).
struct Exec {
  std::uint32_t session = 1;  // 1 and up; the host never uses an id twice in one boot
  std::vector<EnvEntry> env;
  std::string workdir;  // "" = the user's home
  std::uint32_t uid = 1000;
  std::uint32_t gid = 1000;
  std::vector<std::string> argv;  // at least one
  std::uint32_t output_credit = 0;
  bool stdin_open = false;
  bool tty = false;
  WindowSize window;
};

// Encoders append the payload to out.
void encode(const Hello& m, std::vector<std::uint8_t>& out);
void encode(const SelftestReport& m, std::vector<std::uint8_t>& out);
void encode(const Started& m, std::vector<std::uint8_t>& out);
void encode(const StartFailed& m, std::vector<std::uint8_t>& out);
void encode(const Exited& m, std::vector<std::uint8_t>& out);
void encode(const LogLine& m, std::vector<std::uint8_t>& out);
void encode(const Credit& m, std::vector<std::uint8_t>& out);
void encode(const Setup& m, std::vector<std::uint8_t>& out);
void encode(const Signal& m, std::vector<std::uint8_t>& out);
void encode(const CopyResult& m, std::vector<std::uint8_t>& out);
void encode(const WindowSize& m, std::vector<std::uint8_t>& out);
void encode(const CopyPath& m, std::vector<std::uint8_t>& out);
void encode(const SessionData& m, std::vector<std::uint8_t>& out);
void encode(const SessionCredit& m, std::vector<std::uint8_t>& out);
void encode(const SessionRef& m, std::vector<std::uint8_t>& out);
void encode(const Resize& m, std::vector<std::uint8_t>& out);
void encode(const Exec& m, std::vector<std::uint8_t>& out);

// Decoders: nullopt when the payload is not exactly one valid message.
std::optional<Hello> decode_hello(std::span<const std::uint8_t> p);
std::optional<SelftestReport> decode_selftest_report(std::span<const std::uint8_t> p);
std::optional<Started> decode_started(std::span<const std::uint8_t> p);
std::optional<StartFailed> decode_start_failed(std::span<const std::uint8_t> p);
std::optional<Exited> decode_exited(std::span<const std::uint8_t> p);
std::optional<LogLine> decode_log(std::span<const std::uint8_t> p);
std::optional<Credit> decode_credit(std::span<const std::uint8_t> p);
std::optional<Setup> decode_setup(std::span<const std::uint8_t> p);
std::optional<Signal> decode_signal(std::span<const std::uint8_t> p);
std::optional<CopyResult> decode_copy_result(std::span<const std::uint8_t> p);
std::optional<WindowSize> decode_window_size(std::span<const std::uint8_t> p);
std::optional<CopyPath> decode_copy_path(std::span<const std::uint8_t> p);
std::optional<SessionData> decode_session_data(std::span<const std::uint8_t> p);
std::optional<SessionCredit> decode_session_credit(std::span<const std::uint8_t> p);
std::optional<SessionRef> decode_session_ref(std::span<const std::uint8_t> p);
std::optional<Resize> decode_resize(std::span<const std::uint8_t> p);
std::optional<Exec> decode_exec(std::span<const std::uint8_t> p);
// The version a setup payload states (its first two bytes), whatever follows
// it: so that a setup of another version is told apart from a broken one.
std::optional<std::uint16_t> peek_setup_version(std::span<const std::uint8_t> p);
// Empty messages (Go, StdinEof, Poweroff): true when the payload is empty.
inline bool decode_empty(std::span<const std::uint8_t> p) {
  return p.empty();
}

}  // namespace abox::guest
