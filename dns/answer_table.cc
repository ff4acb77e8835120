// AnswerTable: how it works.
//
// Owns one map (address -> the names it was answered for, each with its
// expiry) and one recency list of addresses, least recently answered first.
// Nothing here parses bytes: addresses and names come from the answer filter,
// already checked and canonical.
//
// Life of one answer: the gate calls record() for each kept address. A known
// address gets the name refreshed (moved to the back of its list, expiry
// replaced) and moves to the back of the recency list. A new address takes a
// free slot, or make_room() frees one: first every entry whose answers are all
// past expiry + grace (they vouch for nothing any more), else the least
// recently answered one.
//
// Life of one flow: admission (netstack/stack/admission.cc) refuses reserved
// addresses before it asks the table, so an address recorded by mistake can
// never admit anything; then it asks names_for() once and tries the
// address's unexpired names, most recently answered first, against the
// policy's rules.
//
// Memory: the map starts empty and grows as addresses are recorded; it never
// holds more than `capacity` entries, so its buckets stay near that bound.
//
// Cost: record() is O(1) plus at most kMaxNamesPerAddress name compares, and
// make_room() only scans the table when earliest_purge_ says some entry may be
// purgeable; a scan purges every purgeable entry and makes the bound exact
// again, so a flood of fresh answers never scans.
#include "dns/answer_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace abox::dns {
namespace {

// When an entry (or one name of it) stops vouching for anything: admission
// ended at expiry, running flows at expiry + grace.
bool purgeable(base::MonoTime expires, base::Seconds grace, base::MonoTime now) {
  return expires + grace <= now;
}

}  // namespace

AnswerTable::AnswerTable(const policy::Policy& policy, std::size_t capacity)
    : capacity_(capacity), grace_(policy.dns().grace) {
  if (capacity_ == 0) {
    // A table that can hold nothing would refuse every flow, which reads as a
    // policy denial rather than the bug it is.
    std::fprintf(stderr, "abox: AnswerTable: capacity must be at least 1\n");
    std::abort();
  }
  // No reserve: the map grows with the addresses recorded, up to capacity_
  // (record() evicts before it inserts past it). Reserving the bound up front
  // kept about 130 KiB of buckets resident in an abox-net that answered
  // nothing.
}

std::size_t AnswerTable::forget_names(const std::function<bool(std::string_view)>& revoked) {
  std::size_t forgotten = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    const std::size_t before = e.names.size();
    std::erase_if(e.names, [&](const NameExpiry& n) { return revoked(n.name); });
    forgotten += before - e.names.size();
    if (e.names.empty()) {
      recency_.erase(e.lru);
      it = entries_.erase(it);
      continue;
    }
    if (e.names.size() != before) {
      e.latest_expiry = e.names.front().expires;
      for (const NameExpiry& n : e.names) e.latest_expiry = std::max(e.latest_expiry, n.expires);
    }
    ++it;
  }
  return forgotten;
}

void AnswerTable::record(const policy::IpAddress& address, std::string_view canonical_name,
                         base::MonoTime expires, base::MonoTime now) {
  ++counters_.recorded;

  auto it = entries_.find(address);
  if (it == entries_.end()) {
    if (entries_.size() >= capacity_) make_room(now);
    // Empty table: the bound may be stale from entries long gone, so start it
    // afresh from this entry.
    if (entries_.empty()) earliest_purge_ = expires + grace_;
    recency_.push_back(address);
    Entry entry;
    entry.names.push_back(NameExpiry{std::string(canonical_name), expires});
    entry.latest_expiry = expires;
    entry.lru = std::prev(recency_.end());
    entries_.emplace(address, std::move(entry));
    earliest_purge_ = std::min(earliest_purge_, expires + grace_);
    return;
  }

  Entry& entry = it->second;
  recency_.splice(recency_.end(), recency_, entry.lru);

  auto& names = entry.names;
  auto same =
      std::find_if(names.begin(), names.end(), [&](const NameExpiry& n) { return n.name == canonical_name; });
  if (same != names.end()) {
    // Rotate rather than erase + push so the string's buffer is reused.
    std::rotate(same, same + 1, names.end());
    names.back().expires = expires;
  } else {
    // Names that vouch for nothing any more make way before a live one does.
    std::erase_if(names, [&](const NameExpiry& n) { return purgeable(n.expires, grace_, now); });
    if (names.size() >= kMaxNamesPerAddress) {
      names.erase(names.begin());  // least recently answered
      ++counters_.names_dropped;
    }
    names.push_back(NameExpiry{std::string(canonical_name), expires});
  }

  // A later answer may shorten the pair's expiry, so recompute rather than
  // take the max with the old value.
  base::MonoTime latest = names.front().expires;
  for (const auto& n : names) latest = std::max(latest, n.expires);
  entry.latest_expiry = latest;
  earliest_purge_ = std::min(earliest_purge_, latest + grace_);
}

void AnswerTable::make_room(base::MonoTime now) {
  // O(1) fast path: the least recently answered entry is often also the one
  // past its grace, and evicting it is what the scan would do first.
  if (!recency_.empty()) {
    auto front = entries_.find(recency_.front());
    if (purgeable(front->second.latest_expiry, grace_, now)) {
      recency_.erase(front->second.lru);
      entries_.erase(front);
      ++counters_.evicted_expired;
      return;
    }
  }

  if (now >= earliest_purge_) {
    // Some entry may be purgeable: remove all of them in one pass (each entry
    // is removed once, so scans are paid for by the entries they remove) and
    // make the bound exact for what remains.
    bool any_left = false;
    base::MonoTime next_purge{};
    for (auto it = entries_.begin(); it != entries_.end();) {
      const base::MonoTime purge_at = it->second.latest_expiry + grace_;
      if (purge_at <= now) {
        recency_.erase(it->second.lru);
        it = entries_.erase(it);
        ++counters_.evicted_expired;
        continue;
      }
      next_purge = any_left ? std::min(next_purge, purge_at) : purge_at;
      any_left = true;
      ++it;
    }
    // An empty table has no bound; record() restarts it from the next entry.
    earliest_purge_ = any_left ? next_purge : now;
    if (entries_.size() < capacity_) return;
  }

  // Every entry still vouches for something: the least recently answered one
  // goes. Removing an entry can only raise the true minimum, so the bound
  // stays a valid lower bound.
  entries_.erase(recency_.front());
  recency_.pop_front();
  ++counters_.evicted_oldest;
}

base::MonoTime AnswerTable::live_until(const policy::IpAddress& address,
                                       std::string_view canonical_name) const {
  auto it = entries_.find(address);
  if (it != entries_.end()) {
    for (const auto& n : it->second.names) {
      if (n.name == canonical_name) return n.expires + grace_;
    }
  }
  // Earlier than any `now` a caller can hold, so `now < live_until` is false.
  return base::MonoTime::min();
}

AnswerTable::AnsweredNames AnswerTable::names_for(const policy::IpAddress& address,
                                                  base::MonoTime now) const {
  AnsweredNames out;
  auto it = entries_.find(address);
  if (it == entries_.end()) return out;
  const auto& names = it->second.names;  // at most kMaxNamesPerAddress (record())
  for (auto n = names.rbegin(); n != names.rend() && out.size_ < out.items_.size(); ++n) {
    if (n->expires > now) out.items_[out.size_++] = AnsweredName{n->name, n->expires};
  }
  return out;
}

}  // namespace abox::dns
