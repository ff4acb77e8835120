// HelperClient (helper/client.h) against the real abox-helper, started as
// root, the client running as an unprivileged operator uid in a forked
// child. Cgroups are off here (--cgroup-root none: this host may have no
// cgroup v2 controllers); helper_cgroup_test covers them where there are
// (tests/e2e/helper_e2e.py runs it in a VM). Needs root: it starts the
// helper; CI runs as root.
#include "helper/client.h"

#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>

#include "tests/helper/helper_rig.h"
#include "tests/support/needs_root.h"

namespace abox::helper {
namespace {

using abox::testing::as_uid;
using abox::testing::HelperProcess;
using abox::testing::kOperatorGid;
using abox::testing::kOperatorUid;
using abox::testing::kOtherUid;
using abox::testing::TempDir;

std::string describe(const HelperError& e) {
  return std::string(code_name(e.code)) + "|" + e.message;
}

class HelperClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ABOX_NEEDS_ROOT("starts abox-helper");
    helper_ = std::make_unique<HelperProcess>(ABOX_HELPER_PATH, dir_,
                                              std::vector<std::string>{"--cgroup-root", "none"});
    ASSERT_TRUE(helper_->ready()) << helper_->log();
  }
  TempDir dir_{"helper-client"};
  std::unique_ptr<HelperProcess> helper_;
};

TEST_F(HelperClientTest, HelloSaysWhetherCgroupsAreAvailable) {
  const std::string sock = helper_->socket();
  auto out = as_uid(kOperatorUid, kOperatorGid, [&] {
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    auto h = c->hello();
    if (!h.ok()) return "hello: " + h.error().to_string();
    auto cg = c->create_cgroup("dev", CgroupLimits{});
    return std::string(h->cgroups ? "cgroups" : "no-cgroups") + " " +
           (cg.ok() ? std::string("created") : describe(cg.error()));
  });
  EXPECT_EQ(out, "no-cgroups unavailable|no cgroup root was given (--cgroup-root)");
}

TEST_F(HelperClientTest, TapMadeInTheOperatorsOwnNamespaceAndRemoved) {
  const std::string sock = helper_->socket();
  auto out = as_uid(kOperatorUid, kOperatorGid, [&]() -> std::string {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return "unshare failed";
    base::UniqueFd ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    std::string r;
    auto made = c->create_tap("abox-t0", ns.get());
    r += made.ok() ? "made" : describe(made.error());
    r += ::if_nametoindex("abox-t0") != 0 ? " present" : " absent";
    auto again = c->create_tap("abox-t0", ns.get());
    r += again.ok() ? " made-twice" : " " + std::string(code_name(again.error().code));
    auto lo = c->delete_tap("lo", ns.get());
    r += lo.ok() ? " deleted-lo" : " " + std::string(code_name(lo.error().code));
    auto gone = c->delete_tap("abox-t0", ns.get());
    r += gone.ok() ? " deleted" : " " + describe(gone.error());
    r += ::if_nametoindex("abox-t0") != 0 ? " present" : " absent";
    auto twice = c->delete_tap("abox-t0", ns.get());
    r += twice.ok() ? " deleted-twice" : " " + std::string(code_name(twice.error().code));
    return r;
  });
  EXPECT_EQ(out, "made present exists not-permitted deleted absent not-found");
}

TEST_F(HelperClientTest, TheHostsNamespaceIsNotTheOperators) {
  const std::string sock = helper_->socket();
  auto out = as_uid(kOperatorUid, kOperatorGid, [&]() -> std::string {
    base::UniqueFd ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    auto made = c->create_tap("abox-host0", ns.get());
    return made.ok() ? "made" : describe(made.error());
  });
  EXPECT_EQ(out,
            "not-permitted|the network namespace belongs to uid 0, not to the operator (uid 64123): make it "
            "in a user namespace of your own");
  EXPECT_EQ(::if_nametoindex("abox-host0"), 0u);
}

