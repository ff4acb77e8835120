// The request line of the control protocol that abox-net's stats socket
// (netstack/program/stats_server.h) and the broker's control socket
// (broker/control_socket.h) speak, and base::ask_control_socket() sends.
//
// A request is one line, then (for a reload) a body to the end of the
// stream. The line starts with the protocol's version, "ABOX-CTL/1 ", which
// ask_control_socket() always sends: a server that speaks another version
// refuses the request with a message naming both (abox and the part it asks
// come from different releases), instead of reading it as something else.
// A line without it is version 1 too: what a person types (socat, nc).
//
// control_request_line() checks untrusted bytes: the prefix is exact, the
// version at most 5 digits with no leading zero, then one space; it returns
// what follows. It reads nothing past `line`.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::base {

inline constexpr std::string_view kControlProtocolName = "ABOX-CTL/";
inline constexpr unsigned kControlProtocolVersion = 1;

// "ABOX-CTL/1 " + line: what ask_control_socket() sends.
std::string versioned_control_line(std::string_view line);

struct ControlVersionError {
  enum class Kind { kMalformed, kUnsupported };
  Kind kind = Kind::kMalformed;
  std::string message;  // one line, for the reply
};

// The request without its version ("stats", "reload SOURCE"), for a line
// with the version this side speaks, or without one.
base::Result<std::string_view, ControlVersionError> control_request_line(std::string_view line);

}  // namespace abox::base
