// ResponseCache: filtered upstream answers, served again until their TTL
// runs out, so a repeated question costs no upstream round trip.
//
// Keyed by (question name lower-cased, type, class, DO bit). An entry keeps
// the filtered answer's bytes (ID 0), the offsets of its TTL fields and of
// its question name, and the addresses it carries. A hit copies the bytes,
// writes the guest's ID and the guest's spelling of the name (the case a
// resolver used for 0x20 checks), and lowers every TTL by the entry's age.
//
// Bounds: at most max_entries entries and max_bytes of answer bytes; the
// least recently used entry goes first. An expired entry is never served.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "dns/answer_filter.h"
#include "dns/wire.h"

namespace abox::dns {

struct CacheHit {
  // Addresses with their remaining TTL, to refresh the AnswerTable.
  std::span<const AnsweredAddress> addresses;
  std::uint32_t remaining_ttl = 0;
};

struct ResponseCacheCounters {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t expired = 0;
  std::uint64_t evicted = 0;
};

class ResponseCache {
 public:
  ResponseCache(std::size_t max_entries, std::size_t max_bytes);

  // Stores `answer` (its wire, addresses and cache_ttl) for question q.
  // An answer with cache_ttl 0, or larger than max_bytes, is not stored.
  void insert(const Query& q, const FilteredAnswer& answer, base::MonoTime now);

  // On a hit, writes the guest's answer into `out` and returns what it
  // carries; on a miss or an expired entry, nullopt (out untouched).
  std::optional<CacheHit> lookup(const Query& q, base::MonoTime now, std::vector<std::uint8_t>& out);

  std::size_t size() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }
  const ResponseCacheCounters& counters() const { return counters_; }

 private:
  struct Entry {
    std::vector<std::uint8_t> wire;
    std::vector<std::uint16_t> ttl_offsets;
    std::vector<AnsweredAddress> addresses;
    base::MonoTime stored{};
    base::MonoTime expires{};
    std::list<std::string>::iterator lru;
  };
  static std::string key_of(const Query& q);

  std::size_t max_entries_;
  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> recency_;  // least recently used first
  std::string scratch_key_;
  ResponseCacheCounters counters_;
};

}  // namespace abox::dns
