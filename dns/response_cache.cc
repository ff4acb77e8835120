// ResponseCache: how it works.
//
// Owns a map from question key to entry and a recency list of keys, least
// recently used first. The key is the question name in wire form with ASCII
// letters lowered, then qtype, qclass (both big-endian) and the DO bit: the
// name is self-delimiting (it ends with the root label), so no two questions
// share a key.
//
// Life of one answer: the gate filters an upstream answer and calls insert().
// Answers that must not be reused are skipped: cache_ttl 0, larger than the
// whole byte budget, truncated (TC asks for a retry over TCP, not for reuse),
// or bytes whose records do not walk (find_ttl_offsets) or whose question is
// not q's. The wire is stored with ID 0 together with the offset of every TTL
// field, and LRU entries are evicted until both bounds hold.
//
// Life of one hit: lookup() builds the key in scratch_key_ (its capacity is
// reserved up front, so a lookup allocates nothing besides growing `out`).
// An entry past its expiry is erased and counted, never served. Otherwise the
// entry is aged in place: every TTL in the wire and in `addresses` drops by
// the whole seconds since `stored`, and `stored` moves forward by the same
// amount, so the entry always holds its current TTLs and the sub-second
// remainder carries over to the next hit. Then the bytes are copied to
// `out`, the guest's ID goes into bytes 0-1 and the guest's spelling of the
// name over the question at offset 12 (after checking it matches the cached
// name case-insensitively, so the copy can never change what was asked).
//
// What lookup() checks on the stored bytes: every write is inside the wire
// (the question's extent at insert, each TTL offset + 4 at insert), so a hit
// writes only where insert() checked.
#include "dns/response_cache.h"

#include <algorithm>
#include <chrono>

