// `abox policy ...`: check and explain egress policy files.
//
// Both commands write to the given streams (not std::cout directly) so tests
// can run them in-process; the return value is the process exit code
// (engine/cli/exit_codes.h).
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace abox::engine {

// args: everything after "abox policy".
int run_policy_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace abox::engine
