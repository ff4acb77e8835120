// abox doctor's daemon item: what the daemon's socket answered to the API's
// ping, judged (engine/doctor/host_checks.h judge_daemon_answer), and the
// whole item against sockets this test serves: a real daemon's answer comes
// from e2e.doctor.
#include "engine/doctor/host_checks.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

const std::string kSocket = "/run/user/1000/abox/daemon.sock";

CheckItem judge(std::string_view answer, std::string_view version = "0.1.0") {
  return judge_daemon_answer(answer, version, kSocket);
}

TEST(DaemonAnswer, ThePingOfThisVersionIsOk) {
  auto item = judge(R"({"id":1,"ok":true,"version":"0.1.0","api":1,"pid":4242,"instances":2,"clients":1})");
  EXPECT_EQ(item.status, CheckStatus::kOk) << item.detail;
  EXPECT_EQ(item.id, "daemon");
  EXPECT_NE(item.detail.find("version 0.1.0"), std::string::npos) << item.detail;
  EXPECT_NE(item.detail.find("pid 4242"), std::string::npos) << item.detail;
  EXPECT_NE(item.detail.find("2 instance"), std::string::npos) << item.detail;
  EXPECT_TRUE(item.fix.empty());
}

TEST(DaemonAnswer, AnotherVersionIsDegradedWithTheWayToStopIt) {
  auto item = judge(R"({"id":1,"ok":true,"version":"0.0.9","api":1,"pid":77})");
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_NE(item.detail.find("version 0.0.9; this abox is 0.1.0"), std::string::npos) << item.detail;
  EXPECT_NE(item.fix.find("kill 77"), std::string::npos) << item.fix;
  EXPECT_FALSE(item.cost.empty());
}

TEST(DaemonAnswer, AnotherApiIsDegraded) {
  auto item = judge(R"({"id":1,"ok":true,"version":"0.1.0","api":2,"pid":77})");
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_NE(item.detail.find("API 2"), std::string::npos) << item.detail;
  EXPECT_NE(item.fix.find("kill 77"), std::string::npos) << item.fix;
}

TEST(DaemonAnswer, ARefusalSaysWhyAndWhatToDo) {
  auto peer = judge(R"({"id":0,"ok":false,"error":"refused: uid 1001 is not this daemon's operator"})");
  EXPECT_EQ(peer.status, CheckStatus::kDegraded);
  EXPECT_NE(peer.detail.find("uid 1001"), std::string::npos) << peer.detail;
  EXPECT_NE(peer.fix.find("user the daemon runs for"), std::string::npos) << peer.fix;
  auto version = judge(R"({"id":1,"ok":false,"error":"version 1 is not spoken here: this daemon speaks 2"})");
  EXPECT_EQ(version.status, CheckStatus::kDegraded);
  EXPECT_NE(version.fix.find("stop it"), std::string::npos) << version.fix;
}

TEST(DaemonAnswer, WhatIsNotTheApiIsDegradedNeverOk) {
  for (std::string_view bad : {
           "",                                                   // closed at once
           "HTTP/1.1 400 Bad Request",                           // another server
           "[1,2,3]",                                            // JSON, not an object
           R"({"id":1})",                                        // no ok
           R"({"id":"1","ok":true,"version":"0.1.0","api":1})",  // id of the wrong type
           R"({"id":2,"ok":true,"version":"0.1.0","api":1})",    // another request's id
           R"({"id":1,"ok":true,"api":1})",                      // no version
           R"({"id":1,"ok":true,"version":1,"api":1})",          // version not a string
           R"({"id":1,"ok":true,"version":"0.1.0"})",            // no api
           R"({"id":1,"ok":true,"version":"0.1.0","api":"1"})",  // api of the wrong type
           R"({"id":1,"ok":true,"version":"0.1.0","api":1)",     // cut short
           R"({"id":1,"ok":"yes","version":"0.1.0","api":1})",   // ok of the wrong type
       }) {
    auto item = judge(bad);
    EXPECT_EQ(item.status, CheckStatus::kDegraded) << bad;
    EXPECT_FALSE(item.fix.empty()) << bad;
  }
}

TEST(DaemonAnswer, WhatThePeerSentIsQuotedPrintableAndShort) {
  std::string nasty = "\x1b[31mred\x07";
  nasty += std::string(500, 'x');
  auto item = judge(nasty);
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_EQ(item.detail.find('\x1b'), std::string::npos) << item.detail;
  EXPECT_EQ(item.detail.find('\x07'), std::string::npos) << item.detail;
  EXPECT_LT(item.detail.size(), 400u) << item.detail;
  auto version = judge(R"({"id":1,"ok":true,"version":"\u001b[2J","api":1})");
  EXPECT_EQ(version.status, CheckStatus::kDegraded);
  EXPECT_EQ(version.detail.find('\x1b'), std::string::npos) << version.detail;
}

TEST(DaemonAnswer, AnOverlongAnswerIsDegraded) {
  std::string big =
      R"({"id":1,"ok":true,"version":"0.1.0","api":1,"pad":")" + std::string(kMaxDaemonAnswer, 'a') + "\"}";
  auto item = judge(big);
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_NE(item.detail.find("more than"), std::string::npos) << item.detail;
}

// The whole item against a socket this test serves.
class DaemonItem : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir_ = dir_.path() + "/abox";
    ASSERT_EQ(::mkdir(run_dir_.c_str(), 0700), 0);
  }
  CheckItem daemon_item() {
    HostCheckInputs in;
    in.daemon_dir = run_dir_;
    in.abox_version = "0.1.0";
    return check_daemon(in);
  }
  // Listens on daemon.sock (a backlog of 4, nothing accepted unless the test does).
  base::UniqueFd listen_here() {
    base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string path = run_dir_ + "/daemon.sock";
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd.get(), 4), 0);
    return fd;
  }
  abox::testing::TempDir dir_{"doctor"};
  std::string run_dir_;
};

