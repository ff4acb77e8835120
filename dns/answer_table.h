// AnswerTable: which addresses the DNS gate answered, for which allowed
// names, until when. It only answers that: admission
// (netstack/stack/admission.h) decides, admitting a guest flow only to an
// address in this table, for a name whose rule allows the flow's port and
// protocol. One table per instance, never shared.
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

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "policy/policy.h"

namespace abox::dns {

struct AnswerTableCounters {
  std::uint64_t recorded = 0;         // record() calls
  std::uint64_t evicted_expired = 0;  // removed past expiry + grace to make room
  std::uint64_t evicted_oldest = 0;   // removed while still valid, because full
  std::uint64_t names_dropped = 0;    // a name pushed out of a full per-address list
};

class AnswerTable {
 public:
  static constexpr std::size_t kMaxNamesPerAddress = 16;

  // Reads the policy's DNS grace once. capacity >= 1.
  AnswerTable(const policy::Policy& policy, std::size_t capacity);

  // `address` was answered for `canonical_name` (an allowed name), valid
  // until `expires`. A later answer for the same pair extends or shortens it
  // to the new expiry.
  void record(const policy::IpAddress& address, std::string_view canonical_name, base::MonoTime expires,
              base::MonoTime now);

  // Until when a flow admitted for (address, name) may keep running: the
  // answer's expiry + grace; a time in the past when the table no longer
  // knows the pair.
  base::MonoTime live_until(const policy::IpAddress& address, std::string_view canonical_name) const;

  // One name an address was answered for, and when that answer stops
  // admitting new flows.
  struct AnsweredName {
    std::string_view name;
    base::MonoTime expires{};
  };
  // At most kMaxNamesPerAddress of them, held by value (no allocation). The
  // names refer to the table's strings: valid until the next record().
  class AnsweredNames {
   public:
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    const AnsweredName& operator[](std::size_t i) const { return items_.at(i); }
    const AnsweredName& front() const { return items_.at(0); }
    const AnsweredName& back() const { return items_.at(size_ - 1); }
    const AnsweredName* begin() const { return items_.data(); }
    const AnsweredName* end() const { return items_.data() + size_; }

   private:
    friend class AnswerTable;
    std::array<AnsweredName, kMaxNamesPerAddress> items_{};
    std::size_t size_ = 0;
  };
  // The names the address was answered for that have not expired at `now`,
  // most recently answered first (the order admission tries them in).
  AnsweredNames names_for(const policy::IpAddress& address, base::MonoTime now) const;

  // Forgets every name for which `revoked(name)` is true (a reloaded policy
  // no longer allows it), and every address left with no name. Returns how
  // many (address, name) pairs went. O(table); for reloads, never the
  // packet path.
  std::size_t forget_names(const std::function<bool(std::string_view)>& revoked);

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
