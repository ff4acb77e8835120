// LeafCache: the leaves minted by an InstanceCa, one per SNI name, bounded.
//
// At most `capacity` leaves are kept; past that the least recently used one
// is dropped (a guest cycling through names cannot grow memory). The SNI
// callback only asks for names that have a broker binding, so in practice
// the cache holds one leaf per binding. A leaf is re-minted (new key, new
// certificate) once less than kRefreshBefore of its life is left, so a
// cached leaf is never served near or past its expiry.
//
// Handing out a leaf shares its objects with the SSL that uses it (the
// library counts references), so evicting a leaf mid-handshake is safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "broker/ca.h"

namespace abox::broker {

class LeafCache {
 public:
  static constexpr std::chrono::seconds kRefreshBefore{3600};

  LeafCache(const InstanceCa& ca, std::size_t capacity);

  // The leaf for `name`, minted when missing or close to expiry; null when
  // minting failed.
  const LeafCertificate* get(std::string_view name, std::int64_t now_unix);

  std::size_t size() const { return lru_.size(); }
  std::size_t capacity() const { return capacity_; }
  std::uint64_t hits() const { return hits_; }
  std::uint64_t mints() const { return mints_; }
  std::uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::string name;
    std::unique_ptr<LeafCertificate> leaf;
  };

  const InstanceCa& ca_;
  std::size_t capacity_;
  std::list<Entry> lru_;                                                      // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> by_name_;  // keys view Entry::name
  std::uint64_t hits_ = 0;
  std::uint64_t mints_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace abox::broker
