// The daemon's instances in abox-helper's cgroups, for real: the real
// abox-helper (root), the real `abox daemon` and `abox` CLI (as an
// unprivileged operator), real cgroup v2. Needs the memory, cpu and pids
// controllers, so e2e.helper runs it in its VM (tests/e2e/helper_e2e.py).
//
// The one stand-in is the shim's body past its cgroup step: a process of the
// operator runs the shim's own enter_instance_cgroup() (shim.h), writes
// shim.json and instance.json the way the shim does, and starts two children
// that die with it (PDEATHSIG, as the supervisor's abox-net, broker and QEMU
// do). Booting a guest inside this VM would be QEMU on TCG inside QEMU on
// TCG; the daemon adopts the stand-in exactly as it adopts a shim.
//
// Environment:
//   ABOX_HELPER=PATH          abox-helper (default: the build's)
//   ABOX_BIN=PATH             abox (default: the build's)
//   ABOX_CGROUP_PARENT=DIR    the cgroup v2 folder to work under (default /sys/fs/cgroup)
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/daemon/instance_files.h"
#include "engine/daemon/shim.h"
#include "engine/instance/state_folder.h"
#include "engine/process/child_process.h"
#include "tests/helper/helper_rig.h"
#include "tests/support/temp_dir.h"

namespace abox::testing {
namespace {

using engine::CgroupRecord;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// This process's cgroup v2 path ("0::PATH").
std::string cgroup_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "?";
}

template <class Pred>
bool wait_until(Pred&& pred, std::chrono::seconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

class DaemonCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ = env_or("ABOX_CGROUP_PARENT", "/sys/fs/cgroup");
    root_name_ = "abox-dcg-" + std::to_string(::getpid());
    root_ = parent_ + "/" + root_name_;
    home_ = dir_.path() + "/home";
    for (const char* sub : {"", "/state", "/run"}) {
      ::mkdir((home_ + sub).c_str(), 0700);
      ASSERT_EQ(::chown((home_ + sub).c_str(), kOperatorUid, kOperatorGid), 0);
    }
    helper_ = std::make_unique<HelperProcess>(env_or("ABOX_HELPER", ABOX_HELPER_PATH), dir_,
                                              std::vector<std::string>{"--cgroup-root", root_});
    ASSERT_TRUE(helper_->ready()) << helper_->log();
    env_ = {"HOME=" + home_,
            "XDG_STATE_HOME=" + home_ + "/state",
            "XDG_RUNTIME_DIR=" + home_ + "/run",
            "ABOX_HELPER_SOCKET=" + helper_->socket(),
            "PATH=/bin:/usr/bin",
            "LANG=C"};
    instances_ = home_ + "/state/abox/instances";
  }
  void TearDown() override {
    stop_daemon(SIGTERM);
    for (pid_t p : stand_ins_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    helper_->stop();
    ::rmdir(root_.c_str());
  }

  // The shim's part up to its supervisor, as the operator: returns its pid
  // once it is in place (its children started), or -1.
  pid_t start_stand_in(const std::string& name, const std::string& helper_socket) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return -1;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      if (!drop_to(kOperatorUid, kOperatorGid)) ::_exit(1);
      ::setenv("ABOX_HELPER_SOCKET", helper_socket.c_str(), 1);
      auto folder = engine::StateFolder::create(instances_, name);
      if (!folder.ok()) ::_exit(2);
      engine::DetachedConfig config;
      config.args = {"--name", name, "--", "true"};
      config.cwd = "/";
      config.boots = 1;
      (void)folder->write_file("config.json", engine::detached_config_json(config));
      (void)engine::enter_instance_cgroup(*folder, name, 256, 1, /*may_use_tcg=*/false);
      std::string line = "r";
      for (int i = 0; i < 2; ++i) {
        pid_t kid = ::fork();
        if (kid == 0) {
          ::prctl(PR_SET_PDEATHSIG, SIGKILL);
          for (;;) ::pause();
        }
        line += " " + std::to_string(kid);
      }
      engine::ShimRecord me{::getpid(), engine::process_start_ticks(::getpid())};
      (void)folder->write_file("shim.json", engine::shim_record_json(me));
      (void)folder->write_file("instance.json", "{\"name\":\"" + name + "\",\"state\":\"running\"}\n");
      line += "\n";
      ssize_t ignored = ::write(ready[1], line.data(), line.size());
      (void)ignored;
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char buf[128];
    ssize_t n = ::read(ready[0], buf, sizeof buf - 1);
    ::close(ready[0]);
    if (n <= 0 || buf[0] != 'r') return -1;
    buf[n] = '\0';
    std::istringstream words(buf + 1);
    children_.clear();
    pid_t kid;
    while (words >> kid) children_.push_back(kid);
    stand_ins_.push_back(pid);
    return pid;
  }
  void kill_stand_in(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    std::erase(stand_ins_, pid);
  }

