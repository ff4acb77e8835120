// Power: the only way box-guest ends. As PID 1 it must never exit (the
// kernel panics when init does), so every end of a session, every fatal
// error and a crash alike come here: say why on the console, kill whatever
// is left of the command, sync, and power the VM off (with QEMU's
// -no-reboot, QEMU then exits 0).
#pragma once

#include <string_view>

namespace abox::guest {

[[noreturn]] void power_off(std::string_view why);

}  // namespace abox::guest
