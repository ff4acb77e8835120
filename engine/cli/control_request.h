// ask_control_socket(): one request to a running abox-net's stats socket
// (netstack/program/stats_server.h) or a broker's control socket
// (broker/control_socket.h); both speak the same protocol: one request
// line, an optional body (a policy's text), a half-close, then the reply
// until the server closes.
//
// Blocking, bounded: connect, send and every read wait at most `timeout`;
// the reply is at most 1 MiB. For the CLI (`abox policy apply`,
// `abox broker reload`), never the daemon's loop.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::engine {

// nullopt with a message in error when nothing answers (no such socket,
// nobody listening, a timeout, a reply cut short by an error).
std::optional<std::string> ask_control_socket(const std::string& path, std::string_view line,
                                              std::string_view body, std::string& error,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The text of a policy file to send (at most 4 MiB, load_policy()'s own
// bound). Err: a message (no such file, not a regular file, too large).
base::Result<std::string, std::string> read_policy_text(const std::string& path);

// A reload reply ("0\n...", "1\n...", "3\n..."): its status digit and the
// text after it (trailing newlines dropped). status is -1 for a reply of
// another shape.
struct ReloadReply {
  int status = -1;
  std::string text;
};
ReloadReply parse_reload_reply(std::string_view reply);

}  // namespace abox::engine
