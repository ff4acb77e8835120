#include "io/syscall_filter.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#if defined(__SANITIZE_ADDRESS__)
#define ABOX_SYSCALL_FILTER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABOX_SYSCALL_FILTER_ASAN 1
#endif
#endif

namespace abox::io {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace

scmp_arg_cmp arg_eq(unsigned arg, scmp_datum_t value) {
  return scmp_arg_cmp{.arg = arg, .op = SCMP_CMP_EQ, .datum_a = value, .datum_b = 0};
}

scmp_arg_cmp arg_clear(unsigned arg, scmp_datum_t mask) {
  return scmp_arg_cmp{.arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = 0};
}

scmp_arg_cmp arg_masked_eq(unsigned arg, scmp_datum_t mask, scmp_datum_t value) {
  return scmp_arg_cmp{.arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = value};
}

io_uring_restriction ring_op(std::uint8_t op) {
  io_uring_restriction r{};
  r.opcode = IORING_RESTRICTION_SQE_OP;
  r.sqe_op = op;
  return r;
}

void SyscallFilter::ContextDeleter::operator()(void* ctx) const {
  seccomp_release(ctx);
}

SyscallFilter::SyscallFilter() : ctx_(seccomp_init(SCMP_ACT_KILL_PROCESS)) {
  if (!ctx_) {
    error_ = ENOMEM;
    return;
  }
  // A syscall from another ABI (i386 via int 0x80, x32) is killed too.
  if (int rc = seccomp_attr_set(ctx_.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0) {
    error_ = -rc;
  }
}

void SyscallFilter::allow(int nr, std::initializer_list<scmp_arg_cmp> when) {
  if (error_ != 0) return;
  const int rc = seccomp_rule_add_array(ctx_.get(), SCMP_ACT_ALLOW, nr, static_cast<unsigned>(when.size()),
                                        when.size() == 0 ? nullptr : when.begin());
  if (rc < 0) {
    error_ = -rc;
    error_nr_ = nr;
  }
}

void SyscallFilter::allow_process_runtime() {
  // The event loop (io/event_loop.cc): io_uring_enter hands over what is
  // queued and waits (io_uring_submit_and_wait_timeout). Not io_uring_setup
  // (one ring, made at startup) nor io_uring_register (the ring is locked by
  // its restrictions, registered before the filter).
  allow(SCMP_SYS(io_uring_enter));

  // base::UniqueFd, everywhere.
  allow(SCMP_SYS(close));
  // O_NONBLOCK and FD_CLOEXEC on an fd (F_GETFL/F_SETFL/F_GETFD/F_SETFD only).
  allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFL)});
  allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFL)});
  allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFD)});
  allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFD)});
  // stdio's first write to a stream (fstat) and whether it is a terminal
  // (isatty). Metadata only, no fd.
  allow(SCMP_SYS(fstat));
  allow(SCMP_SYS(newfstatat));
  allow(SCMP_SYS(ioctl), {arg_eq(1, TCGETS)});

  // Time: the loop's clock (normally the vDSO; these when it falls back).
  // Randomness: base::SystemRandom, BoringSSL.
  allow(SCMP_SYS(clock_gettime));
  allow(SCMP_SYS(gettimeofday));
  allow(SCMP_SYS(getrandom));

  // malloc and the C++ runtime: heap growth, large blocks, returning memory
  // (malloc_trim: madvise MADV_DONTNEED, brk; BoringSSL's MADV_WIPEONFORK).
  // Never executable memory.
  allow(SCMP_SYS(brk));
  allow(SCMP_SYS(mmap), {arg_clear(2, PROT_EXEC)});
  allow(SCMP_SYS(mprotect), {arg_clear(2, PROT_EXEC)});
  allow(SCMP_SYS(munmap));
  allow(SCMP_SYS(mremap));
  allow(SCMP_SYS(madvise));
  // libstdc++, glibc and BoringSSL locks (never contended: one thread).
  allow(SCMP_SYS(futex));

  // Signals: a signalfd is read with read(); these are for returning from a
  // handler and for abort() (a failed assertion must end in SIGABRT and a
  // core, not in SIGSYS): it blocks signals, resets the handler and raises
  // SIGABRT at this very process.
  allow(SCMP_SYS(rt_sigreturn));
  allow(SCMP_SYS(rt_sigprocmask));
  allow(SCMP_SYS(rt_sigaction));
  allow(SCMP_SYS(getpid));
  allow(SCMP_SYS(gettid));
  allow(SCMP_SYS(tgkill), {arg_eq(0, static_cast<scmp_datum_t>(::getpid()))});
  allow(SCMP_SYS(restart_syscall));

  // Leaving.
  allow(SCMP_SYS(exit_group));
  allow(SCMP_SYS(exit));

#if defined(ABOX_SYSCALL_FILTER_ASAN)
  // ASan + UBSan builds only (ABOX_SANITIZE=ON), for the sanitizer runtime:
  // LeakSanitizer's check at exit runs in a clone()d task that ptrace()s
  // this one and reads /proc/self/maps and /proc/self/task (open, openat,
  // getdents, read-only); reports go through sigaltstack'd handlers and the
  // built-in symbolizer (which reads the binary: openat, lseek, readlink);
  // UBSan probes memory by writing it to a pipe (pipe2). Found by running
  // the e2e suites with SCMP_ACT_LOG. None of this is in a release build.
  allow(SCMP_SYS(openat), {arg_clear(2, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});
  allow(SCMP_SYS(open),
        {arg_clear(1, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});  // raw, in the runtime
  allow(SCMP_SYS(getdents64));
  allow(SCMP_SYS(getdents));  // raw, in the runtime
  allow(SCMP_SYS(lseek));
  allow(SCMP_SYS(readlink));
  allow(SCMP_SYS(readlinkat));
  allow(SCMP_SYS(clone));
  allow(SCMP_SYS(ptrace));
  allow(SCMP_SYS(wait4));
  allow(SCMP_SYS(prctl));
  allow(SCMP_SYS(sched_yield));
  allow(SCMP_SYS(sigaltstack));
  allow(SCMP_SYS(getppid));
  allow(SCMP_SYS(sched_getaffinity));
  allow(SCMP_SYS(pipe2));
  allow(SCMP_SYS(nanosleep));
  allow(SCMP_SYS(clock_nanosleep));
  allow(SCMP_SYS(kill));
  allow(SCMP_SYS(tgkill));
#endif
}

base::Result<void, std::string> SyscallFilter::load() {
  if (!ctx_) return base::Err{std::string("seccomp_init failed")};
  if (error_ != 0) {
    if (error_nr_ < 0) return base::Err{errno_text("seccomp_attr_set(ACT_BADARCH)", error_)};
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, error_nr_);
    std::string what = name != nullptr ? name : std::to_string(error_nr_);
    std::free(name);
    return base::Err{errno_text("cannot add the seccomp rule for " + what, error_)};
  }
  // What the C library does lazily on first use, with syscalls the filter
  // forbids, is done now: time conversion (gmtime_r in the event log) reads
  // /etc/localtime once.
  ::tzset();
  if (int rc = seccomp_load(ctx_.get()); rc < 0) return base::Err{errno_text("seccomp_load", -rc)};
  return {};
}

}  // namespace abox::io
