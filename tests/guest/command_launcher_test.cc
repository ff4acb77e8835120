// The command launcher, in real child processes (no VM): the command runs as
// the uid and gid asked for, with no supplementary groups and no
// capabilities in any set, no_new_privs, in a session of its own, with the
// env given and nothing else, default signals, only fds 0-2; and each way a
// start can fail says which. Changing uid needs root: run as root (the
// tests say so and skip otherwise).
#include "guest/box_guest/command_launcher.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "guest/box_guest/console.h"
#include "tests/support/needs_root.h"
#include "tests/support/temp_dir.h"

namespace abox::guest {
namespace {

struct Ran {
  std::string out, err;
  std::optional<StartFailed> failed;
  int status = -1;
};

// Launches, feeds `input` to stdin (when open), reads everything to EOF and
// reaps the child; at most 20 s.
Ran run(const CommandSpec& spec, const std::string& input = "") {
  Ran ran;
  auto launched = launch_command(spec);
  if (!launched.ok()) {
    ran.failed = launched.error();
    return ran;
  }
  LaunchedCommand& c = *launched;
  std::string status;
  std::size_t fed = 0;
  if (c.stdin_write && input.empty()) c.stdin_write.reset();
  const auto deadline = monotonic_ms() + 20000;
  while ((c.stdout_read || c.stderr_read || c.start_status) && monotonic_ms() < deadline) {
    std::vector<pollfd> fds;
    std::vector<std::pair<base::UniqueFd*, std::string*>> sinks = {
        {&c.stdout_read, &ran.out}, {&c.stderr_read, &ran.err}, {&c.start_status, &status}};
    for (auto& [fd, _] : sinks)
      if (*fd) fds.push_back({fd->get(), POLLIN, 0});
    if (c.stdin_write) fds.push_back({c.stdin_write.get(), POLLOUT, 0});
    ::poll(fds.data(), fds.size(), 1000);
    for (auto& [fd, sink] : sinks) {
      if (!*fd) continue;
      char buf[4096];
      ssize_t n = ::read(fd->get(), buf, sizeof buf);
      if (n > 0) sink->append(buf, static_cast<std::size_t>(n));
      if (n == 0) fd->reset();
    }
    if (c.stdin_write) {
      ssize_t n = ::write(c.stdin_write.get(), input.data() + fed, input.size() - fed);
      if (n > 0) fed += static_cast<std::size_t>(n);
      if (fed == input.size()) c.stdin_write.reset();
    }
  }
  if (!status.empty())
    ran.failed =
        decode_start_status(std::span(reinterpret_cast<const std::uint8_t*>(status.data()), status.size()));
  ::waitpid(c.pid, &ran.status, 0);
  return ran;
}

std::map<std::string, std::string> fields(const std::string& out) {
  std::map<std::string, std::string> f;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto at = line.find_first_of(":=");
    if (at == std::string::npos) continue;
    auto value = line.substr(at + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    f.emplace(line.substr(0, at), value);
  }
  return f;
}

#define REQUIRE_ROOT() ABOX_NEEDS_ROOT("changing uid needs root")

const std::vector<EnvEntry> kEnv = {{"PATH", "/usr/bin:/bin"}, {"ABOX_TEST", "a b=c"}};

TEST(CommandLauncher, RunsAsTheUserWithoutAnyPrivilege) {
  REQUIRE_ROOT();
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "echo ids=$(id -u) $(id -g) [$(id -G)]; "
               "grep -E '^(Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/$$/status; "
               "echo stat=$$ $(cut -d' ' -f5,6 /proc/$$/stat); echo pwd=$(pwd); "
               "tr '\\0' '\\n' </proc/$$/environ | sed 's/^/env=/'"};
  spec.env = kEnv;
  spec.workdir = "/tmp";
  spec.uid = 1000;
  spec.gid = 1000;
  Ran ran = run(spec);

