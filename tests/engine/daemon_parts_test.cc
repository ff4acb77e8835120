// Small parts of the daemon: base64 of the logs stream, the rotating
// output.log, the files of a state folder read back (bounded, typed), the
// runtime folder (made only by who may start a daemon), the version it
// reports.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/daemon/base64.h"
#include "engine/daemon/daemon_paths.h"
#include "engine/daemon/instance_files.h"
#include "engine/daemon/rotating_log.h"
#include "engine/process/child_process.h"
#include "engine/version.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(Base64, Rfc4648Vectors) {
  const char* cases[][2] = {{"", ""},
                            {"f", "Zg=="},
                            {"fo", "Zm8="},
                            {"foo", "Zm9v"},
                            {"foob", "Zm9vYg=="},
                            {"fooba", "Zm9vYmE="},
                            {"foobar", "Zm9vYmFy"}};
  for (auto& c : cases) {
    EXPECT_EQ(base64_encode(bytes(c[0])), c[1]);
    auto back = base64_decode(c[1]);
    ASSERT_TRUE(back);
    EXPECT_EQ(std::string(back->begin(), back->end()), c[0]);
  }
}

TEST(Base64, EveryByteRoundTrips) {
  std::vector<std::uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
  auto back = base64_decode(base64_encode(all));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, all);
}

TEST(Base64, RefusesWhatIsNotCanonical) {
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "Zh==", "Zm9=Yg==", "====", "Zm8=Zm8="})
    EXPECT_FALSE(base64_decode(bad)) << bad;
}

TEST(RotatingLog, KeepsTheNewestWithinTwiceTheBound) {
  abox::testing::TempDir tmp("rotating_log");
  std::string path = tmp.path() + "/output.log";
  RotatingLog log(path, 100);
  std::string all;
  for (int i = 0; i < 50; ++i) {
    std::string chunk = "line " + std::to_string(i) + "\n";
    all += chunk;
    log.write(bytes(chunk));
  }
  std::string older = slurp(path + ".1"), newer = slurp(path);
  EXPECT_EQ(older.size(), 100u);
  EXPECT_LE(newer.size(), 100u);
  EXPECT_GT(log.rotations(), 1u);
  // The two files are the last bytes written, in order, nothing lost between them.
  std::string kept = older + newer;
  EXPECT_EQ(all.substr(all.size() - kept.size()), kept);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(RotatingLog, OneChunkLargerThanTheBound) {
  abox::testing::TempDir tmp("rotating_log");
  std::string path = tmp.path() + "/output.log";
  RotatingLog log(path, 10);
  log.write(bytes("0123456789abcdefghijXYZ"));
  EXPECT_EQ(slurp(path + ".1"), "abcdefghij");
  EXPECT_EQ(slurp(path), "XYZ");
}

TEST(InstanceFiles, ConfigAndShimRoundTrip) {
  abox::testing::TempDir tmp("instance_files");
  DetachedConfig c{
      {"--name=a", "-p", "/p.toml", "--", "sh", "-c", "echo \"hi\"\n"}, "/work", "xterm", "C", 2};
  {
    std::ofstream(tmp.path() + "/config.json") << detached_config_json(c);
    std::ofstream(tmp.path() + "/shim.json") << shim_record_json({1234, 5678});
  }
  auto back = read_detached_config(tmp.path());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->args, c.args);
  EXPECT_EQ(back->cwd, "/work");
  EXPECT_EQ(back->boots, 2u);
  auto shim = read_shim_record(tmp.path());
  ASSERT_TRUE(shim.ok()) << shim.error();
  EXPECT_EQ(shim->pid, 1234);
  EXPECT_EQ(shim->start_ticks, 5678u);
}

