// abox-helper's cgroups, for real: the helper as root with its root under a
// cgroup v2 mount that offers memory, cpu and pids; the client as an
// unprivileged operator uid. Needs such a mount, which hosts that still bind
// those controllers to cgroup v1 do not have, so this program is not a ctest
// of its own: tests/e2e/helper_e2e.py boots a VM with cgroup v2 and runs it
// there (and on a host with the controllers it runs as it is).
//
//   ABOX_HELPER=PATH          the abox-helper program (default: the build's)
//   ABOX_CGROUP_PARENT=DIR    the cgroup v2 folder to work under (default /sys/fs/cgroup)
//
// Each client call is its own statement: the order of the operands of `+`
// is unspecified, and GCC calls right to left.
//
// Every test checks the cgroup files themselves, and that the helper's root
// is gone when the helper stops: nothing is left.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <set>

#include "helper/client.h"
#include "tests/helper/helper_rig.h"

namespace abox::helper {
namespace {

using abox::testing::as_uid;
using abox::testing::drop_to;
using abox::testing::HelperProcess;
using abox::testing::kOperatorGid;
using abox::testing::kOperatorUid;
using abox::testing::TempDir;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::set<std::string> subfolders(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && std::string(e->d_name) != "." && std::string(e->d_name) != "..")
        out.insert(e->d_name);
    }
    ::closedir(d);
  }
  return out;
}

std::string outcome(const base::Result<void, HelperError>& r) {
  return r.ok() ? "ok" : std::string(code_name(r.error().code));
}

// A process of the operator's that the test steers through pipes: on 'f' it
// tries to fork 5 children (each waits for it to end) and writes how many it
// got as one byte; on 'q' or EOF it ends them, reaps them and exits.
class OperatorProcess {
 public:
  OperatorProcess() {
    int cmd[2], res[2];
    if (::pipe(cmd) != 0 || ::pipe(res) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(cmd[1]);
      ::close(res[0]);
      if (!drop_to(kOperatorUid, kOperatorGid)) ::_exit(3);
      int hold[2];
      if (::pipe(hold) != 0) ::_exit(4);
      std::vector<pid_t> kids;
      char c;
      while (::read(cmd[0], &c, 1) == 1 && c == 'f') {
        char got = 0;
        for (int i = 0; i < 5; ++i) {
          pid_t k = ::fork();
          if (k == 0) {
            ::close(hold[1]);
            char x;
            [[maybe_unused]] auto n = ::read(hold[0], &x, 1);
            ::_exit(0);
          }
          if (k > 0) {
            kids.push_back(k);
            ++got;
          }
        }
        [[maybe_unused]] auto n = ::write(res[1], &got, 1);
      }
      ::close(hold[1]);
      for (pid_t k : kids) ::waitpid(k, nullptr, 0);
      ::_exit(0);
    }
    ::close(cmd[0]);
    ::close(res[1]);
    cmd_ = cmd[1];
    res_ = res[0];
  }
  ~OperatorProcess() { end(); }
  pid_t pid() const { return pid_; }
  // How many of 5 forks it got.
  int fork_five() {
    char c = 'f', got = -1;
    if (::write(cmd_, &c, 1) != 1 || ::read(res_, &got, 1) != 1) return -1;
    return got;
  }
  void end() {
    if (pid_ <= 0) return;
    ::close(cmd_);
    ::close(res_);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int cmd_ = -1, res_ = -1;
};

class HelperCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root: starts abox-helper";
    root_ = env_or("ABOX_CGROUP_PARENT", "/sys/fs/cgroup") + "/abox-test-" + std::to_string(::getpid()) +
            "-" + std::to_string(++counter_);
    helper_ = std::make_unique<HelperProcess>(env_or("ABOX_HELPER", ABOX_HELPER_PATH), dir_,
                                              std::vector<std::string>{"--cgroup-root", root_});
    ASSERT_TRUE(helper_->ready()) << helper_->log();
    sock_ = helper_->socket();
    auto hello = as_operator([&](HelperClient& c) -> std::string {
      auto h = c.hello();
      return h.ok() ? (h->cgroups ? "available" : "unavailable") : h.error().to_string();
    });
    ASSERT_EQ(hello, "available") << helper_->log();
    ASSERT_TRUE(exists(root_));
  }
  void TearDown() override {
    if (!helper_) return;
    EXPECT_EQ(helper_->stop(), 0) << helper_->log();
    EXPECT_FALSE(exists(root_)) << root_ << " is left: " << helper_->log();
  }

  // fn(client) as the operator, in a child; its string comes back.
  template <class Fn>
  std::string as_operator(Fn&& fn) {
    const std::string sock = sock_;
    return as_uid(kOperatorUid, kOperatorGid, [&]() -> std::string {
      auto c = HelperClient::connect(sock);
      if (!c.ok()) return "connect: " + c.error().to_string();
      return fn(*c);
    });
  }

  static inline int counter_ = 0;
  TempDir dir_{"helper-cg"};
  std::unique_ptr<HelperProcess> helper_;
  std::string root_, sock_;
};

