// The sandbox, for real: each case forks a child that enters the same
// sandbox abox-net enters (or one of its steps) and then tries one thing.
// A forbidden syscall must end the child with SIGSYS (SECCOMP_RET_KILL_PROCESS);
// what abox-net needs must keep working. The io_uring restrictions are
// checked on a ring of the test's own: an operation that names a path is
// refused with EACCES, a poll still works.
//
// Needs seccomp and io_uring (every kernel abox-net supports); the
// capability checks need root (CI runs as root).
#include "netstack/program/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "base/unique_fd.h"
#include "tests/support/asan.h"
#include "tests/support/needs_root.h"

namespace abox::netstack {
namespace {

struct ChildEnd {
  bool exited = false;
  int code = -1;
  int signal = 0;
};

// Runs body in a forked child; its return value is the exit code. The child
// never returns into gtest.
ChildEnd in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  ChildEnd end;
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return end;
  if (WIFEXITED(status)) {
    end.exited = true;
    end.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
  }
  return end;
}

// A child that enters the full sandbox (exit 90 if that fails), then runs body.
ChildEnd sandboxed(const std::function<int()>& body) {
  return in_child([&] {
    io::EventLoop loop;
    if (auto r = enter_sandbox(loop); !r.ok()) {
      std::fprintf(stderr, "enter_sandbox: %s\n", r.error().c_str());
      return 90;
    }
    return body();
  });
}

void expect_killed(const char* what, const std::function<int()>& body) {
  ChildEnd end = sandboxed(body);
  EXPECT_FALSE(end.exited) << what << ": the child exited with " << end.code << " instead of dying";
  EXPECT_EQ(end.signal, SIGSYS) << what;
}

TEST(Sandbox, WhatAboxNetNeedsStillWorks) {
  ChildEnd end = sandboxed([] {
    // A loop watching a pipe: the ring still polls.
    io::EventLoop loop;  // made before the sandbox in abox-net; here a second ring would be io_uring_setup
    return 0;
  });
  // io_uring_setup after the sandbox is forbidden: the line above proves it.
  EXPECT_EQ(end.signal, SIGSYS);

  end = in_child([] {
    io::EventLoop loop;
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return 10;
    base::UniqueFd rd(fds[0]), wr(fds[1]);
    struct Seen : io::EventLoop::Watcher {
      int fired = 0;
      void on_ready(std::uint32_t) override { ++fired; }
    } seen;
    loop.watch(rd.get(), POLLIN, &seen);
    if (auto r = enter_sandbox(loop); !r.ok()) return 11;
    if (::write(wr.get(), "x", 1) != 1) return 12;
    for (int i = 0; i < 20 && seen.fired == 0; ++i) loop.run_once(base::Millis(50));
    if (seen.fired == 0) return 13;
    // Upstream sockets of the allowed families, and what flows do with them.
    for (int family : {AF_INET, AF_INET6, AF_UNIX}) {
      base::UniqueFd s(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!s) return 14;
      int one = 1;
      if (family != AF_UNIX && ::setsockopt(s.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0)
        return 15;
    }
    base::UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!udp) return 16;
    // EchoFlow's ping sockets: allowed by the filter (the kernel may still
    // refuse them by net.ipv4.ping_group_range: EACCES, not a kill).
    for (auto [family, protocol] :
         {std::pair{AF_INET, int{IPPROTO_ICMP}}, std::pair{AF_INET6, int{IPPROTO_ICMPV6}}}) {
      base::UniqueFd ping(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol));
      if (!ping && errno != EACCES) return 20;
    }
    // Random bytes, memory (large blocks are mmapped), time.
    unsigned char rnd[16];
    if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) return 17;
    void* big = std::malloc(64u << 20);
    if (big == nullptr) return 18;
    std::memset(big, 1, 64u << 20);
    std::free(big);
    timespec ts{};
    if (::clock_gettime(CLOCK_REALTIME, &ts) != 0) return 19;
    return 0;
  });
  EXPECT_TRUE(end.exited) << "killed by signal " << end.signal;
  EXPECT_EQ(end.code, 0);
}

TEST(Sandbox, ForbiddenSyscallsKillTheProcess) {
  expect_killed("execve", [] {
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    ::execve("/bin/true", argv, environ);
    return 0;
  });
  expect_killed("open for writing", [] {
    int fd = ::open("/tmp/abox-sandbox-test-must-not-exist", O_WRONLY | O_CREAT, 0600);
    return fd >= 0 ? 1 : 2;
  });
  expect_killed("socket(AF_NETLINK)", [] { return ::socket(AF_NETLINK, SOCK_RAW, 0) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_PACKET)", [] { return ::socket(AF_PACKET, SOCK_RAW, 0) >= 0 ? 1 : 2; });
  // AF_INET and AF_INET6: stream and datagram with protocol 0, and the ping
  // sockets; nothing else (a raw socket, SCTP, ICMPv6 on an IPv4 socket).
  expect_killed("socket(AF_INET, SOCK_RAW)",
                [] { return ::socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_INET6, SOCK_RAW)",
                [] { return ::socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)",
                [] { return ::socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMPV6)",
                [] { return ::socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMPV6) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_INET6, SOCK_SEQPACKET)",
                [] { return ::socket(AF_INET6, SOCK_SEQPACKET, 0) >= 0 ? 1 : 2; });
  expect_killed("io_uring_setup", [] {
    io_uring ring{};
    return io_uring_queue_init(8, &ring, 0) == 0 ? 1 : 2;
  });
  expect_killed("io_uring_register", [] {
    return ::syscall(__NR_io_uring_register, 3, IORING_REGISTER_PROBE, nullptr, 0) == 0 ? 1 : 2;
  });
  expect_killed("mmap with PROT_EXEC", [] {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 2 : 1;
  });
  expect_killed("mprotect to PROT_EXEC", [] {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 3;
    return ::mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0 ? 1 : 2;
  });
  expect_killed("unlink", [] { return ::unlink("/tmp/abox-sandbox-test-must-not-exist") == 0 ? 1 : 2; });
  expect_killed("setns", [] { return ::syscall(SYS_setns, 0, 0) == 0 ? 1 : 2; });
  expect_killed("ioctl other than TCGETS", [] { return ::ioctl(0, FIONREAD, nullptr) == 0 ? 1 : 2; });
#if !defined(ABOX_TEST_ASAN)
  // The sanitizer build allows these for its runtime (sandbox.cc).
  expect_killed("signal to another process", [] { return ::syscall(SYS_tgkill, 1, 1, 0) == 0 ? 1 : 2; });
  expect_killed("ptrace", [] { return ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0 ? 1 : 2; });
  expect_killed("clone (a thread or a child)", [] { return ::fork() >= 0 ? 1 : 2; });
  expect_killed("prctl", [] { return ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0 ? 1 : 2; });
#endif
}

