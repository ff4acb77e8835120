// What a GuestStack on a StreamLink needs, for the tests that run one with
// the test itself as the VMM (stream_link_test.cc, run_stats_test.cc): a
// policy that allows example.com:443, a DNS upstream nobody answers
// (127.0.0.1:9), a discarding event log, a seeded random source, an event
// loop, and a StreamLink on one end of a socketpair whose other end, `vmm`,
// the test writes and reads.
//
// Invariants: lwIP is reset first (tests/netstack/lwip/lwip_test_state.h),
// so that the stack starts from the state a process starts in, whatever ran
// before; a part that cannot be made fails the test (ADD_FAILURE) and
// leaves `link` null: a test checks ASSERT_TRUE(rig.link) before it builds
// its GuestStack.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "base/event_log.h"
#include "base/random.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/link/stream_link.h"
#include "policy/policy_file.h"
#include "tests/netstack/lwip/lwip_test_state.h"

namespace abox::netstack::stream_stack_test {

inline policy::Policy allow_example_policy() {
  auto parsed = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.com\"]\nports = [443]\n",
      "stream-stack-test.toml");
  if (!parsed.ok()) ADD_FAILURE() << parsed.error().to_string();
  return std::move(parsed).value();
}

struct StreamStackRig {
  // clock: the loop's (empty: the monotonic clock).
  explicit StreamStackRig(std::size_t mtu, io::EventLoop::Clock clock = {}) : loop(256, std::move(clock)) {
    // lwIP as no earlier test of this process left it (lwip_test_state.h).
    lwip_test::reset_lwip_state();
    std::array<int, 2> sv{};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()) != 0) {
      ADD_FAILURE() << "socketpair: " << std::strerror(errno);
      return;
    }
    vmm = base::UniqueFd(sv[1]);
    auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), mtu);
    if (!made.ok()) {
      ADD_FAILURE() << made.error();
      return;
    }
    link = std::move(made).value();
  }

  const policy::Policy policy = allow_example_policy();
  const std::vector<policy::Endpoint> upstreams = {policy::Endpoint{policy::IpAddress::v4(0x7F00'0001), 9}};
  base::EventLog events = base::EventLog::discard();
  base::SeededRandom random{1};
  io::EventLoop loop;
  base::UniqueFd vmm;
  std::unique_ptr<StreamLink> link;
};

// Writes all of `bytes` to a blocking socket (as the VMM).
inline void write_all(int fd, const std::vector<std::uint8_t>& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace abox::netstack::stream_stack_test