TEST_F(DaemonItem, NothingThereIsNotRunning) {
  auto item = daemon_item();
  EXPECT_EQ(item.id, "daemon");
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_EQ(item.detail.rfind("not running", 0), 0u) << item.detail;
  EXPECT_NE(item.fix.find("abox daemon"), std::string::npos) << item.fix;
}

TEST_F(DaemonItem, AStaleSocketIsNotRunning) {
  { auto fd = listen_here(); }  // bound, then closed: the file stays, nobody accepts
  auto item = daemon_item();
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_NE(item.detail.find("left from one that ended"), std::string::npos) << item.detail;
}

TEST_F(DaemonItem, AFolderOthersMayEnterIsDegradedWithTheFix) {
  ASSERT_EQ(::chmod(run_dir_.c_str(), 0755), 0);
  auto item = daemon_item();
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_EQ(item.fix, "chmod 700 " + run_dir_);
}

TEST_F(DaemonItem, AListenerThatNeverAnswersIsDegradedAfterItsDeadline) {
  auto fd = listen_here();  // accepted by the kernel's backlog, never read
  auto item = daemon_item();
  EXPECT_EQ(item.status, CheckStatus::kDegraded);
  EXPECT_NE(item.detail.find("did not answer a ping"), std::string::npos) << item.detail;
}

TEST_F(DaemonItem, TheAnswerToThePingIsRead) {
  auto fd = listen_here();
  std::string asked;
  std::thread server([&] {
    base::UniqueFd c(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[256];
    ssize_t n = ::read(c.get(), buf, sizeof buf);
    if (n > 0) asked.assign(buf, static_cast<std::size_t>(n));
    std::string answer = R"({"id":1,"ok":true,"version":"0.1.0","api":1,"pid":99,"instances":0})"
                         "\n";
    (void)!::write(c.get(), answer.data(), answer.size());
  });
  auto item = daemon_item();
  server.join();
  EXPECT_EQ(asked, "{\"v\":1,\"id\":1,\"op\":\"ping\"}\n");
  EXPECT_EQ(item.status, CheckStatus::kOk) << item.detail;
  EXPECT_NE(item.detail.find("pid 99"), std::string::npos) << item.detail;
}

}  // namespace
}  // namespace abox::engine