  // `abox ARGS` as the operator: (exit status, stdout and stderr).
  std::pair<int, std::string> abox(std::vector<std::string> args) {
    args.insert(args.begin(), abox_);
    std::string log = dir_.path() + "/abox.out";
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      if (!drop_to(kOperatorUid, kOperatorGid)) ::_exit(126);
      exec(args);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(log)};
  }
  void start_daemon() {
    daemon_ = ::fork();
    if (daemon_ == 0) {
      int fd = ::open((dir_.path() + "/daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
      ::dup2(fd, 2);
      if (!drop_to(kOperatorUid, kOperatorGid)) ::_exit(126);
      exec({abox_, "daemon"});
    }
    wait_until([&] { return exists(home_ + "/run/abox/daemon.sock"); }, std::chrono::seconds(20));
  }
  void stop_daemon(int sig) {
    if (daemon_ <= 0) return;
    ::kill(daemon_, sig);
    ::waitpid(daemon_, nullptr, 0);
    daemon_ = -1;
  }
  [[noreturn]] void exec(const std::vector<std::string>& args) {
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env_) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  std::string daemon_log() { return slurp(dir_.path() + "/daemon.log"); }
  std::vector<std::string> leftovers() {
    std::vector<std::string> out;
    std::string d = home_ + "/run/abox/cgroup-leftovers";
    if (DIR* dir = ::opendir(d.c_str())) {
      while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] != '.') out.emplace_back(e->d_name);
      }
      ::closedir(dir);
    }
    return out;
  }

  TempDir dir_{"dcg"};
  std::string parent_, root_name_, root_, home_, instances_;
  std::string abox_ = env_or("ABOX_BIN", ABOX_BIN_PATH);
  std::vector<std::string> env_;
  std::unique_ptr<HelperProcess> helper_;
  std::vector<pid_t> stand_ins_;
  std::vector<pid_t> children_;
  pid_t daemon_ = -1;
};

