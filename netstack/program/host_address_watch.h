// HostAddressWatch: the addresses of abox-net's own network namespace (the
// one its host sockets live in), read at start and followed as they change,
// kept in a policy::HostAddresses that the DNS gate and admission read
// (policy/host_addresses.h says why they are reserved).
//
// How: one NETLINK_ROUTE socket, opened in the calling thread's namespace
// and bound to the RTMGRP_IPV4_IFADDR and RTMGRP_IPV6_IFADDR groups, so the
// kernel tells it of every address added or removed on any interface; and
// to RTMGRP_IPV6_ROUTE, only to say that routes changed (on_routes_changed:
// the stack's RouteCache asks again). At
// start() it asks for a dump of every address (RTM_GETADDR) and reads it to
// the end before returning, so the set is complete before the first guest
// byte is read. From then on the loop watches the socket and every
// RTM_NEWADDR/RTM_DELADDR updates the set, with a "host_address" event.
//
// When the kernel dropped notifications (the socket's buffer overran:
// ENOBUFS), the dump is asked for again and what it lists is added; an
// address removed meanwhile may stay in the set until it is removed again,
// which only refuses more (fail closed). Likewise a set that would pass
// HostAddresses::kMaxAddresses refuses to start, and later keeps what it
// has and says so.
//
// Must be made before the sandbox (it makes a netlink socket, which the
// seccomp filter forbids); afterwards it only recv()s, and sendto()s a dump
// request after an overrun, both allowed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/event_log.h"
#include "base/result.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "policy/host_addresses.h"

namespace abox::netstack {

class HostAddressWatch final : public io::EventLoop::Watcher {
 public:
  // Reads every address now (blocking, bounded: the kernel answers a dump at
  // once) into `into`, then watches for changes on `loop`. `into` and
  // `events` must outlive the watch. An error says what failed.
  static base::Result<std::unique_ptr<HostAddressWatch>, std::string> start(io::EventLoop& loop,
                                                                            policy::HostAddresses& into,
                                                                            base::EventLog& events);
  ~HostAddressWatch() override;
  HostAddressWatch(const HostAddressWatch&) = delete;
  HostAddressWatch& operator=(const HostAddressWatch&) = delete;

  void on_ready(std::uint32_t events) override;

  // Called when the namespace's IPv6 routes changed, or when notifications
  // were lost (any of them might have been a route's): for
  // GuestStack::forget_routes().
  void on_routes_changed(std::function<void()> f) { on_routes_changed_ = std::move(f); }

  std::uint64_t changes() const { return changes_; }  // notifications applied since start
  std::uint64_t overruns() const { return overruns_; }

 private:
  HostAddressWatch(io::EventLoop& loop, policy::HostAddresses& into, base::EventLog& events,
                   base::UniqueFd fd);
  // Sends an RTM_GETADDR dump request; false with errno set on failure.
  bool ask_dump();
  // Reads one datagram (blocking or not, as the socket is): 1 read, 0 none
  // waiting, -1 an error (errno).
  int read_one();

  io::EventLoop& loop_;
  policy::HostAddresses& set_;
  base::EventLog& events_;
  base::UniqueFd fd_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  // Not zeroed: only what the kernel writes into it becomes resident (an
  // idle abox-net keeps a page or two of it, not 64 KiB).
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::uint32_t seq_ = 0;
  bool dumping_ = false;  // a dump is being read
  bool full_reported_ = false;
  std::uint64_t changes_ = 0;
  std::uint64_t overruns_ = 0;
  std::function<void()> on_routes_changed_;
};

}  // namespace abox::netstack
