// NameMatcher's build side and its hash. Lookups (name_matcher.h) hash the
// whole name once for the exact table and then each suffix after a dot, so a
// name with n labels costs up to n hashes; the hash therefore reads sixteen
// bytes per step, and a name of up to 16 bytes takes two multiplies.
//
// The hash is unkeyed on purpose: the tables are filled only from the policy
// file, which the operator writes, and never grow from guest input. A guest
// choosing names that collide can only land in buckets whose length the
// policy already fixed, so there is no chain for it to lengthen.
#include "policy/name_matcher.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace abox::policy {

namespace {

// "Nothing up my sleeve" odd constants: the golden ratio and the fractional
// parts of sqrt(2) (made odd) and sqrt(3).
constexpr std::uint64_t kK0 = 0x9E3779B97F4A7C15ULL;
constexpr std::uint64_t kK1 = 0x6A09E667F3BCC909ULL;
constexpr std::uint64_t kK2 = 0xBB67AE8584CAA73BULL;

#if !defined(__SIZEOF_INT128__)
#error "NameMatcher's hash needs a 64x64->128-bit multiply (GCC/Clang on a 64-bit target)"
#endif
__extension__ using U128 = unsigned __int128;

// One 64x64->128 multiply folded to 64 bits (the wyhash idea): the high half
// carries the high input bits down, so a couple of these mix a short key well
// for a few cycles each, where shift-xor-multiply needs several rounds.
std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  const U128 r = static_cast<U128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

std::uint64_t load8(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);  // unaligned-safe; compiles to one load
  return v;
}

std::uint64_t load4(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads whole words, overlapping at the end rather than copying a short tail
// byte by byte (a byte-wise copy into a word stalls store forwarding and cost
// more than the rest of the hash). The length goes into the seed because
// overlapping reads can see the same two words for inputs of different
// lengths.
std::uint64_t hash_bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::uint64_t seed = kK0 ^ n;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  if (n > 16) {
    std::size_t left = n;
    for (; left > 16; p += 16, left -= 16) seed = mix(load8(p) ^ kK1, load8(p + 8) ^ seed);
    a = load8(p + left - 16);
    b = load8(p + left - 8);
  } else if (n >= 8) {
    a = load8(p);
    b = load8(p + n - 8);
  } else if (n >= 4) {
    a = load4(p);
    b = load4(p + n - 4);
  } else if (n > 0) {
    a = (std::uint64_t{p[0]} << 16) | (std::uint64_t{p[n / 2]} << 8) | p[n - 1];
  }
  return mix(mix(a ^ kK1, b ^ seed) ^ kK2, n ^ kK1);
}

// A pattern whose base is not canonical would silently never match, which
// reads as "the policy denies it" rather than a bug: refuse it loudly.
void check_canonical(const NamePattern& pattern) {
  auto name = CanonicalName::from(pattern.base);
  if (name && name->view() == pattern.base) return;
  std::fprintf(stderr, "abox: NameMatcher::add: pattern base \"%s\" is not canonical\n",
               pattern.base.c_str());
  std::abort();
}

}  // namespace

std::size_t NameMatcher::Hash::operator()(std::string_view s) const noexcept {
  return static_cast<std::size_t>(hash_bytes(s));
}

void NameMatcher::add(const NamePattern& pattern, std::uint32_t id) {
  check_canonical(pattern);
  Table& table = pattern.wildcard ? wildcard_ : exact_;
  // Most probes miss (every suffix but the matching one), and libstdc++ does
  // not cache hashes for a noexcept hash, so a miss in a non-empty bucket
  // rehashes each node it passes to find the bucket's end. A sparse table
  // makes most misses land in an empty bucket: in bench/policy_lookup_bench,
  // 0.25 against the default 1.0 halves a miss and a deep wildcard hit, for
  // about 24 more bytes per pattern.
  if (table.empty()) table.max_load_factor(0.25f);
  std::vector<std::uint32_t>& ids = table[pattern.base];
  // A rule that lists the same name twice should not report it twice.
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace abox::policy
