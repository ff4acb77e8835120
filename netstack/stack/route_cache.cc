#include "netstack/stack/route_cache.h"

#include <sys/socket.h>

#include <cerrno>

#include "base/unique_fd.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

bool RouteCache::has_route(const policy::IpAddress& to, base::MonoTime now) {
  if (auto it = answers_.find(to); it != answers_.end()) {
    if (now < it->second.expires) {
      ++hits_;
      return it->second.has_route;
    }
    answers_.erase(it);
  }
  if (answers_.size() >= capacity_) answers_.clear();
  ++probes_;
  const bool has = probe_(to);
  answers_.emplace(to, Answer{has, now + kTtl});
  return has;
}

bool RouteCache::probe_route(const policy::IpAddress& to) {
  sockaddr_storage ss{};
  // Any port: connect() on a UDP socket only looks the route up.
  const socklen_t len = to_sockaddr(policy::Endpoint{to, 9}, ss);
  base::UniqueFd probe(::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) return true;
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&ss), len) == 0) return true;
  return errno != ENETUNREACH && errno != EHOSTUNREACH;
}

}  // namespace abox::netstack
