// DnsHostServer on port 0: UDP and TCP on one port the kernel picked, even
// when TCP holds the port UDP got first. That happens on any host that makes
// connections: a TCP socket connected from a port, or one in TIME_WAIT for
// 60 s after, keeps the port from TCP bind() (SO_REUSEADDR does not get past
// it) while UDP may still have it. The server used to throw then ("cannot
// bind 127.0.0.1:PORT: Address already in use"), which once failed
// StatsJson.DnsCountersReadBackByTheStatsReader when earlier tests had left
// their connections in TIME_WAIT.
//
// To make the collision certain rather than rare, the test runs in a network
// namespace of its own whose ephemeral range is two ports, one of them held
// by a TCP listener: every second pick of the old code failed. Needs root
// (CLONE_NEWNET): skipped otherwise, a failure where every test must run
// (tests/support/needs_root.h). Every step of the namespace's setup that
// fails is a failure, never a quiet pass.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/event_log.h"
#include "base/random.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/program/dns_host_server.h"
#include "policy/policy_file.h"
#include "tests/support/needs_root.h"

namespace abox::netstack {
namespace {

constexpr std::uint16_t kHeldByTcp = 40000;
constexpr std::uint16_t kFree = 40001;

bool write_file(const char* path, const std::string& text) {
  base::UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// In this thread's own namespace: lo up, the ephemeral range kHeldByTcp and
// kFree only, and kHeldByTcp taken by a TCP listener on 127.0.0.1 (returned:
// it holds the port while it lives).
base::UniqueFd narrow_namespace() {
  if (::unshare(CLONE_NEWNET) != 0) {
    ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
    return {};
  }
  base::UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  ifr.ifr_flags = 0;
  if (!s || ::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) {
    ADD_FAILURE() << "lo's flags: " << std::strerror(errno);
    return {};
  }
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
    ADD_FAILURE() << "lo up: " << std::strerror(errno);
    return {};
  }
  if (!write_file("/proc/sys/net/ipv4/ip_local_port_range",
                  std::to_string(kHeldByTcp) + " " + std::to_string(kFree))) {
    ADD_FAILURE() << "ip_local_port_range: " << std::strerror(errno);
    return {};
  }
  base::UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(kHeldByTcp);
  if (::bind(tcp.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(tcp.get(), 1) != 0) {
    ADD_FAILURE() << "the TCP listener on " << kHeldByTcp << ": " << std::strerror(errno);
    return {};
  }
  return tcp;
}

TEST(DnsHostServerPort, PortZeroFindsAPortFreeForBothUdpAndTcp) {
  ABOX_NEEDS_ROOT("needs root for a network namespace of its own");
  auto parsed = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.test\"]\nports = [443]\n",
      "port-test.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  const policy::Policy policy = std::move(parsed).value();
  // A thread of its own: the namespace goes with it, the test's stays.
  std::thread t([&] {
    const base::UniqueFd held = narrow_namespace();
    if (!held) return;
    const auto listen = policy::Endpoint::parse("127.0.0.1", 0);
    ASSERT_TRUE(listen);
    // Each pick of the kernel is either port; 16 servers in a row all get
    // the free one (the old code: all 16 by chance once in 65,536).
    for (int i = 0; i < 16; ++i) {
      io::EventLoop loop;
      base::EventLog events = base::EventLog::discard();
      base::SeededRandom random{static_cast<std::uint64_t>(i)};
      try {
        DnsHostServer server(loop, policy, policy.dns().upstreams, *listen, events, random);
        EXPECT_EQ(server.address().port, kFree) << "server " << i;
      } catch (const std::runtime_error& e) {
        ADD_FAILURE() << "server " << i << ": " << e.what();
        return;
      }
    }
    // A port asked for is that port or nothing: no other is tried.
    const auto held_port = policy::Endpoint::parse("127.0.0.1", kHeldByTcp);
    ASSERT_TRUE(held_port);
    io::EventLoop loop;
    base::EventLog events = base::EventLog::discard();
    base::SeededRandom random{99};
    EXPECT_THROW(DnsHostServer(loop, policy, policy.dns().upstreams, *held_port, events, random),
                 std::runtime_error);
  });
  t.join();
}

}  // namespace
}  // namespace abox::netstack
