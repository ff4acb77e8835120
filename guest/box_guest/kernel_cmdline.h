// The kernel command line's abox.* options (/proc/cmdline), read once at
// start. The command line is the VMM's, so it holds only what is not secret:
// the control port's name (abox.ctl=NAME, default "ctl"). Words are split on
// spaces, tabs and newlines; quoting is not interpreted (no abox option needs
// a space); the last occurrence of a key wins, as with the kernel's own.
#pragma once

#include <string>
#include <string_view>

namespace abox::guest {

// The value of `abox.<key>=` in `cmdline`, or `fallback` when it is absent.
std::string cmdline_option(std::string_view cmdline, std::string_view key, std::string_view fallback);

// /proc/cmdline (at most 4 KiB of it), or "" when it cannot be read.
std::string read_kernel_cmdline(const char* path = "/proc/cmdline");

}  // namespace abox::guest