  ASSERT_FALSE(ran.failed) << start_failure_text(*ran.failed, spec);
  ASSERT_TRUE(WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 0) << ran.status << ran.out;
  auto f = fields(ran.out);
  EXPECT_EQ(f["ids"], "1000 1000 [1000]") << ran.out;
  EXPECT_EQ(f["Groups"], "");
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    EXPECT_EQ(f[cap], "0000000000000000") << cap;
  EXPECT_EQ(f["NoNewPrivs"], "1");
  std::istringstream stat(f["stat"]);
  std::string pid, pgrp, sid;
  stat >> pid >> pgrp >> sid;
  EXPECT_TRUE(pid == pgrp && pgrp == sid) << "pid/pgrp/sid " << f["stat"];
  EXPECT_EQ(f["pwd"], "/tmp");
  std::vector<std::string> env;
  std::istringstream in(ran.out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("env=", 0) == 0) env.push_back(line.substr(4));
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/usr/bin:/bin", "ABOX_TEST=a b=c"}));
}

TEST(CommandLauncher, SignalsAreUnblockedAndDefault) {
  REQUIRE_ROOT();
  CommandSpec spec;
  // grep's own status (no shell between: a waiting shell blocks signals itself).
  spec.argv = {"/bin/grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  spec.workdir = "/";
  // What box-guest itself has, which the command must not inherit.
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
  sigaddset(&block, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  Ran ran = run(spec);
  ::signal(SIGPIPE, old_pipe);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  auto f = fields(ran.out);
  EXPECT_EQ(f["SigBlk"], "0000000000000000") << ran.out;
  EXPECT_EQ(f["SigIgn"], "0000000000000000") << ran.out;
}

TEST(CommandLauncher, OnlyStdinStdoutAndStderrReachTheCommand) {
  REQUIRE_ROOT();
  CommandSpec spec;
  spec.argv = {"/bin/ls", "/proc/self/fd"};  // ls's own fds: 0-2, and 3, the folder it lists
  spec.workdir = "/";
  int leaked = ::dup(1);  // an fd of box-guest's without close-on-exec
  ASSERT_GE(leaked, 3);
  Ran ran = run(spec);
  ::close(leaked);
  EXPECT_EQ(ran.out, "0\n1\n2\n3\n");
}

TEST(CommandLauncher, StdoutAndStderrApartAndTheExitStatus) {
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo out; echo err >&2; exit 7"};
  spec.workdir = "/";
  spec.uid = ::geteuid();
  spec.gid = ::getegid();
  ABOX_NEEDS_ROOT("setgroups needs root");
  Ran ran = run(spec);
  EXPECT_EQ(ran.out, "out\n");
  EXPECT_EQ(ran.err, "err\n");
  EXPECT_TRUE(WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 7);
}

TEST(CommandLauncher, StdinIsDevNullOrThePipe) {
  REQUIRE_ROOT();
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "readlink /proc/$$/fd/0 | sed 's/:.*//'; cat"};
  spec.env = kEnv;
  spec.workdir = "/";
  Ran closed = run(spec);
  EXPECT_EQ(closed.out, "/dev/null\n");
  spec.stdin_open = true;
  Ran open = run(spec, "hello\n");
  EXPECT_EQ(open.out, "pipe\nhello\n");
}

class LauncherFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    ABOX_NEEDS_ROOT("changing uid needs root");
    ::chmod(dir_.path().c_str(), 0755);  // the user must reach what is inside
    ::mkdir((dir_.path() + "/empty").c_str(), 0755);
    ::mkdir((dir_.path() + "/bin").c_str(), 0755);
    ::mkdir((dir_.path() + "/closed").c_str(), 0700);
    std::ofstream(dir_.path() + "/bin/hello") << "#!/bin/sh\necho hello from bin\n";
    ::chmod((dir_.path() + "/bin/hello").c_str(), 0755);
    std::ofstream(dir_.path() + "/bin/plain") << "#!/bin/sh\necho never\n";
    ::chmod((dir_.path() + "/bin/plain").c_str(), 0644);
    spec_.workdir = "/";
    spec_.env = {{"PATH", dir_.path() + "/empty::" + dir_.path() + "/bin"}};
  }
  abox::testing::TempDir dir_{"launcher"};
  CommandSpec spec_;
};

TEST_F(LauncherFailures, PathIsSearchedInOrderSkippingEmptyEntries) {
  spec_.argv = {"hello"};
  Ran ran = run(spec_);
  ASSERT_FALSE(ran.failed);
  EXPECT_EQ(ran.out, "hello from bin\n");
}

TEST_F(LauncherFailures, NotFound) {
  spec_.argv = {"no-such-program"};
  Ran ran = run(spec_);
  ASSERT_TRUE(ran.failed);
  EXPECT_EQ(ran.failed->reason, StartFailure::kNotFound);
  EXPECT_EQ(ran.failed->error, ENOENT);
  EXPECT_TRUE(WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 127);
  spec_.argv = {dir_.path() + "/bin/missing"};
  EXPECT_EQ(run(spec_).failed->reason, StartFailure::kNotFound);
}

TEST_F(LauncherFailures, NotExecutable) {
  spec_.argv = {"plain"};
  Ran ran = run(spec_);
  ASSERT_TRUE(ran.failed);
  EXPECT_EQ(ran.failed->reason, StartFailure::kNotExecutable);
  EXPECT_EQ(ran.failed->error, EACCES);
  EXPECT_NE(start_failure_text(*ran.failed, spec_).find("not executable: plain"), std::string::npos);
}

TEST_F(LauncherFailures, WorkdirTheUserCannotEnter) {
  spec_.argv = {"hello"};
  spec_.workdir = dir_.path() + "/closed";  // 0700 root: root could, uid 1000 cannot
  Ran ran = run(spec_);
  ASSERT_TRUE(ran.failed);
  EXPECT_EQ(ran.failed->reason, StartFailure::kWorkdir);
  EXPECT_EQ(ran.failed->error, EACCES);
  spec_.workdir = dir_.path() + "/nowhere";
  EXPECT_EQ(run(spec_).failed->reason, StartFailure::kWorkdir);
}

TEST(CommandLauncher, StartStatusDecoding) {
  const std::uint8_t ok[] = {2, 0, 0, 0, 13};
  auto f = decode_start_status(ok);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, StartFailure::kNotExecutable);
  EXPECT_EQ(f->error, 13);
  const std::uint8_t bad_reason[] = {9, 0, 0, 0, 1}, short_one[] = {1, 0, 0};
  const std::uint8_t long_one[] = {1, 0, 0, 0, 2, 0};
  EXPECT_FALSE(decode_start_status(bad_reason));
  EXPECT_FALSE(decode_start_status(short_one));
  EXPECT_FALSE(decode_start_status(long_one));
}

}  // namespace
}  // namespace abox::guest
