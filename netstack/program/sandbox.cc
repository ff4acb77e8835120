#include "netstack/program/sandbox.h"

#include <fcntl.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

#include "base/drop_privileges.h"

// libseccomp over hand-written BPF: it emits the architecture check (and
// rejects x32 and i386 syscall numbers on x86_64, which hand-written
// filters often forget), resolves syscall names per architecture, and
// compiles argument comparisons; our list stays a readable table.

#if defined(__SANITIZE_ADDRESS__)
#define ABOX_SANDBOX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABOX_SANDBOX_ASAN 1
#endif
#endif

namespace abox::netstack {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// -- 1. the ring ---------------------------------------------------------------

io_uring_restriction sqe_op(std::uint8_t op) {
  io_uring_restriction r{};
  r.opcode = IORING_RESTRICTION_SQE_OP;
  r.sqe_op = op;
  return r;
}

// -- 4. the syscall filter -----------------------------------------------------

scmp_arg_cmp arg_eq(unsigned arg, scmp_datum_t value) {
  return scmp_arg_cmp{.arg = arg, .op = SCMP_CMP_EQ, .datum_a = value, .datum_b = 0};
}
// (arg & mask) == 0
scmp_arg_cmp arg_clear(unsigned arg, scmp_datum_t mask) {
  return scmp_arg_cmp{.arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = 0};
}

struct FilterDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

class FilterBuilder {
 public:
  explicit FilterBuilder(scmp_filter_ctx ctx) : ctx_(ctx) {}
  // Allows syscall nr (with every comparison in `when` true, if any).
  void allow(int nr, std::initializer_list<scmp_arg_cmp> when = {}) {
    if (error_ != 0) return;
    const int rc = seccomp_rule_add_array(ctx_, SCMP_ACT_ALLOW, nr, static_cast<unsigned>(when.size()),
                                          when.size() == 0 ? nullptr : when.begin());
    if (rc < 0) {
      error_ = -rc;
      error_nr_ = nr;
    }
  }
  int error() const { return error_; }
  int error_nr() const { return error_nr_; }

