// `abox credentials` in-process (engine/cli/credentials_command.h): the key
// from a pipe or a terminal (a pty), the store's rules, ls and rm.
#include "engine/cli/credentials_command.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

class CredentialsCommandTest : public ::testing::Test {
 protected:
  // The instances' folders and the daemon's socket folder are the test's own.
  void SetUp() override {
    ::setenv("XDG_STATE_HOME", (dir_.path() + "/state").c_str(), 1);
    ::setenv("XDG_RUNTIME_DIR", (dir_.path() + "/run").c_str(), 1);
    std::filesystem::create_directories(dir_.path() + "/run");
  }
  void TearDown() override {
    ::unsetenv("XDG_STATE_HOME");
    ::unsetenv("XDG_RUNTIME_DIR");
  }

  // Runs `abox credentials ARGS --store STORE` with `input` on a pipe as stdin.
  int run(std::vector<std::string> args, std::string_view input = "") {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    EXPECT_EQ(::write(p[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
    ::close(p[1]);
    const int rc = run_fd(std::move(args), p[0]);
    ::close(p[0]);
    return rc;
  }
  int run_fd(std::vector<std::string> args, int fd) {
    args.push_back("--store");
    args.push_back(store_);
    std::vector<std::string_view> views(args.begin(), args.end());
    out_.str("");
    err_.str("");
    return run_credentials_command(views, fd, out_, err_);
  }
  std::string store_text() {
    std::ifstream f(store_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void write_policy(const std::string& path, std::string_view credential) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "[[broker]]\nname = \"api.example.test\"\ncredential = \"" << credential
                        << "\"\nheader = \"x-api-key\"\nnonce_env = \"PROVIDER_API_KEY\"\n";
  }

  abox::testing::TempDir dir_{"abox-credcmd"};
  std::string store_ = dir_.path() + "/config/abox/credentials.toml";
  std::ostringstream out_, err_;
};

TEST_F(CredentialsCommandTest, SetFromAPipeMakesThePrivateStore) {
  ASSERT_EQ(run({"set", "provider"}, "sk-live-123\n"), 0) << err_.str();
  EXPECT_EQ(out_.str(), "stored provider in " + store_ + "\n");
  EXPECT_EQ(store_text(), "[credentials]\nprovider = \"sk-live-123\"\n");
  struct stat st {};
  ASSERT_EQ(::stat(store_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_.path() + "/config/abox").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // CRLF dropped too; a second set replaces.
  ASSERT_EQ(run({"set", "provider"}, "sk-live-456\r\n"), 0) << err_.str();
  EXPECT_EQ(out_.str(), "replaced provider in " + store_ + "\n");
  EXPECT_EQ(store_text(), "[credentials]\nprovider = \"sk-live-456\"\n");
}

TEST_F(CredentialsCommandTest, TheKeyIsNeverTakenFromArgv) {
  EXPECT_EQ(run({"set", "provider", "sk-live-123"}), 2);
  EXPECT_NE(err_.str().find("never from the command line"), std::string::npos) << err_.str();
  EXPECT_EQ(err_.str().find("sk-live-123"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(store_));
}

TEST_F(CredentialsCommandTest, BadKeysAndNamesStoreNothingAndAreNotEchoed) {
  EXPECT_EQ(run({"set", "provider"}, ""), 1);
  EXPECT_NE(err_.str().find("no key on stdin"), std::string::npos);
  EXPECT_EQ(run({"set", "provider"}, "two words\n"), 1);
  EXPECT_EQ(err_.str().find("two words"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"set", "provider"}, "line1\nline2\n"), 1);
  EXPECT_EQ(err_.str().find("line1"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"set", "provider"}, std::string(4097, 'k')), 1);
  EXPECT_NE(err_.str().find("not 1-4096"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"set", "provider"}, std::string(9000, 'k')), 1);
  EXPECT_NE(err_.str().find("longer than 4096"), std::string::npos) << err_.str();
  for (const std::string& name : std::vector<std::string>{"a/b", "a\"b", "a b", "", std::string(129, 'n')}) {
    EXPECT_EQ(run({"set", name}, "key\n"), 2) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(store_));
  EXPECT_EQ(run({"set", "ok"}, std::string(4096, 'k') + "\n"), 0) << err_.str();
}

// The command runs on a thread; the "user" types only once the terminal's
// echo is off (as a person does after the prompt), so what the terminal shows
// does not depend on when the pty's line discipline gets to the input.
TEST_F(CredentialsCommandTest, OnATerminalTheKeyIsNotEchoedAndCtrlCCancels) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  termios before{};
  ASSERT_EQ(::tcgetattr(slave, &before), 0);
  ASSERT_NE(before.c_lflag & ECHO, 0u);
  auto type_when_prompted = [&](std::string_view typed, std::string_view name) {
    int rc = -1;
    std::thread command([&] { rc = run_fd({"set", std::string(name)}, slave); });
    bool prompted = false;
    for (int i = 0; i < 500 && !prompted; ++i) {
      termios now{};
      prompted = ::tcgetattr(slave, &now) == 0 && (now.c_lflag & ECHO) == 0;
      if (!prompted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(prompted) << "echo never went off";
    EXPECT_EQ(::write(master, typed.data(), typed.size()), static_cast<ssize_t>(typed.size()));
    command.join();
    return rc;
  };
  ASSERT_EQ(type_when_prompted("sk-typed-77\n", "typed"), 0) << err_.str();
  EXPECT_NE(err_.str().find("Key for typed (not shown): "), std::string::npos);
  EXPECT_NE(store_text().find("typed = \"sk-typed-77\""), std::string::npos);
  // What the terminal showed: nothing of the key.
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  char shown[256];
  const ssize_t n = ::read(master, shown, sizeof(shown));
  EXPECT_TRUE(n <= 0 || std::string(shown, static_cast<std::size_t>(n)).find("sk-typed") == std::string::npos)
      << std::string(shown, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  termios after{};
  ASSERT_EQ(::tcgetattr(slave, &after), 0);
  EXPECT_EQ(after.c_lflag & (ECHO | ISIG), before.c_lflag & (ECHO | ISIG)) << "the echo is back";

  EXPECT_EQ(type_when_prompted("sk-half\x03\n", "cancelled"), 1);
  EXPECT_NE(err_.str().find("cancelled"), std::string::npos);
  EXPECT_EQ(store_text().find("cancelled"), std::string::npos);
  ASSERT_EQ(::tcgetattr(slave, &after), 0);
  EXPECT_EQ(after.c_lflag & (ECHO | ISIG), before.c_lflag & (ECHO | ISIG));
  ::close(master);
  ::close(slave);
}

TEST_F(CredentialsCommandTest, AStoreThatBreaksTheRulesIsRefusedAndLeftAlone) {
  ASSERT_EQ(run({"set", "provider"}, "sk-1\n"), 0);
  ASSERT_EQ(::chmod(store_.c_str(), 0640), 0);
  EXPECT_EQ(run({"set", "other"}, "sk-2\n"), 3);
  EXPECT_NE(err_.str().find("chmod 600"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"ls"}), 3);
  EXPECT_EQ(run({"rm", "provider"}), 3);
  EXPECT_EQ(store_text(), "[credentials]\nprovider = \"sk-1\"\n");
  struct stat st {};
  ASSERT_EQ(::stat(store_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "never fixed behind the operator's back";
}

TEST_F(CredentialsCommandTest, LsShowsNamesBindingsAndMissingNeverKeys) {
  ASSERT_EQ(run({"set", "provider"}, "sk-secret-1\n"), 0);
  ASSERT_EQ(run({"set", "unused"}, "sk-secret-2\n"), 0);
  const std::string dev = dir_.path() + "/state/abox/instances/dev";
  write_policy(dev + "/policy.toml", "provider");
  std::ofstream(dev + "/instance.json") << R"({"name":"dev","state":"stopped"})";
  // A folder without a policy (a run that failed before copying it) binds nothing.
  std::filesystem::create_directories(dir_.path() + "/state/abox/instances/empty");
  const std::string policy = dir_.path() + "/p.toml";
  write_policy(policy, "github");
  const std::string broken = dir_.path() + "/broken.toml";
  std::ofstream(broken) << "[[broker]\n";

  ASSERT_EQ(run({"ls", "--policy", policy, "--policy", broken}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "NAME      STATUS   BOUND BY\n"
            "github    MISSING  policy " +
                policy +
                " (api.example.test:443)\n"
                "provider  stored   instance dev [stopped] (api.example.test:443)\n"
                "unused    stored   -\n");
  EXPECT_NE(err_.str().find("skipped " + broken), std::string::npos) << err_.str();

  ASSERT_EQ(run({"ls", "--json"}), 0);
  EXPECT_EQ(out_.str(),
            "{\"store\":\"" + store_ +
                "\",\"credentials\":[{\"name\":\"provider\",\"stored\":true,\"bindings\":[{\"source\":"
                "\"instance\",\"policy\":\"" +
                dev +
                "/policy.toml\",\"instance\":\"dev\",\"state\":\"stopped\",\"binding\":\"api."
                "example.test:443\"}]},{\"name\":\"unused\",\"stored\":true,\"bindings\":[]}],"
                "\"states\":\"records\",\"skipped\":[]}\n");
  EXPECT_EQ(out_.str().find("sk-secret"), std::string::npos);
}

// With a daemon answering on the socket, the states are its answer to
// `ls` (all), not the records: a daemon knows a shim that died.
TEST_F(CredentialsCommandTest, LsTakesTheStatesFromTheDaemonWhenOneAnswers) {
  ASSERT_EQ(run({"set", "provider"}, "sk-secret-1\n"), 0);
  const std::string dev = dir_.path() + "/state/abox/instances/dev";
  write_policy(dev + "/policy.toml", "provider");
  std::ofstream(dev + "/instance.json") << R"({"name":"dev","state":"running"})";
  const std::string run_dir = dir_.path() + "/run/abox";
  ASSERT_EQ(::mkdir(run_dir.c_str(), 0700), 0);
  base::UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = run_dir + "/daemon.sock";
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  std::string asked;
  std::thread daemon([&] {
    base::UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[512];
    const ssize_t n = ::read(c.get(), buf, sizeof buf);
    if (n > 0) asked.assign(buf, static_cast<std::size_t>(n));
    const std::string answer =
        R"({"id":1,"ok":true,"instances":[{"name":"dev","state":"failed","managed":true}]})"
        "\n";
    (void)!::write(c.get(), answer.data(), answer.size());
  });
  const int rc = run({"ls", "--json"});
  daemon.join();
  ASSERT_EQ(rc, 0) << err_.str();
  EXPECT_NE(asked.find("\"op\":\"ls\""), std::string::npos) << asked;
  EXPECT_NE(asked.find("\"all\":true"), std::string::npos) << asked;
  EXPECT_NE(out_.str().find("\"instance\":\"dev\",\"state\":\"failed\""), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("\"states\":\"daemon\""), std::string::npos) << out_.str();
}

TEST_F(CredentialsCommandTest, LsOfNoStoreIsEmpty) {
  ASSERT_EQ(run({"ls"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "no credentials in " + store_ + "\n");
  EXPECT_FALSE(std::filesystem::exists(store_));
}

TEST_F(CredentialsCommandTest, RmIsAllOrNone) {
  ASSERT_EQ(run({"set", "a"}, "k1\n"), 0);
  ASSERT_EQ(run({"set", "b"}, "k2\n"), 0);
  EXPECT_EQ(run({"rm", "a", "nope"}), 1);
  EXPECT_NE(err_.str().find("no credential 'nope'"), std::string::npos);
  EXPECT_EQ(store_text(), "[credentials]\na = \"k1\"\nb = \"k2\"\n");
  EXPECT_EQ(run({"rm", "a", "b"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "removed a\nremoved b\n");
  EXPECT_EQ(store_text(), "[credentials]\n");
}

TEST_F(CredentialsCommandTest, UsageErrors) {
  EXPECT_EQ(run({"frob"}), 2);
  EXPECT_EQ(run({"set"}), 2);
  EXPECT_EQ(run({"rm"}), 2);
  EXPECT_EQ(run({"ls", "extra"}), 2);
  EXPECT_EQ(run({"set", "a", "--json"}, "k\n"), 2);
  EXPECT_EQ(run({"ls", "--help"}), 0);
  EXPECT_NE(out_.str().find("usage: abox credentials set NAME"), std::string::npos);
}

TEST(CredentialsPath, Default) {
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  ::setenv("HOME", "/home/op", 1);
  ::unsetenv("XDG_CONFIG_HOME");
  ::unsetenv("ABOX_CREDENTIALS");
  EXPECT_EQ(*default_credentials_path(), "/home/op/.config/abox/credentials.toml");
  ::setenv("XDG_CONFIG_HOME", "/cfg", 1);
  EXPECT_EQ(*default_credentials_path(), "/cfg/abox/credentials.toml");
  ::setenv("ABOX_CREDENTIALS", "/x/c.toml", 1);
  EXPECT_EQ(*default_credentials_path(), "/x/c.toml");
  ::unsetenv("ABOX_CREDENTIALS");
  ::unsetenv("XDG_CONFIG_HOME");
  ::setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace abox::engine
