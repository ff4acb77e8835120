// ExecMultiplexer: the host's side of exec sessions (docs/control-protocol.md,
// "Command sessions"; `abox exec`). It gives each exec an id (1, 2, 3, ...:
// never one twice in a boot), opens it on the control channel (ExecChannel:
// the ControlSession), and routes each way:
//   guest -> client: started, stdout and stderr, the end (exited or
//     start_failed) to that exec's ExecSink; a chunk's credit goes back to
//     the guest only once the sink has written it out (`written`), so a slow
//     client slows its own command in the guest and nothing else;
//   client -> guest: stdin within that session's stdin credit (one batch
//     held at a time: the sink hands the next once exec_stdin_taken() said
//     this one is on its way), stdin's end, resizes, signals.
//
// The life of one exec: open() -> the channel's exec message; the guest's
// started or start_failed; output; exited. The record goes when its end has
// reached the sink. A sink whose client went away calls detach(): the
// command is killed (SIGKILL to its session), what it still prints is
// granted back unread, and its end is dropped. close_all() ends every exec
// with abox's own reason when the channel is gone (the instance stopped).
//
// Bounds: at most max_sessions execs at once (box-guest has its own bound,
// lower: this one guards the host's memory); per exec, the output credit
// (the most the guest may send ahead of the sink) and one batch of stdin.
// Frames for an id this table does not hold are the channel's to drop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "guest/protocol/messages.h"

namespace abox::engine {

inline constexpr std::size_t kMaxHostExecSessions = 64;
inline constexpr std::uint32_t kExecOutputCredit = 256 * 1024;

// What `abox exec` asks for, validated by its parser (exec_wire.h).
struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<guest::EnvEntry> env;  // on top of the instance's environment
  std::string workdir;               // "" = the user's home
  std::uint32_t uid = 1000;
  std::uint32_t gid = 1000;
  bool stdin_open = false;
  bool tty = false;
  guest::WindowSize window;
};

// How an exec ended: exactly one of the three.
struct ExecEnd {
  std::optional<guest::Exited> exit;
  std::optional<guest::StartFailed> start_failed;
  std::string error;  // abox's own reason: the instance stopped before the command ended
};

// Where an exec's output and end go (the client's connection).
class ExecSink {
 public:
  virtual ~ExecSink() = default;
  virtual void exec_started(std::uint32_t pid) = 0;
  // written() runs once the bytes are out (or dropped because the client left).
  virtual void exec_output(bool is_stderr, std::span<const std::uint8_t> bytes,
                           std::function<void()> written) = 0;
  // The stdin batch given to write_stdin() is all sent: the next may come.
  virtual void exec_stdin_taken() = 0;
  // The last call for this exec.
  virtual void exec_ended(const ExecEnd& end) = 0;
};

// What the multiplexer needs of the control channel.
class ExecChannel {
 public:
  virtual ~ExecChannel() = default;
  virtual bool open_exec(const guest::Exec& exec) = 0;
  virtual void send_stdin(std::uint32_t session, std::span<const std::uint8_t> bytes) = 0;
  virtual void send_stdin_eof(std::uint32_t session) = 0;
  virtual void grant_output(std::uint32_t session, std::uint32_t bytes) = 0;
  virtual void send_signal(std::uint32_t session, int signo) = 0;
  virtual void send_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols) = 0;
  virtual std::uint64_t stdin_credit(std::uint32_t session) const = 0;
};

class ExecMultiplexer {
 public:
  explicit ExecMultiplexer(ExecChannel& channel, std::size_t max_sessions = kMaxHostExecSessions,
                           std::uint32_t output_credit = kExecOutputCredit);
  ExecMultiplexer(const ExecMultiplexer&) = delete;
  ExecMultiplexer& operator=(const ExecMultiplexer&) = delete;
  ~ExecMultiplexer();

  // Opens an exec; its id, or why not (the bound, a message too large).
  base::Result<std::uint32_t, std::string> open(ExecRequest request, ExecSink& sink);

  // From the client. Each does nothing for an id that is not open.
  void write_stdin(std::uint32_t id, std::vector<std::uint8_t> bytes);
  void close_stdin(std::uint32_t id);  // after what write_stdin() holds
  void resize(std::uint32_t id, std::uint16_t rows, std::uint16_t cols);
  void signal(std::uint32_t id, int signo);
  // The client is gone: no sink call follows; the command is killed.
  void detach(std::uint32_t id);

  // From the guest, for sessions other than 0 (the supervisor's listener).
  void on_started(const guest::Started& m);
  void on_start_failed(const guest::StartFailed& m);
  void on_output(std::uint32_t id, bool is_stderr, std::span<const std::uint8_t> bytes);
  void on_exited(const guest::Exited& m);
  void on_stdin_credit(std::uint32_t id);

  // The channel is gone: every exec ends with `reason` (ExecEnd::error).
  void close_all(const std::string& reason);

  std::size_t size() const { return execs_.size(); }
  bool holds(std::uint32_t id) const { return execs_.count(id) != 0; }

 private:
  struct Exec {
    ExecSink* sink = nullptr;  // nullptr once detached
    bool stdin_open = false;
    std::vector<std::uint8_t> stdin;
    std::size_t stdin_sent = 0;
    bool stdin_batch = false;  // a batch is held (the sink waits for exec_stdin_taken)
    bool eof_pending = false;
    bool eof_sent = false;
  };
  void pump_stdin(std::uint32_t id);
  void end(std::uint32_t id, const ExecEnd& e);

  ExecChannel& channel_;
  std::size_t max_sessions_;
  std::uint32_t output_credit_;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, Exec> execs_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