TEST_F(HelperCgroupTest, CreateWritesEveryLimitAndDeleteRemovesIt) {
  EXPECT_EQ(as_operator([](HelperClient& c) {
              return outcome(c.create_cgroup("dev", CgroupLimits{64ULL << 20, CpuMax{50000, 100000}, 32}));
            }),
            "ok");
  EXPECT_EQ(read_text(root_ + "/dev/memory.max"), "67108864");
  EXPECT_EQ(read_text(root_ + "/dev/cpu.max"), "50000 100000");
  EXPECT_EQ(read_text(root_ + "/dev/pids.max"), "32");
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "ok");
  EXPECT_FALSE(exists(root_ + "/dev"));
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "not-found");
}

TEST_F(HelperCgroupTest, MaxMeansNoLimit) {
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.create_cgroup("free", CgroupLimits{})); }),
            "ok");
  EXPECT_EQ(read_text(root_ + "/free/memory.max"), "max");
  EXPECT_EQ(read_text(root_ + "/free/cpu.max").substr(0, 4), "max ");
  EXPECT_EQ(read_text(root_ + "/free/pids.max"), "max");
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("free")); }), "ok");
}

TEST_F(HelperCgroupTest, CreatingTwiceIsRefusedAndKeepsTheFirstLimits) {
  EXPECT_EQ(as_operator([](HelperClient& c) {
              std::string r = outcome(c.create_cgroup("dev", CgroupLimits{std::nullopt, std::nullopt, 10}));
              return r + " " + outcome(c.create_cgroup("dev", CgroupLimits{std::nullopt, std::nullopt, 99}));
            }),
            "ok exists");
  EXPECT_EQ(read_text(root_ + "/dev/pids.max"), "10");
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "ok");
}

TEST_F(HelperCgroupTest, AnOperatorsProcessIsMovedInAndThePidsLimitHolds) {
  OperatorProcess p;
  ASSERT_GT(p.pid(), 0);
  const pid_t pid = p.pid();
  EXPECT_EQ(as_operator([&](HelperClient& c) {
              const pid_t pids[] = {pid};
              std::string r = outcome(c.create_cgroup("dev", CgroupLimits{std::nullopt, std::nullopt, 3}));
              return r + " " + outcome(c.move_into_cgroup("dev", pids));
            }),
            "ok ok");
  const std::string leaf = root_.substr(root_.rfind('/'));
  EXPECT_EQ(read_text("/proc/" + std::to_string(pid) + "/cgroup"), "0::" + leaf + "/dev");
  EXPECT_EQ(read_text(root_ + "/dev/cgroup.procs"), std::to_string(pid));
  // pids.max 3: the process and two children; the other three forks fail.
  EXPECT_EQ(p.fork_five(), 2);
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "busy");
  EXPECT_TRUE(exists(root_ + "/dev"));
  p.end();
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "ok");
}

TEST_F(HelperCgroupTest, ProcessesThatAreNotTheOperatorsStayWhereTheyAre) {
  const std::string before_self = read_text("/proc/self/cgroup");
  const std::string before_init = read_text("/proc/1/cgroup");
  const pid_t self = ::getpid();
  EXPECT_EQ(as_operator([&](HelperClient& c) {
              const pid_t root_owned[] = {self};
              const pid_t init[] = {1};
              const pid_t missing[] = {4194303};
              std::string r = outcome(c.create_cgroup("dev", {}));
              r += " " + outcome(c.move_into_cgroup("dev", root_owned));
              r += " " + outcome(c.move_into_cgroup("dev", init));
              r += " " + outcome(c.move_into_cgroup("dev", missing));
              r += " " + outcome(c.move_into_cgroup("nosuch", root_owned));
              return r;
            }),
            "ok not-permitted not-permitted not-found not-found");
  EXPECT_EQ(read_text("/proc/self/cgroup"), before_self);
  EXPECT_EQ(read_text("/proc/1/cgroup"), before_init);
  EXPECT_EQ(read_text(root_ + "/dev/cgroup.procs"), "");
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "ok");
}

