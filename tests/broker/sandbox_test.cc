// The broker's sandbox, for real: each case forks a child that enters the
// sandbox `abox broker` enters (broker/sandbox.h) and then tries one thing. A
// forbidden syscall must end the child with SIGSYS (SECCOMP_RET_KILL_PROCESS);
// what the broker needs (its io_uring loop, sockets to providers and the resolver,
// getifaddrs, BoringSSL's randomness and memory, time) must keep working.
// The capability check needs root (CI runs as root).
#include "broker/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>

#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "tests/support/asan.h"
#include "tests/support/needs_root.h"

namespace abox::broker {
namespace {

struct ChildEnd {
  bool exited = false;
  int code = -1;
  int signal = 0;
};

// Runs body in a forked child, after the broker's sandbox (exit 90 if that
// fails); its return value is the exit code. The child never returns into gtest.
ChildEnd sandboxed(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    io::EventLoop loop;  // made before the sandbox, as the broker's is
    if (auto r = enter_broker_sandbox(loop); !r.ok()) {
      std::fprintf(stderr, "enter_broker_sandbox: %s\n", r.error().c_str());
      ::_exit(90);
    }
    ::_exit(body());
  }
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

void expect_killed(const char* what, const std::function<int()>& body) {
  ChildEnd end = sandboxed(body);
  EXPECT_FALSE(end.exited) << what << ": the child exited with " << end.code << " instead of dying";
  EXPECT_EQ(end.signal, SIGSYS) << what;
}

TEST(BrokerSandbox, WhatTheBrokerNeedsStillWorks) {
  // The loop and the listener are made before the sandbox, as the broker's are.
  const pid_t pid = ::fork();
  if (pid == 0) {
    io::EventLoop loop;
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) ::_exit(10);
    base::UniqueFd rd(fds[0]), wr(fds[1]);
    base::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
        ::listen(listener.get(), 4) != 0)
      ::_exit(11);
    socklen_t len = sizeof any;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&any), &len);
    if (auto r = enter_broker_sandbox(loop); !r.ok()) ::_exit(90);

    // The loop on its restricted ring: a level watch, its change and its end.
    struct Seen final : io::EventLoop::Watcher {
      void on_ready(std::uint32_t e) override { events |= e; }
      std::uint32_t events = 0;
    } seen;
    auto h = loop.watch(rd.get(), POLLIN, &seen, io::EventLoop::Trigger::level);
    if (::write(wr.get(), "x", 1) != 1) ::_exit(13);
    for (int i = 0; i < 100 && (seen.events & POLLIN) == 0; ++i) loop.run_once(base::Millis(10));
    if ((seen.events & POLLIN) == 0) ::_exit(14);
    loop.modify(h, POLLIN | POLLOUT);
    loop.unwatch(h);
    loop.run_once(base::Millis(0));
    auto wait_a_little = [&loop] { loop.run_once(base::Millis(10)); };
    // An upstream connection (to the listener made before), accepted.
    base::UniqueFd up(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!up) ::_exit(15);
    int one = 1;
    if (::setsockopt(up.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) ::_exit(16);
    if (::connect(up.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 && errno != EINPROGRESS)
      ::_exit(17);
    base::UniqueFd accepted;
    for (int i = 0; i < 100 && !accepted; ++i) {
      accepted.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!accepted) wait_a_little();
    }
    if (!accepted) ::_exit(18);
    int err = 0;
    len = sizeof err;
    if (::getsockopt(up.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) ::_exit(19);
    if (::send(up.get(), "hi", 2, 0) != 2) ::_exit(20);
    char buf[4];
    ssize_t got = -1;
    for (int i = 0; i < 100 && got <= 0; ++i) {
      got = ::recv(accepted.get(), buf, sizeof buf, MSG_PEEK);
      if (got <= 0) wait_a_little();
    }
    if (got != 2) ::_exit(21);
    // The resolver's UDP, IPv6 too; this host's addresses (getifaddrs: netlink).
    base::UniqueFd udp(::socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!udp) ::_exit(22);
    ifaddrs* addrs = nullptr;
    if (::getifaddrs(&addrs) != 0) ::_exit(23);
    ::freeifaddrs(addrs);
    // Randomness, memory (large blocks are mmapped), time.
    unsigned char rnd[32];
    if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) ::_exit(24);
    void* big = std::malloc(32u << 20);
    if (big == nullptr) ::_exit(25);
    std::memset(big, 1, 32u << 20);
    std::free(big);
    timespec ts{};
    if (::clock_gettime(CLOCK_REALTIME, &ts) != 0 || std::time(nullptr) <= 0) ::_exit(26);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(BrokerSandbox, ForbiddenSyscallsKillTheProcess) {
  expect_killed("execve", [] {
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    ::execve("/bin/true", argv, environ);
    return 0;
  });
  expect_killed("open for writing", [] {
    int fd = ::open("/tmp/abox-broker-sandbox-must-not-exist", O_WRONLY | O_CREAT, 0600);
    return fd >= 0 ? 1 : 2;
  });
#if !defined(ABOX_TEST_ASAN)
  // The sanitizer build allows read-only opens for its runtime (sandbox.cc).
  expect_killed("open for reading (the credential store, say)", [] {
    int fd = ::open("/etc/hostname", O_RDONLY);
    return fd >= 0 ? 1 : 2;
  });
#endif
  expect_killed("unlink", [] { return ::unlink("/tmp/abox-broker-sandbox-must-not-exist") == 0 ? 1 : 2; });
  expect_killed("rename", [] { return ::rename("/tmp/abox-a", "/tmp/abox-b") == 0 ? 1 : 2; });
  expect_killed("socket(AF_UNIX)", [] { return ::socket(AF_UNIX, SOCK_STREAM, 0) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_PACKET)", [] { return ::socket(AF_PACKET, SOCK_RAW, 0) >= 0 ? 1 : 2; });
  expect_killed("socket(AF_NETLINK) other than NETLINK_ROUTE",
                [] { return ::socket(AF_NETLINK, SOCK_RAW, 9 /* NETLINK_AUDIT */) >= 0 ? 1 : 2; });
  expect_killed("listen (no new listener)", [] {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    return ::listen(s, 1) == 0 ? 1 : 2;
  });
  expect_killed("epoll_create (no other loop)", [] { return ::epoll_create1(0) >= 0 ? 1 : 2; });
  expect_killed("io_uring_register (the ring is locked)",
                [] { return ::syscall(__NR_io_uring_register, 0, 0, nullptr, 0) == 0 ? 1 : 2; });
  expect_killed("mmap with PROT_EXEC", [] {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 2 : 1;
  });
  expect_killed("mprotect to PROT_EXEC", [] {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 3;
    return ::mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0 ? 1 : 2;
  });
  expect_killed("setns", [] { return ::syscall(SYS_setns, 0, 0) == 0 ? 1 : 2; });
  expect_killed("io_uring_setup", [] { return ::syscall(__NR_io_uring_setup, 8, nullptr) == 0 ? 1 : 2; });
  expect_killed("ioctl other than TCGETS", [] { return ::ioctl(0, FIONREAD, nullptr) == 0 ? 1 : 2; });
#if !defined(ABOX_TEST_ASAN)
  // The sanitizer build allows these for its runtime (sandbox.cc).
  expect_killed("signal to another process", [] { return ::syscall(SYS_tgkill, 1, 1, 0) == 0 ? 1 : 2; });
  expect_killed("ptrace", [] { return ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0 ? 1 : 2; });
  expect_killed("clone (a thread or a child)", [] { return ::fork() >= 0 ? 1 : 2; });
  expect_killed("prctl", [] { return ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0 ? 1 : 2; });
#endif
}

// The ring takes only what the loop does for the broker: an operation off
// its list (a read, which would bypass the seccomp list's view of I/O)
// completes with EACCES instead of running.
TEST(BrokerSandbox, TheRingRefusesOperationsOffItsList) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    io::EventLoop loop;
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) ::_exit(10);
    base::UniqueFd rd(fds[0]), wr(fds[1]);
    if (::write(wr.get(), "x", 1) != 1) ::_exit(11);
    if (auto r = enter_broker_sandbox(loop); !r.ok()) ::_exit(90);
    struct Result final : io::EventLoop::Completion {
      void on_complete(int r, std::uint32_t) override {
        res = r;
        done = true;
      }
      int res = 0;
      bool done = false;
    } result;
    char buf[4];
    io_uring_prep_read(loop.request(&result), rd.get(), buf, sizeof buf, 0);
    for (int i = 0; i < 100 && !result.done; ++i) loop.run_once(base::Millis(10));
    if (!result.done) ::_exit(12);
    ::_exit(result.res == -EACCES ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "13: the read ran (or failed otherwise)";
}

TEST(BrokerSandbox, AbortStillEndsInSigabrt) {
  ChildEnd end = sandboxed([]() -> int { std::abort(); });
  EXPECT_EQ(end.signal, SIGABRT);
}

// What /proc/self/status says of a sandboxed broker (the e2e suites read the
// same lines of the real one): NoNewPrivs 1, Seccomp 2, CapEff 0.
TEST(BrokerSandbox, StatusShowsNoNewPrivsSeccompAndNoCapabilities) {
  ABOX_NEEDS_ROOT("needs root to hold capabilities in the first place (CI runs as root)");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    // Read before the sandbox (open is forbidden after): the fd stays open.
    base::UniqueFd status(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
    io::EventLoop loop;
    if (!status || !enter_broker_sandbox(loop).ok()) ::_exit(90);
    char buf[8192];
    const ssize_t n = ::read(status.get(), buf, sizeof buf);  // made when read: after the sandbox
    if (n > 0) (void)!::write(p[1], buf, static_cast<std::size_t>(n));
    ::_exit(0);
  }
  ::close(p[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n" << text;
  EXPECT_NE(text.find("NoNewPrivs:\t1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Seccomp:\t2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CapEff:\t0000000000000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CapPrm:\t0000000000000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CapBnd:\t0000000000000000\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace abox::broker
