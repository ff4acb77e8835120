// BrokerControlSocket: the broker's control socket (`abox broker
// --control-socket PATH`), through which `abox policy apply` hands a running
// broker a new policy (issue 22, "Live reload").
//
// The protocol is abox-net's stats socket's (netstack/program/stats_server.h),
// so one client serves both (base::ask_control_socket): the client connects,
// sends one request line, then for "reload" the policy's text, then
// half-closes; the server reads to the end of the stream, answers once, and
// closes. The line starts with the protocol's version, "ABOX-CTL/1 "
// (base/control_protocol.h; a line without one is version 1 too); another
// version is refused ("3\nprotocol ABOX-CTL/N is not spoken here ...").
//   "stats"            the accounting JSON (service.h stats_json()); nothing
//                      may follow the line (one request per connection).
//   "reload SOURCE"    the text after the line is a policy; SOURCE names it in
//                      errors. The reply: "0\n" applied, "1\n" refused
//                      (nothing changed), then what happened as text.
// Anything else, a line with a control byte (NUL, ESC ...), or bytes after
// a "stats" line: "3\n" and why. parse_control_request() is that parser,
// sans I/O (the control_request fuzz target's).
//
// Bounds: a request line of at most kMaxRequestLine bytes and a text of at
// most kMaxPolicyBytes (past either: "1\n..." and closed); at most
// kMaxPending connections reading at a time (one more is closed at once);
// each must finish within kRequestDeadline (else closed). All on the
// broker's loop: the answer runs on the loop's thread, so a reload is never
// half-applied to a request. The socket file is mode 0600 (io/unix_listener.h),
// made before the sandbox; it stays when the broker exits (the sandbox
// forbids unlink) and the next start replaces it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/clock.h"
#include "base/result.h"
#include "base/unique_fd.h"
#include "broker/event_loop.h"

namespace abox::broker {

// A request, read whole: its line without the version ("stats",
// "reload SOURCE"), and the body after it (a reload's policy text).
struct ControlRequest {
  std::string_view line;
  std::string_view body;
};
// Why a request was refused: the reply's status (1: over a bound; 3: not a
// request this side reads) and one line saying why.
struct ControlRequestError {
  int status = 3;
  std::string message;
};

class BrokerControlSocket {
 public:
  static constexpr std::size_t kMaxRequestLine = 1024;
  static constexpr std::size_t kMaxPolicyBytes = 4u << 20;
  static constexpr std::size_t kMaxPending = 8;
  static constexpr base::Millis kRequestDeadline{5000};

  // line: the request line (no newline); body: what followed it. Returns the
  // reply (without the final newline).
  using Answer = std::function<std::string(std::string_view line, std::string_view body)>;

  // Startup: binds and listens on path; the error is a message naming it.
  static base::Result<std::unique_ptr<BrokerControlSocket>, std::string> create(BrokerLoop& loop,
                                                                                const std::string& path,
                                                                                Answer answer);
  ~BrokerControlSocket();
  BrokerControlSocket(const BrokerControlSocket&) = delete;
  BrokerControlSocket& operator=(const BrokerControlSocket&) = delete;

  std::uint64_t served() const { return served_; }

  // Everything a client sent, to the end of its stream (untrusted bytes:
  // each bound checked before the byte past it is looked at; the views
  // point into `bytes`).
  static base::Result<ControlRequest, ControlRequestError> parse_control_request(std::string_view bytes);

 private:
  struct Pending {
    base::UniqueFd fd;
    std::string bytes;
    BrokerLoop::TimerId deadline = 0;
  };

  BrokerControlSocket(BrokerLoop& loop, base::UniqueFd listener, Answer answer);
  void on_accept();
  void on_readable(int fd);
  // Answers (when reply is non-empty) and forgets the connection.
  void finish(int fd, std::string_view reply);

  BrokerLoop& loop_;
  base::UniqueFd listener_;
  Answer answer_;
  std::unordered_map<int, std::unique_ptr<Pending>> pending_;
  std::uint64_t served_ = 0;
};

}  // namespace abox::broker