TEST_F(HelperCgroupTest, OneForeignPidInAListMovesNone) {
  OperatorProcess p;
  const pid_t mine = p.pid(), self = ::getpid();
  EXPECT_EQ(as_operator([&](HelperClient& c) {
              const pid_t pids[] = {mine, self};
              std::string r = outcome(c.create_cgroup("dev", {}));
              return r + " " + outcome(c.move_into_cgroup("dev", pids));
            }),
            "ok not-permitted");
  EXPECT_EQ(read_text(root_ + "/dev/cgroup.procs"), "");
  p.end();
  EXPECT_EQ(as_operator([](HelperClient& c) { return outcome(c.delete_cgroup("dev")); }), "ok");
}

TEST_F(HelperCgroupTest, MalformedRequestsChangeNothing) {
  static constexpr char kWithNul[] =
      "abox-helper/1 cgroup-create instance=a\0b memory_max=max cpu_max=max pids_max=max\n";
  const std::string raw[] = {
      "abox-helper/1 cgroup-create instance=a/b memory_max=max cpu_max=max pids_max=max\n",
      "abox-helper/1 cgroup-create instance=.. memory_max=max cpu_max=max pids_max=max\n",
      "abox-helper/1 cgroup-create instance=../escape memory_max=max cpu_max=max pids_max=max\n",
      std::string(kWithNul, sizeof(kWithNul) - 1),
      "abox-helper/1 cgroup-create instance=" + std::string(65, 'x') +
          " memory_max=max cpu_max=max pids_max=max\n",
      "abox-helper/1 cgroup-create instance=ok memory_max=1 cpu_max=max pids_max=max\n",
      "abox-helper/1 cgroup-create instance=ok memory_max=max cpu_max=0/0 pids_max=max\n",
      "abox-helper/1 cgroup-create instance=ok memory_max=max cpu_max=max pids_max=0\n",
      "abox-helper/1 cgroup-create instance=ok memory_max=max cpu_max=max\n",
      "abox-helper/1 cgroup-create instance=ok cpu_max=max memory_max=max pids_max=max\n",
      "abox-helper/1 cgroup-create instance=ok memory_max=max cpu_max=max pids_max=max extra=1\n",
  };
  std::string codes;
  for (const auto& r : raw) {
    codes += as_operator([&](HelperClient& c) -> std::string {
      auto reply = c.exchange_raw(r, {});
      if (!reply.ok()) return reply.error().to_string();
      return reply->ok ? "ok" : std::string(code_name(reply->code));
    });
    codes += ' ';
  }
  EXPECT_EQ(codes,
            "bad-name bad-name bad-name malformed bad-name out-of-range out-of-range out-of-range bad-field "
            "bad-field "
            "bad-field ");
  EXPECT_TRUE(subfolders(root_).empty());
  EXPECT_FALSE(exists(root_ + "/../escape"));
}

TEST_F(HelperCgroupTest, AtMost256Cgroups) {
  EXPECT_EQ(as_operator([](HelperClient& c) -> std::string {
              for (std::size_t i = 0; i < kMaxCgroups; ++i) {
                auto r = c.create_cgroup("i" + std::to_string(i), {});
                if (!r.ok()) return "create " + std::to_string(i) + ": " + r.error().to_string();
              }
              std::string over = outcome(c.create_cgroup("one-more", {}));
              for (std::size_t i = 0; i < kMaxCgroups; ++i) {
                auto r = c.delete_cgroup("i" + std::to_string(i));
                if (!r.ok()) return "delete " + std::to_string(i) + ": " + r.error().to_string();
              }
              return over;
            }),
            "limit");
  EXPECT_TRUE(subfolders(root_).empty());
}

}  // namespace
}  // namespace abox::helper
