// `abox broker ...`: run the TLS credential broker for one instance, print
// its CA certificate, print the nonces its guest gets.
//
// Writes to the given streams (tests run it in-process for everything but
// the server); the return value is the exit code (exit_codes.h).
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace abox::engine {

// args: everything after "abox broker".
int run_broker_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace abox::engine
