// HostAddressWatch against the kernel, in a network namespace of its own
// (root only): the addresses there at start are read, and addresses added
// and removed afterwards are followed.
#include "netstack/program/host_address_watch.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/netstack/link/link_test_support.h"

namespace abox::netstack {
namespace {

using policy::IpAddress;

IpAddress ip(const char* text) {
  return *IpAddress::parse(text);
}

// Turns the loop until `done` holds, for at most two seconds.
template <class Pred>
bool turn_until(io::EventLoop& loop, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    loop.run_once(base::Millis(50));
  }
  return true;
}

TEST(HostAddressWatch, ReadsTheNamespacesAddressesAndFollowsThem) {
  ABOX_NEEDS_ROOT(link_test::kNeedRoot);
  std::thread t([] {
    // A namespace of this thread's own (commands it runs are in it too).
    if (::unshare(CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
      return;
    }
    for (const char* cmd : {"ip link set lo up", "ip addr add 45.33.250.1/30 dev lo",
                            "ip addr add 2001:db8::5/128 dev lo nodad"}) {
      const auto r = link_test::run(cmd);
      ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
    }
    std::vector<std::string> lines;
    base::EventLog events("test", [&](std::string_view l) {
      lines.emplace_back(l);
      return true;
    });
    io::EventLoop loop;
    policy::HostAddresses set;
    ASSERT_TRUE(set.add(ip("192.0.2.99")));  // anything there before is replaced
    auto watch = HostAddressWatch::start(loop, set, events);
    ASSERT_TRUE(watch.ok()) << watch.error();
    EXPECT_TRUE(set.contains(ip("127.0.0.1")));
    EXPECT_TRUE(set.contains(ip("::1")));
    EXPECT_TRUE(set.contains(ip("45.33.250.1")));
    EXPECT_TRUE(set.contains(ip("2001:db8::5")));
    EXPECT_FALSE(set.contains(ip("45.33.250.2")));  // the subnet's other addresses are not ours
    EXPECT_FALSE(set.contains(ip("192.0.2.99")));
    EXPECT_EQ(set.size(), 4u);
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.back().find("\"kind\":\"host_address\""), std::string::npos) << lines.back();
    EXPECT_NE(lines.back().find("45.33.250.1"), std::string::npos) << lines.back();

    auto r = link_test::run("ip addr add 93.184.215.99/32 dev lo");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(turn_until(loop, [&] { return set.contains(ip("93.184.215.99")); }));
    r = link_test::run("ip addr del 45.33.250.1/30 dev lo");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(turn_until(loop, [&] { return !set.contains(ip("45.33.250.1")); }));
    EXPECT_TRUE(set.contains(ip("93.184.215.99")));
    EXPECT_EQ((*watch)->changes(), 2u);
    bool added_event = false;
    for (const auto& l : lines) added_event |= l.find("93.184.215.99") != std::string::npos;
    EXPECT_TRUE(added_event);

    // An IPv6 route added and removed: the watch says routes changed (the
    // stack's RouteCache then asks again); an IPv4 one is not watched.
    int route_changes = 0;
    (*watch)->on_routes_changed([&] { ++route_changes; });
    r = link_test::run("ip -6 route add 2001:db8:77::/64 dev lo");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(turn_until(loop, [&] { return route_changes > 0; }));
    const int after_add = route_changes;
    r = link_test::run("ip -6 route del 2001:db8:77::/64 dev lo");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(turn_until(loop, [&] { return route_changes > after_add; }));
  });
  t.join();
}

}  // namespace
}  // namespace abox::netstack
