#include "broker/sandbox.h"

#include <linux/netlink.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/drop_privileges.h"
#include "io/event_loop.h"
#include "io/syscall_filter.h"

// The broker's own list (io/syscall_filter.h holds what every data-plane
// process needs): it runs the same io_uring loop as abox-net but does its
// I/O with BoringSSL on plain sockets, so its ring does far less
// (broker_ring_restrictions()).

namespace abox::broker {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

using io::arg_eq;

// The allowlist. Each entry names who needs it; keep it that way when adding.
void add_allowed_syscalls(io::SyscallFilter& f) {
  f.allow_process_runtime();

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
  // Time: certificates' validity (time(), besides the loop's clock in
  // allow_process_runtime()).
  f.allow(SCMP_SYS(time));
}

base::Result<void, std::string> install_filter() {
  io::SyscallFilter filter;
  add_allowed_syscalls(filter);
  return filter.load();
}

}  // namespace

std::vector<io_uring_restriction> broker_ring_restrictions() {
  std::vector<io_uring_restriction> out;
  auto op = [&out](std::uint8_t code) { out.push_back(io::ring_op(code)); };
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
