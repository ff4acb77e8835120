#include "guest/box_guest/power.h"

#include <signal.h>
#include <sys/reboot.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "guest/box_guest/console.h"

namespace abox::guest {

[[noreturn]] void power_off(std::string_view why) {
  console_line("powering off: " + std::string(why));
  if (::getpid() != 1) ::_exit(1);  // never kill(-1) from anything but the VM's init
  ::kill(-1, SIGKILL);              // every process but init
  ::sync();
  ::reboot(RB_POWER_OFF);
  console_line(std::string("reboot(RB_POWER_OFF) failed: ") + std::strerror(errno));
  for (;;) ::pause();
}

}  // namespace abox::guest
