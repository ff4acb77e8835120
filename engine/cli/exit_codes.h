// Exit codes shared by every abox command, so scripts can rely on them.
//   0  success (valid, allowed)
//   1  a negative answer: a policy is invalid, a target is refused
//   2  usage error: unknown command or option, missing argument
//   3  the command could not do its work (a file it needed is broken or unreadable)
//   4  a conditional answer: `policy explain` of an address that only a DNS
//      answer for an allowed name can admit (not "allowed" to a script)
// `abox run` passes its command's status through and has its own codes
// (run_command.h).
#pragma once

#include <string_view>

namespace abox::engine {

enum ExitCode : int {
  kExitOk = 0,
  kExitNo = 1,
  kExitUsage = 2,
  kExitFailed = 3,
  kExitNeedsAnswer = 4,
};

// True when s is "-h" or "--help".
bool is_help_flag(std::string_view s);

}  // namespace abox::engine