TEST(InstanceFiles, BrokenFilesAreErrors) {
  abox::testing::TempDir tmp("instance_files");
  EXPECT_FALSE(read_shim_record(tmp.path()).ok());
  for (const char* text :
       {"", "[]", "{\"pid\":\"1\",\"start_ticks\":1}", "{\"pid\":1,\"start_ticks\":1}",
        "{\"pid\":-5,\"start_ticks\":1}", "{\"pid\":99999999,\"start_ticks\":1}", "{\"pid\":"}) {
    std::ofstream(tmp.path() + "/shim.json", std::ios::trunc) << text;
    EXPECT_FALSE(read_shim_record(tmp.path()).ok()) << text;
  }
  std::ofstream(tmp.path() + "/config.json") << "{\"args\":[1]}";
  EXPECT_FALSE(read_detached_config(tmp.path()).ok());
  std::ofstream(tmp.path() + "/big.json") << std::string(kMaxRecordBytes + 10, ' ');
  EXPECT_FALSE(read_json_object(tmp.path() + "/big.json").ok());
}

TEST(InstanceFiles, AZombieIsNotAlive) {
  // A child that ended and is not reaped yet keeps its pid and start time.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  std::uint64_t ticks = 0;
  for (int i = 0; i < 100 && ticks == 0; ++i) ticks = process_start_ticks(child);
  ASSERT_NE(ticks, 0u);
  // Until the child has ended (bounded: it exits at once).
  for (int i = 0; i < 200 && process_alive(child, ticks); ++i) ::usleep(10000);
  EXPECT_EQ(process_start_ticks(child), ticks);  // still there, as a zombie
  EXPECT_FALSE(process_alive(child, ticks));
  EXPECT_FALSE(open_shim_pidfd({child, ticks}));
  int status = 0;
  ::waitpid(child, &status, 0);
}

TEST(InstanceFiles, AShimIsNamedByPidAndStartTime) {
  ShimRecord me{::getpid(), 0};
  EXPECT_FALSE(open_shim_pidfd(me));  // start time 0 names nobody
  EXPECT_FALSE(process_alive(::getpid(), 1));
  EXPECT_TRUE(process_alive(::getpid(), process_start_ticks(::getpid())));
  EXPECT_GT(process_rss_kib(::getpid()), 0u);
}

// XDG_RUNTIME_DIR pointed at a temp folder for one test, restored after.
class RuntimeDirEnv {
 public:
  explicit RuntimeDirEnv(const std::string& dir) {
    if (const char* old = std::getenv("XDG_RUNTIME_DIR")) old_ = old;
    ::setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  }
  ~RuntimeDirEnv() {
    if (old_.empty()) {
      ::unsetenv("XDG_RUNTIME_DIR");
    } else {
      ::setenv("XDG_RUNTIME_DIR", old_.c_str(), 1);
    }
  }
  RuntimeDirEnv(const RuntimeDirEnv&) = delete;
  RuntimeDirEnv& operator=(const RuntimeDirEnv&) = delete;

 private:
  std::string old_;
};

TEST(DaemonPaths, OnlyAClientThatMayStartTheDaemonMakesItsFolder) {
  abox::testing::TempDir tmp("daemon_paths");
  RuntimeDirEnv env(tmp.path());
  const std::string dir = tmp.path() + "/abox";
  struct stat st {};
  // Asking whether a daemon runs: an error, and no folder made.
  auto existing = existing_daemon_paths();
  ASSERT_FALSE(existing.ok());
  EXPECT_NE(existing.error().find("No such file"), std::string::npos) << existing.error();
  EXPECT_NE(::lstat(dir.c_str(), &st), 0);
  // The daemon (or a client about to start it) makes it, 0700.
  auto made = daemon_paths();
  ASSERT_TRUE(made.ok()) << made.error();
  EXPECT_EQ(made->socket, dir + "/daemon.sock");
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Once it exists, both name the same paths.
  auto again = existing_daemon_paths();
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->socket, made->socket);
  // A folder others may enter is refused by both, and left as it is.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_FALSE(existing_daemon_paths().ok());
  EXPECT_FALSE(daemon_paths().ok());
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
}

TEST(Version, IsTheProjectsVersion) {
  // ABOX_PROJECT_VERSION: CMake's PROJECT_VERSION, given to this test alone.
  EXPECT_EQ(abox_version(), ABOX_PROJECT_VERSION);
}

}  // namespace
}  // namespace abox::engine