 private:
  scmp_filter_ctx ctx_;
  int error_ = 0;
  int error_nr_ = 0;
};

// The allowlist. Each entry names who needs it; keep it that way when adding.
void add_allowed_syscalls(FilterBuilder& f) {
  // The event loop (event_loop.cc): io_uring_submit_and_wait_timeout. Not
  // io_uring_setup (no new ring) nor io_uring_register (the ring is locked).
  f.allow(SCMP_SYS(io_uring_enter));

  // Links and sockets, reading and writing on fds opened at startup or
  // accepted/created below: TapLink (readv, writev), StreamLink (read, send:
  // its batched output), the signalfd (read), TcpFlow (recv = recvfrom, sendmsg),
  // UdpFlow (sendmsg, send = sendto, recvmmsg), the DNS upstream client
  // (send = sendto, recv), DnsHostServer
  // (recvmmsg, sendmmsg, send, recv), StatsServer (send), the event log and
  // SIGUSR1 counters (write), stdio (write), MemoryProbe (pread64 of
  // /proc/self/statm).
  f.allow(SCMP_SYS(read));
  f.allow(SCMP_SYS(readv));
  f.allow(SCMP_SYS(pread64));
  f.allow(SCMP_SYS(write));
  f.allow(SCMP_SYS(writev));
  f.allow(SCMP_SYS(recvfrom));
  f.allow(SCMP_SYS(recvmsg));
  f.allow(SCMP_SYS(recvmmsg));
  f.allow(SCMP_SYS(sendto));
  f.allow(SCMP_SYS(sendmsg));
  f.allow(SCMP_SYS(sendmmsg));

  // Upstream flows: TcpFlow::connect_host, UdpFlow::start and the DNS
  // upstream client make sockets to the internet (AF_INET, AF_INET6); the
  // broker's flows are AF_UNIX stream sockets. No other family (netlink,
  // packet, vsock ... stay out of reach).
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_INET)});
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_INET6)});
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_UNIX)});
  // TcpFlow (connect, SO_LINGER, SO_ERROR, shutdown(SHUT_WR)), UdpFlow and
  // the DNS upstream client (connect).
  f.allow(SCMP_SYS(connect));
  f.allow(SCMP_SYS(setsockopt));
  f.allow(SCMP_SYS(getsockopt));
  f.allow(SCMP_SYS(getsockname));
  f.allow(SCMP_SYS(getpeername));
  f.allow(SCMP_SYS(shutdown));
  // DnsHostServer's TCP listener, StatsServer. (The stream link's one peer is
  // accepted before the filter: run_command.cc.)
  f.allow(SCMP_SYS(accept4));
  // base::UniqueFd, everywhere.
  f.allow(SCMP_SYS(close));
  // O_NONBLOCK and FD_CLOEXEC on an fd (F_GETFL/F_SETFL/F_GETFD/F_SETFD only).
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFL)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFL)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFD)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFD)});

  // TapLink::netns_alive (stat of the namespace path, once a second) and
  // stdio's first write to a stream (fstat). Metadata only, no fd.
  f.allow(SCMP_SYS(newfstatat));
  f.allow(SCMP_SYS(fstat));
  // TapLink::netns_alive for a /proc/PID/ns/net guest: signal 0 (only) to
  // the pidfd of that process, which asks whether it still runs.
  f.allow(SCMP_SYS(pidfd_send_signal), {arg_eq(1, 0)});
  // stdio's first write to a terminal asks whether it is one (isatty).
  f.allow(SCMP_SYS(ioctl), {arg_eq(1, TCGETS)});

  // Time: the loop's clock (normally the vDSO; these when it falls back),
  // the pcap writer's timestamps.
  f.allow(SCMP_SYS(clock_gettime));
  f.allow(SCMP_SYS(gettimeofday));
  // base::SystemRandom (DNS IDs and ports, lwIP's ISNs).
  f.allow(SCMP_SYS(getrandom));

  // malloc and the C++ runtime: heap growth, large blocks, returning memory
  // (also malloc_trim from MemoryTrimmer: madvise MADV_DONTNEED, brk).
  // Never executable memory.
  f.allow(SCMP_SYS(brk));
  f.allow(SCMP_SYS(mmap), {arg_clear(2, PROT_EXEC)});
  f.allow(SCMP_SYS(mprotect), {arg_clear(2, PROT_EXEC)});
  f.allow(SCMP_SYS(munmap));
  f.allow(SCMP_SYS(mremap));
  f.allow(SCMP_SYS(madvise));
  // libstdc++ and glibc internals (locks that are never contended here).
  f.allow(SCMP_SYS(futex));

  // Signals: the signalfd is read with read(); these are for returning from
  // a handler and for abort() (a failed assertion must end in SIGABRT and a
  // core, not in SIGSYS): it blocks signals, resets the handler and raises
  // SIGABRT at this very process.
  f.allow(SCMP_SYS(rt_sigreturn));
  f.allow(SCMP_SYS(rt_sigprocmask));
  f.allow(SCMP_SYS(rt_sigaction));
  f.allow(SCMP_SYS(getpid));
  f.allow(SCMP_SYS(gettid));
  f.allow(SCMP_SYS(tgkill), {arg_eq(0, static_cast<scmp_datum_t>(::getpid()))});
  f.allow(SCMP_SYS(restart_syscall));

  // Leaving.
  f.allow(SCMP_SYS(exit_group));
  f.allow(SCMP_SYS(exit));

#if defined(ABOX_SANDBOX_ASAN)
  // ASan + UBSan builds only (ABOX_SANITIZE=ON), for the sanitizer runtime:
  // LeakSanitizer's check at exit runs in a clone()d task that ptrace()s
  // this one and reads /proc/self/maps and /proc/self/task (open, openat,
  // getdents, read-only); reports go through sigaltstack'd handlers and the
  // built-in symbolizer (which reads the binary: openat, lseek, readlink);
  // UBSan probes memory by writing it to a pipe (pipe2). Found by running
  // the e2e suites with SCMP_ACT_LOG. None of this is in a release build.
  f.allow(SCMP_SYS(openat), {arg_clear(2, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});
  f.allow(SCMP_SYS(open),
          {arg_clear(1, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});  // raw, in the runtime
  f.allow(SCMP_SYS(getdents64));
  f.allow(SCMP_SYS(getdents));  // raw, in the runtime
  f.allow(SCMP_SYS(lseek));
  f.allow(SCMP_SYS(readlink));
  f.allow(SCMP_SYS(readlinkat));
  f.allow(SCMP_SYS(clone));
  f.allow(SCMP_SYS(ptrace));
  f.allow(SCMP_SYS(wait4));
  f.allow(SCMP_SYS(prctl));
  f.allow(SCMP_SYS(sched_yield));
  f.allow(SCMP_SYS(sigaltstack));
  f.allow(SCMP_SYS(getppid));
  f.allow(SCMP_SYS(sched_getaffinity));
  f.allow(SCMP_SYS(pipe2));
  f.allow(SCMP_SYS(nanosleep));
  f.allow(SCMP_SYS(clock_nanosleep));
  f.allow(SCMP_SYS(kill));
  f.allow(SCMP_SYS(tgkill));
#endif
}

}  // namespace

