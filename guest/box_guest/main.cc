// box-guest: the init of an abox VM (PID 1, exec'd by the image's /init once
// the kernel filesystems are mounted and the virtio modules loaded). It
// brings the network up by DHCP, opens the control port, and runs one
// session with the host (session.h); whatever ends the session, it then
// powers the VM off. It never exits: see power.h. guest/README.md has the
// whole story.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/unique_fd.h"
#include "guest/box_guest/boot_random.h"
#include "guest/box_guest/console.h"
#include "guest/box_guest/control_port.h"
#include "guest/box_guest/kernel_cmdline.h"
#include "guest/box_guest/network_setup.h"
#include "guest/box_guest/power.h"
#include "guest/box_guest/session.h"

namespace {

using namespace abox::guest;

constexpr int kControlPortWaitMs = 10000;
constexpr const char* kAgentVersion = "box-guest/1";

[[noreturn]] void on_terminate() {
  std::string why = "terminate";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      why += ": ";
      why += ex.what();
    } catch (...) {
    }
  }
  power_off(why);
}

[[noreturn]] void run() {
  // The per-boot key will live in this process's memory: no core dumps, and
  // /proc/1/mem, environ and ptrace are closed to everyone but root with
  // CAP_SYS_PTRACE, whatever the agent's uid.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    power_off(std::string("PR_SET_DUMPABLE: ") + std::strerror(errno));
  // A write to the closed stdin of the command is an EPIPE to handle, not a death.
  ::signal(SIGPIPE, SIG_IGN);
  // Ctrl-Alt-Del sends SIGINT to init instead of rebooting at once.
  ::reboot(RB_DISABLE_CAD);

  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGPWR, SIGUSR1, SIGUSR2}) sigaddset(&handled, sig);
  if (::sigprocmask(SIG_BLOCK, &handled, nullptr) != 0) power_off("sigprocmask failed");
  abox::base::UniqueFd signals(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signals) power_off(std::string("signalfd: ") + std::strerror(errno));

  console_line(std::string(kAgentVersion) + " starting");
  const std::string cmdline = read_kernel_cmdline();
  const std::string port_name = cmdline_option(cmdline, "ctl", "ctl");

  BootRandom random;
  NetworkState network = bring_up_network(NetworkSetupOptions{}, random);

  auto port = open_control_port(port_name, kControlPortWaitMs);
  if (!port.ok()) power_off("no control port: " + port.error());
  console_line("control port " + port_name + " open");

  SessionConfig config;
  config.agent = kAgentVersion;
  config.network = std::move(network);
  Session session(std::move(*port), std::move(signals), std::move(config), random);
  power_off(session.run());
}

}  // namespace

#ifndef ABOX_VERSION
#define ABOX_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  if (::getpid() != 1) {
    // On the host (installed in PREFIX/lib/abox): only --version and --help.
    // As PID 1 the arguments come from the kernel's command line and are
    // never read.
    const std::string arg = argc == 2 ? argv[1] : "";
    if (arg == "--version" || arg == "-V") {
      std::printf("box-guest %s (%s)\n", ABOX_VERSION, kAgentVersion);
      return 0;
    }
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: box-guest (as PID 1 of an abox VM; abox run starts it)\n"
          "       box-guest --version\n\n"
          "The init of an abox micro-VM: DHCP, the control channel to the host, the\n"
          "self-test, then the command (guest/README.md).\n");
      return 0;
    }
    std::fprintf(stderr, "box-guest: runs only as PID 1, the init of an abox VM (see guest/README.md)\n");
    return 2;
  }
  std::set_terminate(on_terminate);
  try {
    run();
  } catch (const std::exception& e) {
    power_off(std::string("fatal: ") + e.what());
  } catch (...) {
    power_off("fatal: an unknown exception");
  }
}
