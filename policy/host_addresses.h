// HostAddresses: every address of the network namespace whose sockets carry
// a guest's flows (abox-net's own, or the broker's): the host's outside
// address, the addresses on its loopback, anything an operator added.
//
// An answer that names one of them would let a guest reach the host's own
// services (an SSH daemon, a local database, the daemon's API) as if they
// were the allowed name's servers. The reserved ranges catch this only when
// the host's address is a private one; a host with a public address would
// be exposed. So every address in the set is reserved like a range of
// reserved_ranges.h, whatever the policy says, and no [unsafe]
// allow_reserved lifts it (Policy::check_address(address, host)): removed
// from DNS answers as rebinding, and never admitted.
//
// The set is owned by whoever reads the addresses (abox-net follows its
// namespace over rtnetlink, netstack/program/host_address_watch.h; the broker reads
// them for each answer) and changes as they change; everything else only
// reads it, on the same thread. Bounded: at most kMaxAddresses (past that,
// add() refuses and says so: the caller fails closed).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "policy/ip_address.h"
#include "policy/reserved_ranges.h"

namespace abox::policy {

class HostAddresses {
 public:
  static constexpr std::size_t kMaxAddresses = 4096;

  // The entry reserved addresses of this host are reported under (name
  // "this host's own address", never lifted).
  static const ReservedRange& range();

  bool contains(const IpAddress& a) const;
  // False when the set is full (and `a` not already in it).
  [[nodiscard]] bool add(const IpAddress& a);
  void remove(const IpAddress& a);
  void clear() { sorted_.clear(); }

  std::size_t size() const { return sorted_.size(); }
  std::span<const IpAddress> addresses() const { return sorted_; }  // in order

 private:
  std::vector<IpAddress> sorted_;
};

}  // namespace abox::policy
