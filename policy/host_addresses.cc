// A sorted vector: a host has a handful of addresses, a lookup is a binary
// search, and the set changes only when an interface does.
#include "policy/host_addresses.h"

#include <algorithm>

namespace abox::policy {

const ReservedRange& HostAddresses::range() {
  static const ReservedRange kHost{Cidr{}, "this host's own address",
                                   "abox: an address of the network namespace abox-net or the broker runs in",
                                   /*never_lifted=*/true};
  return kHost;
}

bool HostAddresses::contains(const IpAddress& a) const {
  return std::binary_search(sorted_.begin(), sorted_.end(), a);
}

bool HostAddresses::add(const IpAddress& a) {
  const auto at = std::lower_bound(sorted_.begin(), sorted_.end(), a);
  if (at != sorted_.end() && *at == a) return true;
  if (sorted_.size() >= kMaxAddresses) return false;
  sorted_.insert(at, a);
  return true;
}

void HostAddresses::remove(const IpAddress& a) {
  const auto at = std::lower_bound(sorted_.begin(), sorted_.end(), a);
  if (at != sorted_.end() && *at == a) sorted_.erase(at);
}

}  // namespace abox::policy