std::vector<io_uring_restriction> ring_restrictions() {
  std::vector<io_uring_restriction> out;
  // Used today by io::EventLoop: multishot polls on fds, their removal, and the
  // timeout that older kernels need for io_uring_submit_and_wait_timeout;
  // GuestStack's ring reads of the tap (READV) and io::RingWriter's writes to it
  // and to host UDP sockets (WRITE); UDP flows' multishot receives (RECV
  // with BUFFER_SELECT) into io::ReceiveBufferPool's buffers (PROVIDE_BUFFERS,
  // REMOVE_BUFFERS, with CQE_SKIP_SUCCESS); and their cancellation when a
  // flow or the stack goes (ASYNC_CANCEL).
  for (auto op : {IORING_OP_POLL_ADD, IORING_OP_POLL_REMOVE, IORING_OP_TIMEOUT}) out.push_back(sqe_op(op));
  // The same kind of work the seccomp list allows as syscalls, on fds the
  // process already has, so I/O can move onto the ring without reopening
  // this: no operation here names a path (OPENAT, STATX, UNLINKAT ...) or
  // makes a socket (SOCKET would skip socket()'s family check).
  for (auto op : {IORING_OP_NOP, IORING_OP_ASYNC_CANCEL, IORING_OP_TIMEOUT_REMOVE, IORING_OP_LINK_TIMEOUT,
                  IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_RECV,
                  IORING_OP_SEND, IORING_OP_RECVMSG, IORING_OP_SENDMSG, IORING_OP_ACCEPT, IORING_OP_CONNECT,
                  IORING_OP_SHUTDOWN, IORING_OP_CLOSE, IORING_OP_PROVIDE_BUFFERS, IORING_OP_REMOVE_BUFFERS}) {
    out.push_back(sqe_op(op));
  }
  // SQE flags: everything except IOSQE_FIXED_FILE (no files are registered,
  // and none can be: no register operation is allowed).
  io_uring_restriction flags{};
  flags.opcode = IORING_RESTRICTION_SQE_FLAGS_ALLOWED;
  flags.sqe_flags = IOSQE_IO_DRAIN | IOSQE_IO_LINK | IOSQE_IO_HARDLINK | IOSQE_ASYNC | IOSQE_BUFFER_SELECT |
                    IOSQE_CQE_SKIP_SUCCESS;
  out.push_back(flags);
  return out;
}

base::Result<void, std::string> drop_privileges() {
  // Steps 2 and 3 are shared with the broker's sandbox (base/drop_privileges.h).
  return base::drop_privileges();
}

base::Result<void, std::string> install_syscall_filter() {
  // What the C library does lazily on first use, with syscalls the filter
  // forbids, is done now: time conversion (gmtime_r in the event log) reads
  // /etc/localtime once.
  ::tzset();
  Filter filter(seccomp_init(SCMP_ACT_KILL_PROCESS));
  if (!filter) return base::Err{std::string("seccomp_init failed")};
  // A syscall from another ABI (i386 via int 0x80, x32) is killed too.
  if (int rc = seccomp_attr_set(filter.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0) {
    return base::Err{errno_text("seccomp_attr_set(ACT_BADARCH)", -rc)};
  }
  FilterBuilder builder(filter.get());
  add_allowed_syscalls(builder);
  if (builder.error() != 0) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, builder.error_nr());
    std::string what = name != nullptr ? name : std::to_string(builder.error_nr());
    std::free(name);
    return base::Err{errno_text("cannot add the seccomp rule for " + what, builder.error())};
  }
  if (int rc = seccomp_load(filter.get()); rc < 0) return base::Err{errno_text("seccomp_load", -rc)};
  return {};
}

base::Result<void, std::string> lock_ring_and_drop_privileges(io::EventLoop& loop) {
  const auto restrictions = ring_restrictions();
  if (int rc = loop.enable_ring(restrictions); rc < 0) {
    return base::Err{errno_text("cannot restrict the io_uring (IORING_REGISTER_RESTRICTIONS)", -rc)};
  }
  return drop_privileges();
}

base::Result<void, std::string> enter_sandbox(io::EventLoop& loop) {
  if (auto r = lock_ring_and_drop_privileges(loop); !r) return r;
  return install_syscall_filter();
}

}  // namespace abox::netstack
