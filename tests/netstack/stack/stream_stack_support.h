// What a GuestStack on a StreamLink needs, for the tests that run one with
// the test itself as the VMM (stream_link_test.cc, run_stats_test.cc): a
// policy that allows example.com:443, a DNS upstream nobody answers
// (127.0.0.1:9), a discarding event log, a seeded random source, an event
// loop, and a StreamLink on one end of a socketpair whose other end, `vmm`,
// the test writes and reads; and the two things every such test does as
// the VMM: hand the stack one frame and turn it (send_frame), and take the
// frames it wrote back (FramesSentBack).
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
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"
#include "tests/netstack/lwip/lwip_test_state.h"
#include "tests/netstack/stack/guest_wire.h"

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

// Writes one frame as the VMM (a length-prefixed record) and turns the
// stack until it is handled: four polls of the link, each with a turn of
// the loop that may not wait.
inline void send_frame(StreamStackRig& rig, GuestStack& stack, const std::vector<std::uint8_t>& frame) {
  write_all(rig.vmm.get(), guest_wire::record(frame));
  for (int i = 0; i < 4; ++i) {
    stack.poll_link();
    rig.loop.run_once(base::Millis(0));
  }
}

// The frames the stack wrote to the VMM's end, as whole records: take()
// reads what is there now (at most 64 reads, never waiting) and returns
// every frame complete since the last call; a record cut short between
// reads waits in `pending_` for the next call.
class FramesSentBack {
 public:
  explicit FramesSentBack(int vmm) : vmm_(vmm) {}
  std::vector<std::vector<std::uint8_t>> take() {
    for (int i = 0; i < 64; ++i) {
      std::array<std::uint8_t, 65536> chunk{};
      const ssize_t n = ::recv(vmm_, chunk.data(), chunk.size(), MSG_DONTWAIT);
      if (n <= 0) break;
      pending_.insert(pending_.end(), chunk.begin(), chunk.begin() + n);
    }
    std::vector<std::vector<std::uint8_t>> frames;
    std::size_t at = 0;
    while (pending_.size() - at >= 4) {
      const std::size_t len = (std::size_t{pending_[at]} << 24) | (std::size_t{pending_[at + 1]} << 16) |
                              (std::size_t{pending_[at + 2]} << 8) | pending_[at + 3];
      if (pending_.size() - at - 4 < len) break;
      frames.emplace_back(pending_.begin() + static_cast<long>(at + 4),
                          pending_.begin() + static_cast<long>(at + 4 + len));
      at += 4 + len;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(at));
    return frames;
  }

 private:
  int vmm_;
  std::vector<std::uint8_t> pending_;
};

}  // namespace abox::netstack::stream_stack_test