TEST_F(DaemonCgroupTest, EveryProcessIsInTheCgroupWithItsLimitsAndRmDeletesIt) {
  pid_t shim = start_stand_in("dev", helper_->socket());
  ASSERT_GT(shim, 0);
  const std::string cg = root_ + "/dev";
  const std::string want = "/" + root_name_ + "/dev";
  EXPECT_EQ(cgroup_of(shim), want);
  auto kids = children_;  // the last stand-in's two children
  ASSERT_EQ(kids.size(), 2u);
  for (pid_t k : kids) EXPECT_EQ(cgroup_of(k), want) << "child " << k;
  EXPECT_EQ(slurp(cg + "/memory.max"),
            std::to_string((256ull + engine::kCgroupMemoryOverheadMib) << 20) + "\n");
  EXPECT_EQ(slurp(cg + "/cpu.max"), "200000 100000\n");
  EXPECT_EQ(slurp(cg + "/pids.max"), std::to_string(engine::kCgroupPidsMax) + "\n");
  std::string procs = slurp(cg + "/cgroup.procs");
  for (pid_t p : {shim, kids[0], kids[1]})
    EXPECT_NE(procs.find(std::to_string(p) + "\n"), std::string::npos) << procs;

  start_daemon();
  auto [code, out] = abox({"inspect", "--json", "dev"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find(R"("cgroup":{"state":"placed","name":"dev")"), std::string::npos) << out;
  auto [lcode, ls] = abox({"ls", "--json"});
  EXPECT_NE(ls.find(R"("state":"placed")"), std::string::npos) << ls;

  auto [rcode, rout] = abox({"rm", "-f", "dev"});
  EXPECT_EQ(rcode, 0) << rout;
  ::waitpid(shim, nullptr, 0);  // the daemon SIGKILLed it; reap it
  std::erase(stand_ins_, shim);
  EXPECT_TRUE(wait_until([&] { return !exists(cg); }, std::chrono::seconds(25))) << daemon_log();
  EXPECT_FALSE(exists(instances_ + "/dev"));
  EXPECT_TRUE(wait_until([&] { return leftovers().empty(); }, std::chrono::seconds(5)));
  EXPECT_NE(daemon_log().find("dev: its cgroup is deleted"), std::string::npos) << daemon_log();
}

TEST_F(DaemonCgroupTest, ALeftoverIsSweptWhenTheDaemonStartsAgainAfterSigkill) {
  pid_t shim = start_stand_in("two", helper_->socket());
  ASSERT_GT(shim, 0);
  const std::string cg = root_ + "/two";
  ASSERT_TRUE(exists(cg));
  start_daemon();
  ASSERT_TRUE(wait_until([&] { return daemon_log().find("adopted two") != std::string::npos; },
                         std::chrono::seconds(10)))
      << daemon_log();
  stop_daemon(SIGKILL);
  kill_stand_in(shim);  // its children die with it; nobody is there to delete the cgroup
  EXPECT_TRUE(wait_until([&] { return slurp(cg + "/cgroup.procs").empty(); }, std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(exists(cg));
  start_daemon();
  EXPECT_TRUE(wait_until([&] { return !exists(cg); }, std::chrono::seconds(25))) << daemon_log();
  // The record is rewritten right after the helper's answer.
  EXPECT_TRUE(wait_until(
      [&] { return engine::read_cgroup_record(instances_ + "/two").state == CgroupRecord::State::kRemoved; },
      std::chrono::seconds(5)));
  auto [code, out] = abox({"inspect", "--json", "two"});
  EXPECT_NE(out.find(R"("cgroup":{"state":"removed","name":"two"})"), std::string::npos) << out;
  auto [ecode, events] = abox({"events", "--json", "two"});
  EXPECT_NE(events.find(R"("state":"removed")"), std::string::npos) << events;
  EXPECT_TRUE(leftovers().empty());
}

// rm while the helper is away: the state folder goes, the name stays listed
// in cgroup-leftovers/, and a daemon started once the helper is back deletes
// the cgroup (no state folder names it any more).
TEST_F(DaemonCgroupTest, ACgroupOfARemovedInstanceIsDeletedOnceTheHelperIsBack) {
  pid_t shim = start_stand_in("gone", helper_->socket());
  ASSERT_GT(shim, 0);
  const std::string cg = root_ + "/gone";
  ASSERT_TRUE(exists(cg));
  start_daemon();
  helper_->stop();
  auto [code, out] = abox({"rm", "-f", "gone"});
  EXPECT_EQ(code, 0) << out;
  ::waitpid(shim, nullptr, 0);
  std::erase(stand_ins_, shim);
  EXPECT_FALSE(exists(instances_ + "/gone"));
  EXPECT_TRUE(exists(cg));
  EXPECT_EQ(leftovers(), std::vector<std::string>{"gone"});
  stop_daemon(SIGTERM);
  helper_ = std::make_unique<HelperProcess>(env_or("ABOX_HELPER", ABOX_HELPER_PATH), dir_,
                                            std::vector<std::string>{"--cgroup-root", root_});
  ASSERT_TRUE(helper_->ready()) << helper_->log();
  start_daemon();
  EXPECT_TRUE(wait_until([&] { return !exists(cg); }, std::chrono::seconds(25))) << daemon_log();
  EXPECT_TRUE(wait_until([&] { return leftovers().empty(); }, std::chrono::seconds(5)));
}

// Churn: instances placed and removed one after another, names coming back,
// leave no cgroup and no listed name behind (an rm may meet a cgroup its
// dying processes still hold: the daemon retries while it is busy).
TEST_F(DaemonCgroupTest, ChurnLeavesNoCgroupBehind) {
  start_daemon();
  constexpr int kCycles = 10;
  int placed = 0, removed = 0;
  for (int i = 0; i < kCycles; ++i) {
    const std::string name = "churn" + std::to_string(i % 3);  // names come back, as they do
    pid_t shim = start_stand_in(name, helper_->socket());
    ASSERT_GT(shim, 0);
    if (cgroup_of(shim) == "/" + root_name_ + "/" + name) ++placed;
    auto [code, out] = abox({"rm", "-f", name});
    EXPECT_EQ(code, 0) << out;
    ::waitpid(shim, nullptr, 0);
    std::erase(stand_ins_, shim);
    if (wait_until([&] { return !exists(root_ + "/" + name); }, std::chrono::seconds(25))) ++removed;
  }
  EXPECT_EQ(placed, kCycles);
  EXPECT_EQ(removed, kCycles) << daemon_log();
  EXPECT_TRUE(wait_until([&] { return leftovers().empty(); }, std::chrono::seconds(5)));
  std::string left;
  if (DIR* d = ::opendir(root_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && e->d_name[0] != '.') left += std::string(e->d_name) + " ";
    }
    ::closedir(d);
  }
  EXPECT_EQ(left, "");
}

// The real shim, started by the real daemon for `abox run -d`: it enters the
// cgroup before anything else (here it then fails: this VM has no guest
// image), and the daemon deletes the cgroup once the shim has ended.
TEST_F(DaemonCgroupTest, TheRealShimEntersItsCgroupFirstAndTheDaemonDeletesItAfter) {
  start_daemon();
  const std::string policy = home_ + "/policy.toml";
  std::ofstream(policy) << "version = 1\n[dns]\nupstreams = [\"192.0.2.1:53\"]\n"
                        << "[[allow]]\nnames = [\"example.test\"]\nports = [80]\n";
  ASSERT_EQ(::chown(policy.c_str(), kOperatorUid, kOperatorGid), 0);
  auto [code, out] = abox(
      {"run", "-d", "--policy", policy, "--name", "real", "--memory", "300", "--cpus", "2", "--", "true"});
  EXPECT_NE(code, 0) << out;  // no guest image or QEMU in this VM
  const std::string events = slurp(instances_ + "/real/events.jsonl");
  const std::string placed =
      R"("kind":"cgroup","source":"shim","state":"placed","cgroup":"real","memory_max":)" +
      std::to_string((300ull + engine::kCgroupMemoryOverheadMib + engine::kCgroupTcgCacheMib) << 20) +
      R"(,"cpu_max":"300000/100000","pids_max":1024)";
  EXPECT_NE(events.find(placed), std::string::npos) << out << events << slurp(instances_ + "/real/shim.log");
  EXPECT_TRUE(wait_until([&] { return !exists(root_ + "/real"); }, std::chrono::seconds(25))) << daemon_log();
  EXPECT_TRUE(wait_until(
      [&] { return engine::read_cgroup_record(instances_ + "/real").state == CgroupRecord::State::kRemoved; },
      std::chrono::seconds(5)))
      << daemon_log();
  auto [rcode, rout] = abox({"rm", "real"});
  EXPECT_EQ(rcode, 0) << rout;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(DaemonCgroupTest, WithoutAHelperTheInstanceRunsWithoutACgroupAndSaysWhy) {
  pid_t shim = start_stand_in("free", dir_.path() + "/nobody.sock");
  ASSERT_GT(shim, 0);
  EXPECT_EQ(cgroup_of(shim).find(root_name_), std::string::npos) << cgroup_of(shim);
  CgroupRecord r = engine::read_cgroup_record(instances_ + "/free");
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("no abox-helper answers"), std::string::npos) << r.reason;
  EXPECT_FALSE(exists(root_ + "/free"));
  start_daemon();
  auto [code, out] = abox({"inspect", "--json", "free"});
  EXPECT_NE(out.find(R"("cgroup":{"state":"none","reason":"no abox-helper answers)"), std::string::npos)
      << out;
}

// doctor's cgroup item: OK exactly when instances will get a cgroup.
TEST_F(DaemonCgroupTest, DoctorSaysOkOnlyWhenInstancesGetACgroup) {
  auto [code, out] = abox({"doctor", "--json"});
  const std::string ok_item =
      R"("id":"cgroup","title":"cgroup v2","status":"OK","detail":"each instance gets a cgroup)";
  EXPECT_NE(out.find(ok_item), std::string::npos) << out;
  env_.push_back("ABOX_HELPER_SOCKET=" + dir_.path() + "/nobody.sock");  // the last one counts
  std::erase_if(env_, [&](const std::string& e) { return e == "ABOX_HELPER_SOCKET=" + helper_->socket(); });
  auto [code2, out2] = abox({"doctor", "--json"});
  const std::string degraded =
      R"("id":"cgroup","title":"cgroup v2","status":"DEGRADED","detail":"memory, cpu and pids, but abox-helper is not reachable)";
  EXPECT_NE(out2.find(degraded), std::string::npos) << out2;
}

}  // namespace
}  // namespace abox::testing