TEST_F(HelperClientTest, PeersOtherThanTheOperatorAreRefused) {
  const std::string sock = helper_->socket();
  auto try_hello = [&] {
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    auto h = c->hello();
    return h.ok() ? std::string("served") : describe(h.error());
  };
  // In the operator's group (so it can reach the socket), but another uid.
  EXPECT_EQ(as_uid(kOtherUid, kOperatorGid, try_hello),
            "not-permitted|uid 64124 is not this helper's operator");
  EXPECT_EQ(as_uid(0, 0, try_hello), "not-permitted|uid 0 is not this helper's operator");
  // Outside the group: the socket's mode keeps it out before the helper sees it.
  auto outside = as_uid(kOtherUid, kOtherUid, try_hello);
  EXPECT_NE(outside.find("Permission denied"), std::string::npos) << outside;
  // And the operator is still served.
  EXPECT_EQ(as_uid(kOperatorUid, kOperatorGid, try_hello), "served");
  EXPECT_NE(helper_->log().find("refused pid"), std::string::npos);
}

TEST_F(HelperClientTest, TheClientChecksEveryFieldBeforeSending) {
  const std::string sock = helper_->socket();
  auto out = as_uid(kOperatorUid, kOperatorGid, [&]() -> std::string {
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    std::string r;
    auto add = [&](const base::Result<void, HelperError>& x) {
      r += x.ok() ? "ok;" : std::string(code_name(x.error().code)) + ";";
    };
    add(c->create_cgroup("../etc", {}));
    add(c->create_cgroup("dev", CgroupLimits{std::uint64_t{1}, std::nullopt, std::nullopt}));
    add(c->create_cgroup("dev", CgroupLimits{std::nullopt, CpuMax{100, 100000}, std::nullopt}));
    add(c->move_into_cgroup("dev", {}));
    const pid_t zero[] = {0};
    add(c->move_into_cgroup("dev", zero));
    add(c->delete_cgroup(std::string(65, 'a')));
    add(c->create_tap("a/b", 0));
    add(c->delete_tap("", 0));
    return r;
  });
  EXPECT_EQ(out, "bad-name;out-of-range;out-of-range;bad-field;out-of-range;bad-name;bad-name;bad-name;");
  // None of them reached the helper.
  EXPECT_EQ(helper_->log().find("uid 64123:"), std::string::npos) << helper_->log();
}

TEST_F(HelperClientTest, ARefusedRawRequestLeavesTheConnectionUsable) {
  const std::string sock = helper_->socket();
  auto out = as_uid(kOperatorUid, kOperatorGid, [&]() -> std::string {
    auto c = HelperClient::connect(sock);
    if (!c.ok()) return "connect: " + c.error().to_string();
    std::string r;
    for (std::string_view raw :
         {"garbage\n", "abox-helper/1 cgroup-delete instance=a/b\n", "abox-helper/1 hello"}) {
      auto reply = c->exchange_raw(raw, {});
      if (!reply.ok()) return r + reply.error().to_string();
      r += std::string(reply->ok ? "ok" : code_name(reply->code)) + ";";
    }
    auto h = c->hello();
    return r + (h.ok() ? "hello" : h.error().to_string());
  });
  EXPECT_EQ(out, "version;bad-name;malformed;hello");
}

TEST_F(HelperClientTest, NothingListeningIsUnreachable) {
  auto c = HelperClient::connect(dir_.path() + "/nothing.sock");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, HelperError::Kind::kUnreachable);
  EXPECT_NE(c.error().to_string().find("No such file"), std::string::npos);
}

TEST_F(HelperClientTest, StopsOnSigtermAndRemovesItsSocket) {
  EXPECT_EQ(helper_->stop(), 0);
  EXPECT_FALSE(helper_->ready());
}

TEST(HelperSocketPath, DefaultAndOverride) {
  ::unsetenv("ABOX_HELPER_SOCKET");
  EXPECT_EQ(helper_socket_path(1000), "/run/abox/helper-1000.sock");
  ::setenv("ABOX_HELPER_SOCKET", "/tmp/x.sock", 1);
  EXPECT_EQ(helper_socket_path(1000), "/tmp/x.sock");
  ::unsetenv("ABOX_HELPER_SOCKET");
}

}  // namespace
}  // namespace abox::helper
