// TerminalMode: the operator's terminal in raw mode for `abox run -t -i`,
// restored on every way out: the destructor (the normal end, a crash of the
// VMM or of abox-net, an exception), and a crash of abox itself (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGABRT: the handler restores the saved settings,
// then the signal takes its default course). Only SIGKILL leaves the
// terminal raw; `reset` mends it.
//
// Raw: no echo, no line editing, no signals from keys (Ctrl-C and Ctrl-Z go
// to the guest as bytes, where the pty's line discipline makes them signals),
// no translation either way: the guest's pty does the terminal's work, and
// its bytes reach the screen as they are.
#pragma once

#include <termios.h>

#include <cstdint>
#include <optional>

namespace abox::engine {

class TerminalMode {
 public:
  // Puts fd (a terminal) in raw mode; does nothing when fd is not a terminal.
  explicit TerminalMode(int fd);
  TerminalMode(const TerminalMode&) = delete;
  TerminalMode& operator=(const TerminalMode&) = delete;
  ~TerminalMode();

  bool active() const { return saved_.has_value(); }

 private:
  int fd_;
  std::optional<termios> saved_;
};

// The window size of the terminal on fd (rows, cols), or nullopt.
struct TerminalSize {
  std::uint16_t rows = 0;
  std::uint16_t cols = 0;
};
std::optional<TerminalSize> terminal_size(int fd);

}  // namespace abox::engine
