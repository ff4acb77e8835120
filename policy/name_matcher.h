// NameMatcher: which patterns match a name, from exact names and wildcards.
//
// Semantics (documented in docs/policy.md): an exact pattern "github.com"
// matches only "github.com". A wildcard "*.github.com" matches every name
// that ends in ".github.com" and has at least one more label: "api.github.com"
// and "a.b.github.com", never "github.com" itself, never "evilgithub.com".
//
// Lookup walks the name's label boundaries and probes one hash table per
// boundary: O(labels) probes, no allocation, independent of the number of
// patterns. Input to lookups must already be canonical (CanonicalName).
// Patterns are added once while a Policy is built; the matcher is then
// read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "policy/name.h"

namespace abox::policy {

class NameMatcher {
 public:
  // Associates `id` (the caller's index) with a pattern. A pattern may carry
  // several ids.
  void add(const NamePattern& pattern, std::uint32_t id);

  // Calls fn(std::uint32_t id, bool wildcard) -> bool for every id whose
  // pattern matches: the exact pattern first, then wildcards from the most
  // specific suffix to the least. fn returns true to stop early.
  template <class Fn>
  void for_each_match(std::string_view canonical, Fn&& fn) const {
    if (auto it = exact_.find(canonical); it != exact_.end()) {
      for (std::uint32_t id : it->second)
        if (fn(id, false)) return;
    }
    if (wildcard_.empty()) return;
    // Each suffix after a dot, most specific first: for "a.b.c" try "b.c", "c".
    for (std::size_t dot = canonical.find('.'); dot != std::string_view::npos;
         dot = canonical.find('.', dot + 1)) {
      auto it = wildcard_.find(canonical.substr(dot + 1));
      if (it == wildcard_.end()) continue;
      for (std::uint32_t id : it->second)
        if (fn(id, true)) return;
    }
  }

  bool matches(std::string_view canonical) const {
    bool found = false;
    for_each_match(canonical, [&](std::uint32_t, bool) { return found = true; });
    return found;
  }

  std::size_t pattern_count() const { return exact_.size() + wildcard_.size(); }

 private:
  // Transparent hashing so string_view lookups do not allocate.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept;
  };
  using Table = std::unordered_map<std::string, std::vector<std::uint32_t>, Hash, std::equal_to<>>;
  Table exact_;
  Table wildcard_;  // keyed by the base: "*.github.com" under "github.com"
};

}  // namespace abox::policy
