#include "broker/sandbox.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/drop_privileges.h"
#include "io/event_loop.h"

// libseccomp rather than hand-written BPF, as abox-net (netstack/program/sandbox.cc
// says why: the architecture check, per-ABI syscall numbers, argument
// comparisons). This list is the broker's own: it runs the same io_uring
// loop as abox-net (io/event_loop.h) but does its I/O with BoringSSL on
// plain sockets, so its ring does far less (broker_ring_restrictions()).

#if defined(__SANITIZE_ADDRESS__)
#define ABOX_BROKER_SANDBOX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABOX_BROKER_SANDBOX_ASAN 1
#endif
#endif

namespace abox::broker {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

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
  // The event loop (io/event_loop.cc): io_uring_enter hands over what is
  // queued and waits (io_uring_submit_and_wait_timeout). Not io_uring_setup
  // (one ring, made at startup) nor io_uring_register (the ring is locked by
  // its restrictions, registered before this filter).
  f.allow(SCMP_SYS(io_uring_enter));

  // Bytes on fds the broker has: TLS to the guest and to the provider
  // (BoringSSL's fd BIO: read, write), the hand-off line (recv with MSG_PEEK,
  // then recv = recvfrom), an idle pooled connection's check
  // (upstream_pool.cc: recv MSG_PEEK), the resolver's UDP (send = sendto,
  // recv), the signalfd (read), getifaddrs' netlink dump (sendto, recvmsg),
  // the event log, stdout/stderr and the stats fd (write).
  f.allow(SCMP_SYS(read));
  f.allow(SCMP_SYS(readv));
  f.allow(SCMP_SYS(write));
  f.allow(SCMP_SYS(writev));
  f.allow(SCMP_SYS(recvfrom));
  f.allow(SCMP_SYS(recvmsg));
  f.allow(SCMP_SYS(sendto));
  f.allow(SCMP_SYS(sendmsg));

  // New sockets: the provider's TCP and the resolver's UDP (AF_INET,
  // AF_INET6), getifaddrs' netlink (AF_NETLINK, NETLINK_ROUTE only: a read
  // of this host's addresses; changing anything there needs a capability
  // the broker no longer has). No AF_UNIX (abox-net connects to the broker,
  // never the other way), AF_PACKET, vsock ...
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_INET)});
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_INET6)});
  f.allow(SCMP_SYS(socket), {arg_eq(0, AF_NETLINK), arg_eq(2, NETLINK_ROUTE)});
  // getifaddrs binds its netlink socket (to the kernel's port id) and asks
  // its name. (listen() is not allowed, so nothing bound can serve.)
  f.allow(SCMP_SYS(bind));
  f.allow(SCMP_SYS(getsockname));
  f.allow(SCMP_SYS(getpeername));
  // Upstream connect (non-blocking, then SO_ERROR), the resolver's connected
  // UDP, TCP_NODELAY on accepted and upstream sockets.
  f.allow(SCMP_SYS(connect));
  f.allow(SCMP_SYS(setsockopt));
  f.allow(SCMP_SYS(getsockopt));
  f.allow(SCMP_SYS(shutdown));
  // The listening socket (service.cc on_accept), made before the filter.
  f.allow(SCMP_SYS(accept4));
  // base::UniqueFd, everywhere.
  f.allow(SCMP_SYS(close));
  // O_NONBLOCK and FD_CLOEXEC on an fd (F_GETFL/F_SETFL/F_GETFD/F_SETFD only).
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFL)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFL)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_GETFD)});
  f.allow(SCMP_SYS(fcntl), {arg_eq(1, F_SETFD)});
  // stdio's first write to a stream (fstat) and whether it is a terminal.
  f.allow(SCMP_SYS(fstat));
  f.allow(SCMP_SYS(newfstatat));
  f.allow(SCMP_SYS(ioctl), {arg_eq(1, TCGETS)});

  // Time: the loop's clock and certificates' validity (normally the vDSO;
  // these when it falls back). Randomness: BoringSSL (leaf keys, TLS),
  // nonce checks.
  f.allow(SCMP_SYS(clock_gettime));
  f.allow(SCMP_SYS(gettimeofday));
  f.allow(SCMP_SYS(time));
  f.allow(SCMP_SYS(getrandom));

  // malloc and the C++ runtime: heap growth, large blocks, returning memory;
  // BoringSSL marks its random state MADV_WIPEONFORK. Never executable memory.
  f.allow(SCMP_SYS(brk));
  f.allow(SCMP_SYS(mmap), {arg_clear(2, PROT_EXEC)});
  f.allow(SCMP_SYS(mprotect), {arg_clear(2, PROT_EXEC)});
  f.allow(SCMP_SYS(munmap));
  f.allow(SCMP_SYS(mremap));
  f.allow(SCMP_SYS(madvise));
  // libstdc++, glibc and BoringSSL locks (never contended: one thread).
  f.allow(SCMP_SYS(futex));

  // Signals: the signalfd is read with read(); these are for returning from
  // a handler and for abort() (a failed assertion must end in SIGABRT, not
  // SIGSYS): it blocks signals, resets the handler and raises SIGABRT at
  // this very process.
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

#if defined(ABOX_BROKER_SANDBOX_ASAN)
  // ASan + UBSan builds only (ABOX_SANITIZE=ON), for the sanitizer runtime,
  // as in netstack/program/sandbox.cc: LeakSanitizer's check at exit runs in a
  // clone()d task that ptrace()s this one and reads /proc/self/maps and
  // /proc/self/task (open, openat, getdents, read-only); reports go through
  // sigaltstack'd handlers and the built-in symbolizer (which reads the
  // binary: openat, lseek, readlink); UBSan probes memory by writing it to a
  // pipe (pipe2). None of this is in a release build.
  f.allow(SCMP_SYS(openat), {arg_clear(2, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});
  f.allow(SCMP_SYS(open), {arg_clear(1, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)});
  f.allow(SCMP_SYS(getdents64));
  f.allow(SCMP_SYS(getdents));
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

base::Result<void, std::string> install_filter() {
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

}  // namespace

std::vector<io_uring_restriction> broker_ring_restrictions() {
  std::vector<io_uring_restriction> out;
  auto op = [&out](std::uint8_t code) {
    io_uring_restriction r{};
    r.opcode = IORING_RESTRICTION_SQE_OP;
    r.sqe_op = code;
    out.push_back(r);
  };
  // What io::EventLoop does for the broker: one-shot polls on fds
  // (POLL_ADD), their removal and replacement (POLL_REMOVE), and the timeout
  // that older kernels need for io_uring_submit_and_wait_timeout (TIMEOUT).
  // Nothing that reads, writes, opens or makes anything: the broker's bytes
  // go through read/write system calls the seccomp list names.
  op(IORING_OP_POLL_ADD);
  op(IORING_OP_POLL_REMOVE);
  op(IORING_OP_TIMEOUT);
  // No SQE flags at all (no fixed files: none can be registered).
  io_uring_restriction flags{};
  flags.opcode = IORING_RESTRICTION_SQE_FLAGS_ALLOWED;
  flags.sqe_flags = 0;
  out.push_back(flags);
  return out;
}

base::Result<void, std::string> enter_broker_sandbox(io::EventLoop& loop) {
  const auto restrictions = broker_ring_restrictions();
  if (int rc = loop.enable_ring(restrictions); rc < 0) {
    return base::Err{errno_text("cannot restrict the io_uring (IORING_REGISTER_RESTRICTIONS)", -rc)};
  }
  if (auto r = base::drop_privileges(); !r.ok()) return r;
  return install_filter();
}

}  // namespace abox::broker
