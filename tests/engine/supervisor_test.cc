// The instance supervisor with a real abox-net and a fake VMM that plays the
// guest, honest or hostile (tests/engine/fake_guest.py): the outcome and its
// reason, the events, the state folder, nothing left running, and the host's
// memory flat while the guest floods the control channel.
#include "engine/instance/supervisor.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <iostream>
#include <optional>

#include "engine/process/pipe_reader.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

// The VMM is a script: it connects to both sockets like QEMU would and speaks
// for the guest.
class FakeVmm final : public Vmm {
 public:
  explicit FakeVmm(std::string mode) : mode_(std::move(mode)) {}
  std::string_view name() const override { return "fake-vmm"; }
  base::Result<ChildSpec, std::string> command(const VmSpec& spec) const override {
    ChildSpec c;
    c.program = "/usr/bin/python3";
    c.argv = {c.program, std::string(ABOX_SOURCE_DIR) + "/tests/engine/fake_guest.py", spec.control_socket,
              spec.net_socket, mode_};
    c.env = {"PATH=/usr/bin:/bin"};
    c.fds = {{0, spec.stdin_fd}, {1, spec.console_fd}, {2, spec.stderr_fd}};
    return c;
  }

 private:
  std::string mode_;
};

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

struct RunResult {
  InstanceOutcome outcome;
  std::string stdout_text;
  std::string events;
  bool finished = false;
};

class SupervisorTest : public ::testing::Test {
 protected:
  // read_stdout=false leaves the command's stdout pipe undrained until the
  // instance is stopping: the host can write no more than the pipe takes,
  // so it grants no credit back beyond that.
  RunResult run(const std::string& mode, bool keep = true, bool read_stdout = true) {
    std::string policy = dir_.path() + "/policy.toml";
    std::ofstream(policy) << "version = 1\n[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = "
                             "[\"allowed.test\"]\nports = [443]\n";
    InstanceConfig c;
    c.name = "t" + std::to_string(++n_);
    c.instances_root = dir_.path() + "/instances";
    c.policy_file = policy;
    c.image_name = "fake";
    c.kernel = "/nonexistent/vmlinux";  // the fake VMM boots nothing
    c.initramfs = "/nonexistent/initramfs";
    c.argv = {"echo", "hi"};
    c.selftest_targets.denied_name = "denied.test";
    c.boot_timeout = std::chrono::seconds(30);
    c.stop_grace = std::chrono::seconds(2);
    c.keep = keep;
    c.abox_net = ABOX_NET_PATH;
    c.abox = "/bin/false";
    c.qemu = "/usr/bin/python3";

    auto out = make_pipe();
    auto null = open_dev_null();
    FakeVmm vmm(mode);
    boost::asio::io_context io;
    RunResult r;
    InstanceSupervisor s(io, c, vmm, null.get(), out.write.get(), null.get(), -1,
                         [&](const InstanceOutcome& o) {
                           r.outcome = o;
                           r.finished = true;
                           io.stop();
                         });
    std::optional<PipeReader> reader;
    if (read_stdout) {
      reader.emplace(
          io, std::move(out.read),
          [&](std::span<const std::uint8_t> b) { r.stdout_text.append(b.begin(), b.end()); }, nullptr);
    }
    s.start();
    if (!read_stdout) {
      // Until the instance is on its way down (the guest was caught); then
      // stdout is drained, as everything written must be before it ends.
      for (int i = 0; i < 600 && !r.finished; ++i) {
        io.run_for(std::chrono::milliseconds(100));
        if (s.state() == InstanceState::kStopping || s.state() == InstanceState::kStopped ||
            s.state() == InstanceState::kFailed)
          break;
      }
      reader.emplace(
          io, std::move(out.read),
          [&](std::span<const std::uint8_t> b) { r.stdout_text.append(b.begin(), b.end()); }, nullptr);
    }
    io.run_for(std::chrono::seconds(60));
    folder_ = dir_.path() + "/instances/" + c.name;
    std::ifstream ev(folder_ + "/events.jsonl");
    r.events.assign(std::istreambuf_iterator<char>(ev), std::istreambuf_iterator<char>());
    std::ifstream vmm_log(folder_ + "/vmm.log");
    std::string log((std::istreambuf_iterator<char>(vmm_log)), std::istreambuf_iterator<char>());
    if (!log.empty()) std::cerr << "the fake VMM said: " << log << '\n';
    return r;
  }

