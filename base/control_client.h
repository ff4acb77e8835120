// ask_control_socket(): one request to a running abox-net's stats socket
// (netstack/program/stats_server.h) or a broker's control socket
// (broker/control_socket.h). Both speak the same protocol: one request
// line, an optional body (a policy's text), a half-close (always: it ends
// the body), then the reply until the server closes.
//
// Blocking and bounded: connect, send and every read wait at most
// `timeout`; the reply is at most 1 MiB. For command-line clients
// (abox-net stats/explain/reload, abox policy apply, abox broker reload),
// never an event loop.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "base/unique_fd.h"

namespace abox::base {

// A blocking stream socket connected to the unix socket at `path`, its
// sends, receives and the connect itself (a full backlog blocks it) bounded
// by `timeout`; empty with a message in `error` when nothing listens there
// (no socket file, one left by a process that has exited, a path too long).
// Connecting tells whether a server is up: the caller may close it at once.
UniqueFd connect_unix_socket(const std::string& path, std::string& error,
                             std::chrono::milliseconds timeout = std::chrono::seconds(5));

// `line` goes with the protocol's version in front (base/control_protocol.h).
// nullopt with a message in `error` when nothing answers: no socket at path,
// a socket file nobody listens on (left by a process that has exited), a
// timeout, an error before any reply.
//
// pass_fd (>= 0): an fd sent with the request line (SCM_RIGHTS on its first
// byte). `abox policy apply` passes the policy of record it is about to
// install, which abox-net then rereads on SIGHUP (its sandbox opens no path).
std::optional<std::string> ask_control_socket(const std::string& path, std::string_view line,
                                              std::string_view body, std::string& error,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                              int pass_fd = -1);

// The same exchange with `line` sent as it is, for a socket of another
// protocol with the same shape (an instance's api.sock).
std::optional<std::string> ask_unix_socket(const std::string& path, std::string_view line,
                                           std::string_view body, std::string& error,
                                           std::chrono::milliseconds timeout, int pass_fd = -1);

}  // namespace abox::base
