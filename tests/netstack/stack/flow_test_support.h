// What the TcpFlow and UdpFlow tests share: a GuestStack (the flows'
// FlowServices) on a StreamLink with the test as the guest's VMM, the
// loop's clock in the test's hand, and real servers on loopback.
//
// The stack admits example.com on one port (the loopback server's), with
// 127.0.0.0/8 lifted by [unsafe] and example.com answered as 127.0.0.1, so
// each flow's host side is a real socket to a real server on this host.
// Time moves only when the test moves it (advance()): every deadline is
// reached without sleeping.
//
// Invariants: every wait is bounded in turns (and each turn waits at most a
// millisecond of real time, for the kernel's loopback); each test uses guest
// ports of its own (lwIP's pcbs are process-global and outlive a stack).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/stream_stack_support.h"

namespace abox::netstack::flow_test {

using guest_wire::Bytes;

constexpr std::uint32_t kLoopback = 0x7F00'0001;

// A non-blocking socket bound to 127.0.0.1 on a port of the kernel's choosing.
struct LoopbackSocket {
  base::UniqueFd fd;
  std::uint16_t port = 0;
};

inline LoopbackSocket loopback_socket(int type) {
  LoopbackSocket s;
  s.fd.reset(::socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.fd) {
    ADD_FAILURE() << "socket: " << std::strerror(errno);
    return s;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kLoopback);
  if (::bind(s.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ADD_FAILURE() << "bind: " << std::strerror(errno);
    return s;
  }
  socklen_t len = sizeof a;
  ::getsockname(s.fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  s.port = ntohs(a.sin_port);
  return s;
}

// A TCP listener on loopback. rcvbuf/sndbuf (when not 0) are set before
// listen(), so accepted sockets have them too.
inline LoopbackSocket tcp_listener(int backlog = 16, int rcvbuf = 0, int sndbuf = 0) {
  LoopbackSocket s = loopback_socket(SOCK_STREAM);
  if (!s.fd) return s;
  if (rcvbuf != 0) ::setsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (sndbuf != 0) ::setsockopt(s.fd.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (::listen(s.fd.get(), backlog) != 0) ADD_FAILURE() << "listen: " << std::strerror(errno);
  return s;
}

// Waits at most `ms` (real time) for fd to have `events`.
inline bool wait_for(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms) == 1;
}

struct StackOptions {
  std::uint16_t port = 0;    // the allowed port (the server's)
  bool verify_name = false;  // the rule's verify_name
  bool udp = false;          // protocols = ["tcp", "udp"]
  bool icmp = false;         // "icmp" in protocols too (echo)
  std::string extra;         // more policy: [timeouts], [limits], [dns]
  std::string rule_extra;    // more keys of the [[allow]] rule (budgets)
  bool host_io_on_ring = true;
};

// Options with more policy text; with the rule's verify_name on.
inline StackOptions with(std::string extra) {
  StackOptions o;
  o.extra = std::move(extra);
  return o;
}
inline StackOptions verified(std::string extra = {}) {
  StackOptions o = with(std::move(extra));
  o.verify_name = true;
  return o;
}

class FlowRig {
 public:
  FlowRig() : rig_(1500, [this] { return now_; }) {
    rig_.events = base::EventLog("flow-test", [this](std::string_view line) {
      event_lines_.emplace_back(line);
      return true;
    });
  }
  // The stack goes before the loop (its hooks stay registered on the loop:
  // the loop is not turned after).
  ~FlowRig() { stack_.reset(); }
  // The stack goes now (for what must outlive its flows but not the loop).
  void stop() { stack_.reset(); }

  // Makes the stack; the guest's ARP comes first, and example.com is
  // answered as 127.0.0.1 for `ttl`.
  // The policy text start() uses: example.com on o.port, 127.0.0.0/8
  // lifted (without the lift when !lift).
  static std::string policy_text(const StackOptions& o, bool lift = true) {
    std::string text = "[dns]\nupstreams = [\"127.0.0.1:9\"]\n";
    text += o.extra;
    text += "\n[[allow]]\nnames = [\"example.com\"]\nports = [" + std::to_string(o.port) + "]\n";
    if (o.udp || o.icmp) {
      text += "protocols = [\"tcp\"";
      text += o.udp ? ", \"udp\"" : "";
      text += o.icmp ? ", \"icmp\"" : "";
      text += "]\n";
    }
    text += o.verify_name ? "verify_name = true\n" : "verify_name = false\n";
    text += o.rule_extra;
    if (lift) text += "[unsafe]\nallow_reserved = [\"127.0.0.0/8\"]\n";
    return text;
  }

  // A live reload of `text` (GuestStack::apply_policy()), then two turns.
  GuestStack::PolicyApplied reload(const std::string& text) {
    auto parsed = policy::parse_policy(text, "flow-test-reload.toml");
    EXPECT_TRUE(parsed.ok()) << parsed.error().to_string() << "\n" << text;
    if (!parsed.ok()) return {};
    auto applied = stack_->apply_policy(std::make_unique<const policy::Policy>(std::move(parsed).value()));
    turns(2);
    return applied;
  }

  void start(const StackOptions& o, base::Seconds ttl = base::Seconds(3600)) {
    ASSERT_TRUE(rig_.link);
    const std::string text = policy_text(o);
    auto parsed = policy::parse_policy(text, "flow-test.toml");
    ASSERT_TRUE(parsed.ok()) << parsed.error().to_string() << "\n" << text;
    policy_.emplace(std::move(parsed).value());
    GuestConfig config;
    config.gateway_mac = guest_wire::kGatewayMac;
    config.host_io_on_ring = o.host_io_on_ring;
    stack_ = std::make_unique<GuestStack>(rig_.loop, *rig_.link, *policy_, rig_.upstreams, rig_.events,
                                          rig_.random, config);
    send(guest_wire::arp_request());
    answer(ttl);
  }

  void answer(base::Seconds ttl) {
    const base::MonoTime now = rig_.loop.now();
    stack_->answer_table().record(policy::IpAddress::v4(kLoopback), "example.com", now + ttl, now);
  }

  // Writes one frame as the VMM and turns the stack until it is handled.
  void send(const Bytes& frame) {
    stream_stack_test::write_all(rig_.vmm.get(), guest_wire::record(frame));
    turns(4);
  }
  // Turns the stack `n` times, waiting for nothing.
  void turns(int n) {
    for (int i = 0; i < n; ++i) {
      stack_->poll_link();
      rig_.loop.run_once(base::Millis(0));
    }
  }
  // One turn that waits at most 1 ms (real time) for something to happen:
  // lwIP's own timers (a delayed ACK) run on real time.
  void wait_turn() {
    stack_->poll_link();
    rig_.loop.run_once(base::Millis(1));
  }
  // Turns the stack (each turn waiting at most 1 ms for the kernel) until
  // `done` holds, at most `max_turns` times. What the gateway sends the
  // guest meanwhile goes to `sink`.
  bool turn_until(const std::function<bool()>& done,
                  const std::function<void(std::vector<guest_wire::Seen>)>& sink, int max_turns = 2000) {
    for (int i = 0; i < max_turns; ++i) {
      stack_->poll_link();
      rig_.loop.run_once(base::Millis(1));
      sink(seen());
      if (done()) return true;
    }
    return false;
  }
  std::vector<guest_wire::Seen> seen() { return guest_wire::read_seen(rig_.vmm.get(), in_); }
  // The whole frames the gateway sent since the last call (use it or
  // seen(), not both: each takes what it reads).
  std::vector<Bytes> frames() { return guest_wire::read_frames(rig_.vmm.get(), in_); }
  // Every event line the stack wrote so far.
  const std::vector<std::string>& event_lines() const { return event_lines_; }

  // Moves the loop's clock and turns once (the sweep checks deadlines).
  void advance(base::Millis by) {
    now_ += by;
    turns(2);
  }

  GuestStack& stack() { return *stack_; }
  const policy::Policy& policy() const { return *policy_; }

  // A guest port no earlier test used (lwIP keeps pcbs across stacks).
  static std::uint16_t fresh_port() { return next_port_++; }

 private:
  base::MonoTime now_ = base::MonoTime{} + base::Seconds(1000);
  stream_stack_test::StreamStackRig rig_;
  std::optional<policy::Policy> policy_;
  std::unique_ptr<GuestStack> stack_;
  Bytes in_;
  std::vector<std::string> event_lines_;
  static inline std::uint16_t next_port_ = 30000;
};

}  // namespace abox::netstack::flow_test
