#include "netstack/stack/route_cache.h"

#include <gtest/gtest.h>

#include <array>

namespace abox::netstack {
namespace {

// The fake kernel: which addresses have a route, and how often it was asked.
int g_asked = 0;
bool g_routed = true;
bool fake_probe(const policy::IpAddress&) {
  ++g_asked;
  return g_routed;
}

class RouteCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_asked = 0;
    g_routed = true;
  }
  const base::MonoTime t0 = base::MonoTime{} + std::chrono::hours(1);
  const policy::IpAddress a = *policy::IpAddress::parse("2606:2800:21f:cb07:6820:80da:af6b:8b2c");
  const policy::IpAddress b = *policy::IpAddress::parse("2606:2800:21f:cb07:6820:80da:af6b:8b2d");
};

TEST_F(RouteCacheTest, OneProbePerAddressUntilItsAnswerExpires) {
  RouteCache c(&fake_probe);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(c.has_route(a, t0 + base::Seconds(i % 29)));
  EXPECT_EQ(g_asked, 1);
  // The same /64, another address: asked on its own (a /128 route is possible).
  EXPECT_TRUE(c.has_route(b, t0));
  EXPECT_EQ(g_asked, 2);
  g_routed = false;
  EXPECT_TRUE(c.has_route(a, t0 + RouteCache::kTtl - base::Seconds(1)));
  EXPECT_FALSE(c.has_route(a, t0 + RouteCache::kTtl));
  EXPECT_EQ(g_asked, 3);
}

TEST_F(RouteCacheTest, ForgetMakesTheNextAskProbe) {
  RouteCache c(&fake_probe);
  EXPECT_TRUE(c.has_route(a, t0));
  g_routed = false;  // the route went, and the watch said so
  c.forget();
  EXPECT_FALSE(c.has_route(a, t0));
  EXPECT_FALSE(c.has_route(a, t0));  // a negative answer is kept too
  EXPECT_EQ(g_asked, 2);
}

// The stats' counters (route_cache_*): each ask is a hit or a miss (a
// probe), and each forget() an invalidation.
TEST_F(RouteCacheTest, HitsMissesAndInvalidationsAreCounted) {
  RouteCache c(&fake_probe);
  for (int i = 0; i < 5; ++i) (void)c.has_route(a, t0);
  (void)c.has_route(b, t0);
  EXPECT_EQ(c.misses(), 2u);
  EXPECT_EQ(c.hits(), 4u);
  EXPECT_EQ(c.invalidations(), 0u);
  c.forget();
  (void)c.has_route(a, t0);
  (void)c.has_route(a, t0 + RouteCache::kTtl);  // expired: asked again
  EXPECT_EQ(c.misses(), 4u);
  EXPECT_EQ(c.hits(), 4u);
  EXPECT_EQ(c.invalidations(), 1u);
  EXPECT_EQ(c.misses(), static_cast<std::uint64_t>(g_asked));
}

TEST_F(RouteCacheTest, TheTableNeverPassesItsCapacity) {
  RouteCache c(&fake_probe, 8);
  std::array<std::uint8_t, 16> bytes = a.bytes();
  for (int i = 0; i < 100; ++i) {
    bytes[15] = static_cast<std::uint8_t>(i);
    (void)c.has_route(policy::IpAddress::v6(bytes), t0);
    EXPECT_LE(c.size(), 8u);
  }
  EXPECT_EQ(g_asked, 100);
}

TEST_F(RouteCacheTest, TheRealProbeFindsLoopback) {
  EXPECT_TRUE(RouteCache::probe_route(*policy::IpAddress::parse("127.0.0.1")));
  EXPECT_TRUE(RouteCache::probe_route(*policy::IpAddress::parse("::1")));
}

}  // namespace
}  // namespace abox::netstack
