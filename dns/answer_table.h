// AnswerTable: which addresses the DNS gate answered, for which allowed
// names, until when. It is the other half of admission: a guest flow is
// admitted only to an address in this table, for a name whose rule allows
// the flow's port and protocol. One table per instance, never shared.
//
// Bounds: at most `capacity` addresses, and at most kMaxNamesPerAddress names
// per address (a CDN address shared by many allowed names keeps the most
// recently answered ones). When full, entries past expiry + grace go first,
// then the least recently answered. Nothing grows without limit on guest
// input.
//
// Time: an answer admits new flows until its expiry (TTL clamped by the
// policy when it was recorded). Between expiry and expiry + grace it admits
// nothing new, but live_until() still vouches for flows already running.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "policy/policy.h"

namespace abox::dns {

struct AdmissionDecision {
  const policy::AllowRule* rule = nullptr;  // null: refused
  std::string_view name;                    // the answered name that admits it
  base::MonoTime expires{};                 // when that answer stops admitting new flows
  bool admitted() const { return rule != nullptr; }
};

struct AnswerTableCounters {
  std::uint64_t recorded = 0;         // record() calls
  std::uint64_t evicted_expired = 0;  // removed past expiry + grace to make room
  std::uint64_t evicted_oldest = 0;   // removed while still valid, because full
  std::uint64_t names_dropped = 0;    // a name pushed out of a full per-address list
};

class AnswerTable {
 public:
  static constexpr std::size_t kMaxNamesPerAddress = 16;

  // The policy must outlive the table. capacity >= 1.
  AnswerTable(const policy::Policy& policy, std::size_t capacity);

  // `address` was answered for `canonical_name` (an allowed name), valid
  // until `expires`. A later answer for the same pair extends or shortens it
  // to the new expiry.
  void record(const policy::IpAddress& address, std::string_view canonical_name, base::MonoTime expires,
              base::MonoTime now);

  // Would a new flow to address:port over protocol be admitted at `now`?
  // Refuses reserved addresses (unless lifted) whatever the table holds.
  AdmissionDecision admits(const policy::IpAddress& address, std::uint16_t port, policy::Protocol protocol,
                           base::MonoTime now) const;

  // Until when a flow admitted for (address, name) may keep running: the
  // answer's expiry + grace; a time in the past when the table no longer
  // knows the pair.
  base::MonoTime live_until(const policy::IpAddress& address, std::string_view canonical_name) const;

  // Names the address was answered for and that have not expired at `now`
  // (for SNI/Host checks and explain output).
  std::vector<std::string_view> names_for(const policy::IpAddress& address, base::MonoTime now) const;

  std::size_t size() const { return entries_.size(); }
  std::size_t capacity() const { return capacity_; }
  const AnswerTableCounters& counters() const { return counters_; }

 private:
  struct NameExpiry {
    std::string name;
    base::MonoTime expires;
  };
  struct Entry {
    std::vector<NameExpiry> names;  // most recently answered last
    base::MonoTime latest_expiry{};
    std::list<policy::IpAddress>::iterator lru;  // position in recency_
  };

  void make_room(base::MonoTime now);

  const policy::Policy& policy_;
  std::size_t capacity_;
  base::Seconds grace_;
  std::unordered_map<policy::IpAddress, Entry, policy::IpAddressHash> entries_;
  std::list<policy::IpAddress> recency_;  // least recently answered first
  // No entry's latest_expiry + grace is earlier than this, so a full table
  // whose entries are all fresh is not scanned on every insert.
  base::MonoTime earliest_purge_{};
  AnswerTableCounters counters_;
};

}  // namespace abox::dns
