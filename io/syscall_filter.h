// SyscallFilter: a data-plane process's seccomp allowlist (abox-net's,
// the broker's), built with libseccomp and loaded once. Anything not on the
// list kills the process, and so does a syscall of another ABI (i386 through
// int 0x80, x32), which hand-written BPF filters often forget.
//
// Each process lists what its own code needs (netstack/program/sandbox.cc,
// broker/sandbox.cc), one entry per user with a comment naming it; what
// every such process needs alike is allow_process_runtime(), here once:
// its loop's io_uring_enter, fds' flags and closing, stdio, time and
// randomness, memory (never executable), locks, signals and abort(),
// leaving, and in ASan builds the sanitizer runtime.
//
// libseccomp rather than raw BPF: it emits the architecture check, resolves
// names per ABI and compiles argument comparisons, so a list stays a table.
// It is a target of its own (abox_syscall_filter) so that the data plane's
// libraries never link it; only the programs that enter a sandbox do.
#pragma once

#include <liburing.h>
#include <seccomp.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "base/result.h"

namespace abox::io {

// Argument `arg` equals `value`.
scmp_arg_cmp arg_eq(unsigned arg, scmp_datum_t value);
// (argument `arg` & mask) == 0: none of mask's bits set.
scmp_arg_cmp arg_clear(unsigned arg, scmp_datum_t mask);
// (argument `arg` & mask) == value: socket()'s type without its flags.
scmp_arg_cmp arg_masked_eq(unsigned arg, scmp_datum_t mask, scmp_datum_t value);

// One io_uring operation a restricted ring accepts (EventLoop::enable_ring).
io_uring_restriction ring_op(std::uint8_t op);

class SyscallFilter {
 public:
  SyscallFilter();
  SyscallFilter(const SyscallFilter&) = delete;
  SyscallFilter& operator=(const SyscallFilter&) = delete;

  // Allows syscall nr when every comparison in `when` holds (always, when
  // empty). The first failure is kept and reported by load().
  void allow(int nr, std::initializer_list<scmp_arg_cmp> when = {});
  // What every data-plane process needs, whatever its own work (above).
  void allow_process_runtime();
  // Loads the filter into this process, for good. Errors name the rule.
  base::Result<void, std::string> load();

 private:
  struct ContextDeleter {
    void operator()(void* ctx) const;
  };
  std::unique_ptr<void, ContextDeleter> ctx_;
  int error_ = 0;
  int error_nr_ = -1;  // the syscall whose rule failed; -1: setting up failed
};

}  // namespace abox::io
