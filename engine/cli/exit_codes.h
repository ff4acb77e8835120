// Exit codes shared by every abox command, so scripts can rely on them.
//   0  success (valid, allowed)
//   1  a negative answer: a policy is invalid, a target is refused
//   2  usage error: unknown command or option, missing argument
//   3  the command could not do its work (a file it needed is broken or unreadable)
#pragma once

#include <string_view>

namespace abox::engine {

enum ExitCode : int {
  kExitOk = 0,
  kExitNo = 1,
  kExitUsage = 2,
  kExitFailed = 3,
};

// True when s is "-h" or "--help".
bool is_help_flag(std::string_view s);

}  // namespace abox::engine
