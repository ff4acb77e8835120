#include "broker/leaf_cache.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/support/temp_dir.h"

namespace abox::broker {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;

class LeafCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = InstanceCa::load_or_create(root_.file("state"), "dev", kNow);
    ASSERT_TRUE(ca.ok()) << ca.error();
    ca_ = std::move(*ca);
  }
  abox::testing::TempDir root_{"abox-leaf-test"};
  std::unique_ptr<InstanceCa> ca_;
};

TEST_F(LeafCacheTest, SameNameIsServedFromTheCache) {
  LeafCache cache(*ca_, 4);
  const LeafCertificate* a = cache.get("a.test", kNow);
  const LeafCertificate* again = cache.get("a.test", kNow + 60);
  EXPECT_EQ(a, again);
  EXPECT_EQ(cache.mints(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST_F(LeafCacheTest, BoundedAndLeastRecentlyUsedGoesFirst) {
  LeafCache cache(*ca_, 2);
  cache.get("a.test", kNow);
  cache.get("b.test", kNow);
  cache.get("a.test", kNow);  // b is now the least recently used
  cache.get("c.test", kNow);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1u);
  cache.get("a.test", kNow);
  EXPECT_EQ(cache.mints(), 3u);  // a still cached
  cache.get("b.test", kNow);
  EXPECT_EQ(cache.mints(), 4u);  // b was evicted
  for (int i = 0; i < 100; ++i) cache.get("flood" + std::to_string(i) + ".test", kNow);
  EXPECT_EQ(cache.size(), 2u);
}

TEST_F(LeafCacheTest, ReMintedBeforeExpiry) {
  LeafCache cache(*ca_, 4);
  const LeafCertificate* first = cache.get("a.test", kNow);
  ASSERT_TRUE(first);
  std::int64_t almost = first->not_after_unix - LeafCache::kRefreshBefore.count() + 1;
  const LeafCertificate* second = cache.get("a.test", almost);
  ASSERT_TRUE(second);
  EXPECT_EQ(cache.mints(), 2u);
  EXPECT_GT(second->not_after_unix, almost + LeafCache::kRefreshBefore.count());
}

}  // namespace
}  // namespace abox::broker
