#include "broker/leaf_cache.h"

namespace abox::broker {

LeafCache::LeafCache(const InstanceCa& ca, std::size_t capacity)
    : ca_(ca), capacity_(capacity < 1 ? 1 : capacity) {}

const LeafCertificate* LeafCache::get(std::string_view name, std::int64_t now_unix) {
  auto found = by_name_.find(name);
  if (found != by_name_.end()) {
    auto it = found->second;
    if (it->leaf->not_after_unix - now_unix > kRefreshBefore.count()) {
      lru_.splice(lru_.begin(), lru_, it);
      ++hits_;
      return it->leaf.get();
    }
    by_name_.erase(found);
    lru_.erase(it);
  }
  auto leaf = ca_.mint_leaf(name, now_unix);
  if (!leaf) return nullptr;
  ++mints_;
  lru_.push_front(Entry{std::string(name), std::move(leaf)});
  by_name_.emplace(lru_.front().name, lru_.begin());
  while (lru_.size() > capacity_) {
    by_name_.erase(lru_.back().name);
    lru_.pop_back();
    ++evictions_;
  }
  return lru_.front().leaf.get();
}

}  // namespace abox::broker