  abox::testing::TempDir dir_{"supervisor"};
  std::string folder_;
  int n_ = 0;
};

TEST_F(SupervisorTest, AnHonestGuestRunsTheCommandInOrder) {
  auto r = run("honest");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kExited) << r.outcome.reason;
  ASSERT_TRUE(r.outcome.exit);
  EXPECT_EQ(r.outcome.exit->value, 3u);
  EXPECT_EQ(r.stdout_text, "hello from the fake guest\n");
  // Deny first: abox-net ready, then the VMM, then the self-test, then go.
  auto at = [&](std::string_view s) { return r.events.find(s); };
  EXPECT_LT(at("\"state\":\"starting_network\""), at("\"state\":\"starting_vmm\""));
  EXPECT_LT(at("\"state\":\"starting_vmm\""), at("\"kind\":\"selftest\""));
  EXPECT_LT(at("\"kind\":\"selftest\""), at("\"state\":\"running\""));
  EXPECT_LT(at("\"state\":\"running\""), at("\"kind\":\"command_started\""));
  EXPECT_NE(at("\"kind\":\"command_exited\""), std::string::npos);
  std::ifstream record(folder_ + "/instance.json");
  std::string json((std::istreambuf_iterator<char>(record)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"state\":\"stopped\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"abox-net\":{\"pid\":"), std::string::npos) << json;
}

TEST_F(SupervisorTest, AForgedFrameIsLoggedAndIgnored) {
  auto r = run("forge");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kExited) << r.outcome.reason;
  ASSERT_TRUE(r.outcome.exit);
  EXPECT_EQ(r.outcome.exit->value, 3u);  // not the forged 0
  EXPECT_EQ(r.outcome.forged_frames, 1u);
  EXPECT_NE(r.events.find("\"kind\":\"control_forged_frame\""), std::string::npos);
}

TEST_F(SupervisorTest, ALyingLengthEndsTheSessionAndTheHostDoesNotGrow) {
  long before = rss_kib();
  auto r = run("oversize");
  long after = rss_kib();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCouldNotStart);
  EXPECT_NE(r.outcome.reason.find("frame_length_too_large"), std::string::npos) << r.outcome.reason;
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
}

TEST_F(SupervisorTest, GarbageInsteadOfHelloEndsTheSessionAndTheHostDoesNotGrow) {
  long before = rss_kib();
  auto r = run("garbage");
  long after = rss_kib();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCouldNotStart);
  EXPECT_NE(r.outcome.reason.find("control channel"), std::string::npos) << r.outcome.reason;
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " to " << after << " KiB";
}

TEST_F(SupervisorTest, OutputPastTheCreditIsACrash) {
  // stdout is not drained: a reader as fast as the guest would earn it
  // credit back as quickly as it sends (the test once raced on that under
  // load), so the guest's 1 MiB could be within what was granted.
  auto r = run("overflow", /*keep=*/true, /*read_stdout=*/false);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kCrashed);
  EXPECT_NE(r.outcome.reason.find("bytes of credit"), std::string::npos) << r.outcome.reason;
  // No more than the pipe took reached stdout; never the 1 MiB pushed.
  EXPECT_LT(r.stdout_text.size(), 1024u * 1024);
}

TEST_F(SupervisorTest, AFailedProbeKeepsTheCommandFromStarting) {
  auto r = run("selffail");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.outcome.kind, InstanceOutcome::Kind::kSelftestFailed);
  EXPECT_NE(r.outcome.reason.find("direct_address"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.events.find("\"kind\":\"command_started\""), std::string::npos);
  EXPECT_EQ(r.events.find("\"state\":\"running\""), std::string::npos);
  EXPECT_TRUE(r.stdout_text.empty());
}

TEST_F(SupervisorTest, AStateFolderIsRemovedUnlessKept) {
  auto r = run("honest", /*keep=*/false);
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.outcome.kept);
  EXPECT_NE(::access(folder_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace abox::engine
