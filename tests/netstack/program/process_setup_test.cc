// EventsSink (netstack/program/process_setup.h): only events that share stdout with
// the ready line are held until release(); a file gets each line as it is
// emitted, so whoever waits for "ready" finds the start event already in
// it (e2e.ops reads the file then), and a sink that goes writes what it held.
#include "netstack/program/process_setup.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(EventsSink, AFileGetsEachLineAsItIsEmitted) {
  testing::TempDir dir("abox-events-sink");
  const std::string path = dir.file("events.jsonl");
  auto sink = open_events("test", path);
  ASSERT_TRUE(sink);
  EXPECT_FALSE(sink->on_stdout());
  base::EventLog log = sink->log("i");
  log.emit("host_address", {{"count", std::uint64_t{1}}});
  log.emit("start", {{"mode", "run"}});
  // Before release(): both lines are there, in order.
  const std::string text = read_all(path);
  const auto host = text.find("\"kind\":\"host_address\"");
  const auto start = text.find("\"kind\":\"start\"");
  ASSERT_NE(host, std::string::npos) << text;
  ASSERT_NE(start, std::string::npos) << text;
  EXPECT_LT(host, start);
  sink->release();
  EXPECT_EQ(read_all(path), text);  // nothing written twice
}

TEST(EventsSink, OnlyStdoutIsHeldForTheReadyLine) {
  auto to_stdout = open_events("test", "-");
  ASSERT_TRUE(to_stdout);
  EXPECT_TRUE(to_stdout->on_stdout());
  auto to_stderr = open_events("test", "");
  ASSERT_TRUE(to_stderr);
  EXPECT_FALSE(to_stderr->on_stdout());
}

}  // namespace
}  // namespace abox::netstack
