#include "engine/cli/terminal_mode.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace abox::engine {
namespace {

// What a crash handler restores: set while a TerminalMode is active. A
// signal handler can only reach it through a global; it is written before
// the handlers are installed and read only by them.
int g_fd = -1;
termios g_saved{};
struct sigaction g_previous[5];
constexpr int kCrashSignals[5] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

void restore_and_reraise(int sig) {
  if (g_fd >= 0) ::tcsetattr(g_fd, TCSANOW, &g_saved);  // async-signal-safe
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

TerminalMode::TerminalMode(int fd) : fd_(fd) {
  termios t{};
  if (::isatty(fd) == 0 || ::tcgetattr(fd, &t) != 0) return;
  saved_ = t;
  g_fd = fd;
  g_saved = t;
  struct sigaction sa {};
  sa.sa_handler = restore_and_reraise;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int i = 0; i < 5; ++i) ::sigaction(kCrashSignals[i], &sa, &g_previous[i]);

  t.c_iflag &= ~static_cast<tcflag_t>(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
  t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
  t.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
  t.c_cflag &= ~static_cast<tcflag_t>(CSIZE | PARENB);
  t.c_cflag |= CS8;
  t.c_cc[VMIN] = 1;
  t.c_cc[VTIME] = 0;
  ::tcsetattr(fd, TCSANOW, &t);
}

TerminalMode::~TerminalMode() {
  if (!saved_) return;
  ::tcsetattr(fd_, TCSANOW, &*saved_);
  for (int i = 0; i < 5; ++i) ::sigaction(kCrashSignals[i], &g_previous[i], nullptr);
  g_fd = -1;
}

std::optional<TerminalSize> terminal_size(int fd) {
  winsize w{};
  if (::ioctl(fd, TIOCGWINSZ, &w) != 0 || w.ws_row == 0 || w.ws_col == 0) return std::nullopt;
  return TerminalSize{w.ws_row, w.ws_col};
}

}  // namespace abox::engine
