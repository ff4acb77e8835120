// Who writes instance.json while `abox policy apply` runs beside an instance
// (engine/cli/instance_record_writer.h): never apply while the record says a
// supervisor is there. Apply against an instance on its way up whose
// api.sock is not open yet waits for it and asks it (a stand-in supervisor
// here: a thread that opens api.sock late and answers ABOX-POLICY/1), and
// leaves instance.json to it; a record that says stopped or failed is
// written by apply; a supervisor that never opens api.sock (or left a dead
// socket file) is an error after the bound, with nothing changed.
#include "engine/cli/instance_record_writer.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "engine/cli/policy_apply.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kOld = "[[allow]]\nnames = [\"a.example.test\"]\nports = [443]\n";
constexpr std::string_view kNew = "[[allow]]\nnames = [\"c.example.test\"]\nports = [443]\n";

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A unix listener on `path` (the socket file stays when it closes).
base::UniqueFd listen_on(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd.get(), 4) != 0) {
    ADD_FAILURE() << "listen on " << path << ": " << std::strerror(errno);
    return {};
  }
  return fd;
}

// A supervisor's api.sock as apply meets it: opened `after` a while (as
// the supervisor does once its VMM has connected); one request taken within
// 5 s, answered "OK\n", its line put in `request` (read it once the object
// is gone: the destructor joins the thread).
class LateSupervisor {
 public:
  LateSupervisor(std::string path, std::chrono::milliseconds after, std::string& request)
      : thread_([path = std::move(path), after, &request] { serve(path, after, request); }) {}
  ~LateSupervisor() { thread_.join(); }
  LateSupervisor(const LateSupervisor&) = delete;
  LateSupervisor& operator=(const LateSupervisor&) = delete;

 private:
  static void serve(const std::string& path, std::chrono::milliseconds after, std::string& request) {
    std::this_thread::sleep_for(after);
    base::UniqueFd listener = listen_on(path);
    if (!listener) return;
    // A connection closed without a line (apply's look at whether api.sock
    // is open) is skipped, as the supervisor's reader skips it.
    for (int i = 0; i < 8; ++i) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) return;
      base::UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      std::string line;
      char ch = 0;
      bool whole = false;
      while (line.size() < 4096 && ::read(c.get(), &ch, 1) == 1) {
        if (ch == '\n') {
          whole = true;
          break;
        }
        line.push_back(ch);
      }
      if (!whole) continue;
      request = line;
      (void)::send(c.get(), "OK\n", 3, MSG_NOSIGNAL);
      return;
    }
  }

  std::thread thread_;
};

class InstanceRecordWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("XDG_STATE_HOME", (dir_.path() + "/state").c_str(), 1);
    auto root = default_instances_root();
    ASSERT_TRUE(root.ok());
    auto folder = StateFolder::create(*root, "box1");
    ASSERT_TRUE(folder.ok()) << folder.error();
    folder_.emplace(std::move(folder).value());
    ASSERT_TRUE(folder_->write_file("policy.toml", kOld).ok());
  }
  void TearDown() override { ::unsetenv("XDG_STATE_HOME"); }

  void record(std::string_view state) {
    ASSERT_TRUE(folder_
                    ->write_file("instance.json", "{\"name\":\"box1\",\"state\":\"" + std::string(state) +
                                                      "\",\"policy\":\"/old.toml\"}\n")
                    .ok());
  }
  std::string recorded_policy() const {
    const auto v = boost::json::parse(read(folder_->instance_json()));
    return std::string(v.as_object().at("policy").as_string());
  }
  std::string file(std::string_view name, std::string_view text) {
    std::string p = dir_.path() + "/" + std::string(name);
    std::ofstream(p) << text;
    return p;
  }
  int apply(const std::string& policy_file) {
    std::vector<std::string_view> args = {"box1", policy_file};
    return run_policy_apply(args, out_, err_);
  }

  abox::testing::TempDir dir_{"abox-rw"};
  std::optional<StateFolder> folder_;
  std::ostringstream out_, err_;
};

// The race: the supervisor is up (its record says booting) but api.sock is
// not open yet. Apply once rewrote instance.json itself, beside the
// supervisor, which then wrote its own record over it (or the other way
// round). Now it waits, asks the supervisor, and writes nothing there.
TEST_F(InstanceRecordWriterTest, ApplyWaitsForALateApiSockAndLeavesTheRecordToTheSupervisor) {
  record("booting");
  const std::string before = read(folder_->instance_json());
  const std::string f = file("new.toml", kNew);
  std::string request;
  int code = -1;
  {
    LateSupervisor supervisor(folder_->file("api.sock"), 400ms, request);
    code = apply(f);
  }
  EXPECT_EQ(code, 0) << err_.str();
  EXPECT_EQ(request, "ABOX-POLICY/1 " + f) << "the supervisor was not asked";
  EXPECT_EQ(read(folder_->instance_json()), before) << "apply wrote instance.json beside its supervisor";
  EXPECT_EQ(read(folder_->policy()), kNew);
}

// A record that says stopped or failed has no writer left: apply writes it.
TEST_F(InstanceRecordWriterTest, AStoppedOrFailedRecordIsWrittenHere) {
  for (const char* state : {"stopped", "failed"}) {
    record(state);
    auto w = wait_for_record_writer(*folder_, 0ms);
    ASSERT_TRUE(w.ok()) << w.error();
    EXPECT_EQ(*w, RecordWriter::kThisCommand) << state;
    ASSERT_TRUE(record_policy_source(*folder_, "/new.toml", 1s).ok()) << state;
    EXPECT_EQ(recorded_policy(), "/new.toml") << state;
    EXPECT_EQ(recorded_state(*folder_), state) << "the rest of the record is kept";
  }
}

// A folder without instance.json (nothing names a policy) is left so.
TEST_F(InstanceRecordWriterTest, NoRecordIsNothingToWrite) {
  auto w = wait_for_record_writer(*folder_, 0ms);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, RecordWriter::kNoRecord);
  EXPECT_TRUE(record_policy_source(*folder_, "/new.toml", 1s).ok());
  EXPECT_FALSE(std::filesystem::exists(folder_->instance_json()));
}

// A supervisor that never opens api.sock, or one whose socket file is left
// with nobody listening: an error after the bound that says why, and
// nothing written.
TEST_F(InstanceRecordWriterTest, ASupervisorWithoutApiSockIsAnErrorAfterTheBound) {
  record("starting_network");
  const std::string before = read(folder_->instance_json());
  const auto started = std::chrono::steady_clock::now();
  auto w = wait_for_record_writer(*folder_, 300ms);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().find("instance.json says starting_network"), std::string::npos) << w.error();
  EXPECT_NE(w.error().find("no api.sock open"), std::string::npos) << w.error();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 3s);

  record("running");
  { base::UniqueFd closed = listen_on(folder_->file("api.sock")); }  // the file stays, nobody listens
  auto r = record_policy_source(*folder_, "/new.toml", 300ms);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no api.sock open"), std::string::npos) << r.error();
  EXPECT_EQ(recorded_policy(), "/old.toml");
  EXPECT_NE(read(folder_->instance_json()), before);  // the "running" record, untouched since
}

}  // namespace
}  // namespace abox::engine
