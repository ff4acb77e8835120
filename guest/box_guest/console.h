// Console: box-guest's own diagnostics, one line each on the VM's console
// (fd 2: the kernel gives PID 1 /dev/console), prefixed with the guest's
// uptime so a console log reads as a timeline.
//
// Nothing secret is ever printed here: the console is the serial port, which
// the host keeps as the instance's console log and which the agent cannot
// read (it is not in any group that owns /dev/console), but which an operator
// may paste anywhere.
#pragma once

#include <cstdint>
#include <string_view>

namespace abox::guest {

// Milliseconds since the guest kernel booted (CLOCK_BOOTTIME).
std::uint64_t uptime_ms();
// Milliseconds on CLOCK_MONOTONIC: deadlines and timeouts.
std::int64_t monotonic_ms();

// "box-guest: [  1.234] <text>\n" on stderr, in one write.
void console_line(std::string_view text);

}  // namespace abox::guest