TEST(Sandbox, AbortStillEndsInSigabrt) {
  // A failed assertion under the sandbox must look like one (a core, SIGABRT).
  ChildEnd end = sandboxed([]() -> int { std::abort(); });
  EXPECT_EQ(end.signal, SIGABRT);
}

TEST(Sandbox, DropsEveryCapabilityAndSetsNoNewPrivs) {
  ABOX_NEEDS_ROOT("needs root to hold capabilities in the first place (CI runs as root)");
  ChildEnd end = in_child([] {
    if (auto r = drop_privileges(); !r.ok()) return 10;
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return 11;
    for (const auto& d : data) {
      if (d.effective != 0 || d.permitted != 0 || d.inheritable != 0) return 12;
    }
    if (::prctl(PR_CAPBSET_READ, CAP_NET_ADMIN, 0, 0, 0) != 0) return 13;  // bounding set emptied
    if (::prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) != 0) return 14;
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_ADMIN, 0, 0) != 0) return 15;
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return 16;
    // uid 0 without capabilities: what root could do is refused now.
    if (::socket(AF_PACKET, SOCK_RAW, 0) >= 0 || errno != EPERM) return 17;
    if (::unshare(CLONE_NEWNET) == 0 || errno != EPERM) return 18;
    return 0;
  });
  EXPECT_TRUE(end.exited) << "signal " << end.signal;
  EXPECT_EQ(end.code, 0);
}

TEST(Sandbox, TheRingRefusesOperationsOutsideTheList) {
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_R_DISABLED;
  ASSERT_EQ(io_uring_queue_init_params(8, &ring, &params), 0);
  auto restrictions = ring_restrictions();
  ASSERT_EQ(io_uring_register(static_cast<unsigned>(ring.ring_fd), IORING_REGISTER_RESTRICTIONS,
                              restrictions.data(), static_cast<unsigned>(restrictions.size())),
            0);
  ASSERT_EQ(io_uring_register(static_cast<unsigned>(ring.ring_fd), IORING_REGISTER_ENABLE_RINGS, nullptr, 0),
            0);

  auto submit_one = [&](const std::function<void(io_uring_sqe*)>& prep) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    prep(sqe);
    EXPECT_EQ(io_uring_submit(&ring), 1);
    io_uring_cqe* cqe = nullptr;
    EXPECT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
    int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    return res;
  };
  EXPECT_EQ(
      submit_one([](io_uring_sqe* s) { io_uring_prep_openat(s, AT_FDCWD, "/etc/hostname", O_RDONLY, 0); }),
      -EACCES)
      << "OPENAT through the ring would skip the seccomp filter";
  EXPECT_EQ(submit_one([](io_uring_sqe* s) { io_uring_prep_socket(s, AF_NETLINK, SOCK_RAW, 0, 0); }),
            -EACCES);
  EXPECT_EQ(submit_one([](io_uring_sqe* s) { io_uring_prep_unlinkat(s, AT_FDCWD, "/tmp/x", 0); }), -EACCES);
  EXPECT_EQ(submit_one([](io_uring_sqe* s) { io_uring_prep_nop(s); }), 0);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  base::UniqueFd rd(fds[0]), wr(fds[1]);
  ASSERT_EQ(::write(wr.get(), "x", 1), 1);
  EXPECT_GT(submit_one([&](io_uring_sqe* s) { io_uring_prep_poll_add(s, rd.get(), POLLIN); }) & POLLIN, 0);
  // Registering anything after the restrictions: refused.
  EXPECT_LT(io_uring_register(static_cast<unsigned>(ring.ring_fd), IORING_REGISTER_PROBE, nullptr, 0), 0);
  io_uring_queue_exit(&ring);
}

TEST(Sandbox, EventLoopRingCanBeEnabledOnce) {
  io::EventLoop loop;
  EXPECT_EQ(loop.enable_ring(ring_restrictions()), 0);
  EXPECT_EQ(loop.enable_ring({}), -EBADFD);
  loop.run_once(base::Millis(0));  // the restricted ring waits and submits fine
}

}  // namespace
}  // namespace abox::netstack