namespace abox::dns {
namespace {

// Letters only: label length bytes are at most 63 and never in 'A'..'Z'.
std::uint8_t lower(std::uint8_t c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

void append_key(const Query& q, std::string& key) {
  key.clear();
  for (std::uint8_t c : q.qname()) key.push_back(static_cast<char>(lower(c)));
  key.push_back(static_cast<char>(q.qtype >> 8));
  key.push_back(static_cast<char>(q.qtype & 0xFF));
  key.push_back(static_cast<char>(q.qclass >> 8));
  key.push_back(static_cast<char>(q.qclass & 0xFF));
  key.push_back(q.dnssec_ok ? '\1' : '\0');
}

// The longest key: a 255-byte name, type, class, DO.
constexpr std::size_t kMaxKeySize = 255 + 5;

// Does the wire hold q's question at offset 12: the name in any case, then
// q's type and class?
bool question_matches(std::span<const std::uint8_t> wire, const Query& q) {
  const auto name = q.qname();
  const std::size_t tail = kHeaderSize + name.size();
  if (wire.size() < tail + 4) return false;
  const auto cached = wire.subspan(kHeaderSize, name.size());
  return std::equal(cached.begin(), cached.end(), name.begin(), name.end(),
                    [](std::uint8_t a, std::uint8_t b) { return lower(a) == lower(b); }) &&
         wire[tail] == (q.qtype >> 8) && wire[tail + 1] == (q.qtype & 0xFF) &&
         wire[tail + 2] == (q.qclass >> 8) && wire[tail + 3] == (q.qclass & 0xFF);
}

std::uint32_t read_u32(std::span<const std::uint8_t> b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) | (std::uint32_t{b[at + 2]} << 8) |
         std::uint32_t{b[at + 3]};
}

void write_u32(std::span<std::uint8_t> b, std::size_t at, std::uint32_t v) {
  b[at] = static_cast<std::uint8_t>(v >> 24);
  b[at + 1] = static_cast<std::uint8_t>(v >> 16);
  b[at + 2] = static_cast<std::uint8_t>(v >> 8);
  b[at + 3] = static_cast<std::uint8_t>(v);
}

// A TTL `age` seconds later. A live record never reaches 0 (the entry
// expires first, and a resolver would read 0 as "do not cache"); a record
// that was 0 stays 0.
std::uint32_t aged(std::uint32_t ttl, std::uint32_t age) {
  if (ttl == 0) return 0;
  return ttl > age ? ttl - age : 1;
}

}  // namespace

ResponseCache::ResponseCache(std::size_t max_entries, std::size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {
  scratch_key_.reserve(kMaxKeySize);
}

std::string ResponseCache::key_of(const Query& q) {
  std::string key;
  key.reserve(kMaxKeySize);
  append_key(q, key);
  return key;
}

void ResponseCache::insert(const Query& q, const FilteredAnswer& answer, base::MonoTime now) {
  if (answer.cache_ttl == 0 || answer.truncated) return;
  if (max_entries_ == 0 || answer.wire.size() > max_bytes_) return;
  if (!question_matches(answer.wire, q)) return;

  std::vector<std::uint16_t> ttl_offsets;
  if (!find_ttl_offsets(answer.wire, ttl_offsets)) return;
  for (std::uint16_t off : ttl_offsets) {
    if (std::size_t{off} + 4 > answer.wire.size()) return;
  }

  std::string key = key_of(q);
  if (auto old = entries_.find(key); old != entries_.end()) {
    bytes_ -= old->second.wire.size();
    recency_.erase(old->second.lru);
    entries_.erase(old);
  }
  while (!recency_.empty() && (entries_.size() >= max_entries_ || bytes_ + answer.wire.size() > max_bytes_)) {
    auto victim = entries_.find(recency_.front());
    bytes_ -= victim->second.wire.size();
    entries_.erase(victim);
    recency_.pop_front();
    ++counters_.evicted;
  }

  Entry entry;
  entry.wire = answer.wire;
  entry.wire[0] = 0;  // question_matches() checked the size
  entry.wire[1] = 0;
  entry.ttl_offsets = std::move(ttl_offsets);
  entry.addresses = answer.addresses;
  entry.stored = now;
  entry.expires = now + base::Seconds(answer.cache_ttl);
  recency_.push_back(key);
  entry.lru = std::prev(recency_.end());
  bytes_ += entry.wire.size();
  entries_.emplace(std::move(key), std::move(entry));
}

std::optional<CacheHit> ResponseCache::lookup(const Query& q, base::MonoTime now,
                                              std::vector<std::uint8_t>& out) {
  append_key(q, scratch_key_);
  auto it = entries_.find(scratch_key_);
  if (it == entries_.end()) {
    ++counters_.misses;
    return std::nullopt;
  }
  Entry& e = it->second;

  // misses counts every lookup not served, so hits + misses is the number of
  // lookups; expired and mismatched entries are erased, as they will never be
  // served again.
  const bool expired = now >= e.expires;
  if (expired || !question_matches(e.wire, q)) {
    if (expired) ++counters_.expired;
    ++counters_.misses;
    bytes_ -= e.wire.size();
    recency_.erase(e.lru);
    entries_.erase(it);
    return std::nullopt;
  }

  // now >= stored always holds for a caller with a monotonic clock; a time
  // from before `stored` ages nothing rather than wrapping.
  const auto elapsed = std::chrono::duration_cast<base::Seconds>(now - e.stored);
  if (elapsed.count() > 0) {
    const auto age = static_cast<std::uint32_t>(elapsed.count());  // < cache_ttl, a uint32
    for (std::uint16_t off : e.ttl_offsets) write_u32(e.wire, off, aged(read_u32(e.wire, off), age));
    for (auto& a : e.addresses) a.ttl = aged(a.ttl, age);
    e.stored += elapsed;
  }

  out.assign(e.wire.begin(), e.wire.end());
  out[0] = static_cast<std::uint8_t>(q.id >> 8);
  out[1] = static_cast<std::uint8_t>(q.id & 0xFF);
  const auto name = q.qname();
  std::copy(name.begin(), name.end(), out.begin() + kHeaderSize);

  recency_.splice(recency_.end(), recency_, e.lru);
  ++counters_.hits;
  // expires - stored is a whole number of seconds (both moved by whole
  // seconds from the insert), at least 1 since now < expires.
  const auto remaining = std::chrono::duration_cast<base::Seconds>(e.expires - e.stored);
  return CacheHit{e.addresses, static_cast<std::uint32_t>(remaining.count())};
}

}  // namespace abox::dns
