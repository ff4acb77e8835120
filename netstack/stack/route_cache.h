// RouteCache: whether the host (abox-net's own namespace, where host sockets
// live) has a route to an address, remembered so that the kernel is asked
// once per destination, not once per SYN or first datagram.
//
// Asked by a UDP socket's connect(), which looks the route up and sends
// nothing (probe_route()). An answer is kept until the first of: the
// routes changed (forget(): abox-net run calls it on every IPv6 route
// notification, and when notifications were lost, HostAddressWatch), kTtl
// passed (a safety net for a change nobody was told of), or the table
// reached its capacity (then it is emptied: a guest spraying destinations
// costs one probe per new one, never memory).
//
// Keyed by the whole address: routes may be narrower than a /64 (a /128 to
// one server). The port is not part of the key: a route lookup does not
// depend on it unless policy routing by port is set up on the host, which
// abox-net does not follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "base/clock.h"
#include "policy/ip_address.h"

namespace abox::netstack {

class RouteCache {
 public:
  using Probe = bool (*)(const policy::IpAddress& to);
  static constexpr std::size_t kCapacity = 1024;
  static constexpr base::Seconds kTtl{30};

  explicit RouteCache(Probe probe = &probe_route, std::size_t capacity = kCapacity)
      : probe_(probe), capacity_(capacity) {}

  bool has_route(const policy::IpAddress& to, base::MonoTime now);
  void forget() {
    answers_.clear();
    ++invalidations_;
  }

  std::size_t size() const { return answers_.size(); }
  // Counters (abox-net stats: route_cache_*): answers from the table; kernel
  // lookups (a destination not in it, or its answer expired); forget() calls.
  std::uint64_t hits() const { return hits_; }
  std::uint64_t misses() const { return probes_; }
  std::uint64_t probes() const { return probes_; }
  std::uint64_t invalidations() const { return invalidations_; }

  // The kernel's answer now. False only for ENETUNREACH/EHOSTUNREACH; any
  // other failure is left to the flow's own connect().
  static bool probe_route(const policy::IpAddress& to);

 private:
  struct Answer {
    bool has_route = false;
    base::MonoTime expires{};
  };
  Probe probe_;
  std::size_t capacity_;
  std::unordered_map<policy::IpAddress, Answer, policy::IpAddressHash> answers_;
  std::uint64_t probes_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t invalidations_ = 0;
};

}  // namespace abox::netstack
