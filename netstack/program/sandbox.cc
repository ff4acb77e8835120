#include "netstack/program/sandbox.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <utility>

#include "base/drop_privileges.h"
#include "io/syscall_filter.h"

namespace abox::netstack {

namespace {

using io::arg_eq;
using io::arg_masked_eq;

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// The allowlist. Each entry names who needs it; keep it that way when adding.
void add_allowed_syscalls(io::SyscallFilter& f) {
  f.allow_process_runtime();

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

  // Upstream flows: TcpFlow::connect_host (stream), UdpFlow::start, the
  // route probe and the DNS upstream client (datagram), each with protocol
  // 0, and EchoFlow::start (the unprivileged ping sockets: datagram with
  // IPPROTO_ICMP, IPPROTO_ICMPV6) make sockets to the internet (AF_INET,
  // AF_INET6): those and nothing else of these families (no raw socket, no
  // SCTP ...); the type is compared without its SOCK_NONBLOCK/SOCK_CLOEXEC
  // flags. The broker's flows are AF_UNIX stream sockets. No other family
  // (netlink, packet, vsock ... stay out of reach).
  constexpr scmp_datum_t kSocketTypeMask = 0xF;  // SOCK_TYPE_MASK
  for (const auto& [family, ping_protocol] :
       {std::pair{AF_INET, int{IPPROTO_ICMP}}, std::pair{AF_INET6, int{IPPROTO_ICMPV6}}}) {
    const auto fam = static_cast<scmp_datum_t>(family);
    f.allow(SCMP_SYS(socket), {arg_eq(0, fam), arg_masked_eq(1, kSocketTypeMask, SOCK_STREAM), arg_eq(2, 0)});
    f.allow(SCMP_SYS(socket), {arg_eq(0, fam), arg_masked_eq(1, kSocketTypeMask, SOCK_DGRAM), arg_eq(2, 0)});
    f.allow(SCMP_SYS(socket), {arg_eq(0, fam), arg_masked_eq(1, kSocketTypeMask, SOCK_DGRAM),
                               arg_eq(2, static_cast<scmp_datum_t>(ping_protocol))});
  }
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

  // TapLink::netns_alive for a /proc/PID/ns/net guest: signal 0 (only) to
  // the pidfd of that process, which asks whether it still runs. (Its stat
  // of a namespace path, the pcap writer's clock and MemoryTrimmer's
  // madvise and brk are in allow_process_runtime().)
  f.allow(SCMP_SYS(pidfd_send_signal), {arg_eq(1, 0)});
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
  for (auto op : {IORING_OP_POLL_ADD, IORING_OP_POLL_REMOVE, IORING_OP_TIMEOUT})
    out.push_back(io::ring_op(op));
  // The same kind of work the seccomp list allows as syscalls, on fds the
  // process already has, so I/O can move onto the ring without reopening
  // this: no operation here names a path (OPENAT, STATX, UNLINKAT ...) or
  // makes a socket (SOCKET would skip socket()'s family check).
  for (auto op : {IORING_OP_NOP, IORING_OP_ASYNC_CANCEL, IORING_OP_TIMEOUT_REMOVE, IORING_OP_LINK_TIMEOUT,
                  IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_RECV,
                  IORING_OP_SEND, IORING_OP_RECVMSG, IORING_OP_SENDMSG, IORING_OP_ACCEPT, IORING_OP_CONNECT,
                  IORING_OP_SHUTDOWN, IORING_OP_CLOSE, IORING_OP_PROVIDE_BUFFERS, IORING_OP_REMOVE_BUFFERS}) {
    out.push_back(io::ring_op(op));
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
  io::SyscallFilter filter;
  add_allowed_syscalls(filter);
  return filter.load();
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
