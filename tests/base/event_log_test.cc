#include "base/event_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace abox::base {
namespace {

using namespace std::chrono;
using namespace std::string_literals;

system_clock::time_point at_millis(std::int64_t ms) {
  return system_clock::time_point(milliseconds(ms));
}

// 2026-11-29T09:13:28.123Z
constexpr std::int64_t kFixedMillis = 1795943608123;

EventLog::Clock fixed_clock(std::int64_t ms = kFixedMillis) {
  return [ms] { return at_millis(ms); };
}

// A log whose sink keeps every line, and answers with `accept`.
struct CapturedLog {
  std::vector<std::string> lines;
  bool accept = true;
  EventLog log;

  explicit CapturedLog(EventLog::Clock clock = fixed_clock(), std::string instance = "dev")
      : log(
            std::move(instance),
            [this](std::string_view line) {
              lines.emplace_back(line);
              return accept;
            },
            std::move(clock)) {}
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe make_pipe() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Ignores SIGPIPE for one test and restores the old disposition after it.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() : old_(std::signal(SIGPIPE, SIG_IGN)) {}
  ~IgnoreSigpipe() { std::signal(SIGPIPE, old_); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  void (*old_)(int);
};

// --- format_utc_millis

TEST(FormatUtcMillisTest, Epoch) {
  EXPECT_EQ(format_utc_millis(at_millis(0)), "1970-01-01T00:00:00.000Z");
}

TEST(FormatUtcMillisTest, KnownInstant) {
  EXPECT_EQ(format_utc_millis(at_millis(kFixedMillis)), "2026-11-29T09:13:28.123Z");
  EXPECT_EQ(format_utc_millis(at_millis(1)), "1970-01-01T00:00:00.001Z");
  EXPECT_EQ(format_utc_millis(at_millis(999)), "1970-01-01T00:00:00.999Z");
  EXPECT_EQ(format_utc_millis(at_millis(1000)), "1970-01-01T00:00:01.000Z");
}

TEST(FormatUtcMillisTest, LeapYears) {
  // 2024 is a leap year (divisible by 4); the last millisecond of Feb 29.
  EXPECT_EQ(format_utc_millis(at_millis(1709251199999)), "2024-02-29T23:59:59.999Z");
  EXPECT_EQ(format_utc_millis(at_millis(1709251200000)), "2024-03-01T00:00:00.000Z");
  // 2000 is a leap year (divisible by 400).
  EXPECT_EQ(format_utc_millis(at_millis(951782400000)), "2000-02-29T00:00:00.000Z");
  // 1900 is not (divisible by 100): Feb 28 is followed by Mar 1.
  EXPECT_EQ(format_utc_millis(at_millis(-2203891201000 + 1000)), "1900-03-01T00:00:00.000Z");
  // The same instants through the calendar types, as a cross-check.
  EXPECT_EQ(format_utc_millis(sys_days{2024y / February / 29} + 12h + 34min + 56s + 789ms),
            "2024-02-29T12:34:56.789Z");
  EXPECT_EQ(format_utc_millis(sys_days{2023y / March / 1} - 1ms), "2023-02-28T23:59:59.999Z");
}

TEST(FormatUtcMillisTest, Before1970) {
  EXPECT_EQ(format_utc_millis(at_millis(-1)), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(format_utc_millis(at_millis(-999)), "1969-12-31T23:59:59.001Z");
  EXPECT_EQ(format_utc_millis(at_millis(-1000)), "1969-12-31T23:59:59.000Z");
  EXPECT_EQ(format_utc_millis(at_millis(-1001)), "1969-12-31T23:59:58.999Z");
  EXPECT_EQ(format_utc_millis(at_millis(-14182940000 + 250)), "1969-07-20T20:17:40.250Z");
  EXPECT_EQ(format_utc_millis(at_millis(-2203891201000 + 5)), "1900-02-28T23:59:59.005Z");
}

// The clock is finer than milliseconds: the fraction is cut down to the
// millisecond below, on both sides of 1970.
TEST(FormatUtcMillisTest, SubMillisecondRoundsDown) {
  using Tp = system_clock::time_point;
  EXPECT_EQ(format_utc_millis(Tp(duration_cast<system_clock::duration>(microseconds(1999)))),
            "1970-01-01T00:00:00.001Z");
  EXPECT_EQ(format_utc_millis(Tp(duration_cast<system_clock::duration>(microseconds(-1)))),
            "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(format_utc_millis(Tp(duration_cast<system_clock::duration>(microseconds(-1500)))),
            "1969-12-31T23:59:59.998Z");
}

TEST(FormatUtcMillisTest, Past2038) {
  EXPECT_EQ(format_utc_millis(at_millis(2147483648000)), "2038-01-19T03:14:08.000Z");
  // 2100 is not a leap year either.
  EXPECT_EQ(format_utc_millis(sys_days{2100y / March / 1} - 1ms), "2100-02-28T23:59:59.999Z");
}

// --- EventLog with an injected sink

TEST(EventLogTest, ExactLineWithoutFields) {
  CapturedLog c;
  c.log.emit("start");
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0], R"({"time":"2026-11-29T09:13:28.123Z","instance":"dev","kind":"start"})"
                        "\n");
  EXPECT_EQ(c.log.written(), 1u);
  EXPECT_EQ(c.log.dropped(), 0u);
}

TEST(EventLogTest, FieldsOfEveryType) {
  CapturedLog c;
  const std::string owned = "owned";
  const std::string_view view = "view";
  c.log.emit("deny", {
                         {"reason", "not in allow list"},
                         {"view", view},
                         {"owned", owned},
                         {"temp", std::string("temporary")},
                         {"int", -7},
                         {"i64min", std::numeric_limits<std::int64_t>::min()},
                         {"unsigned", 7u},
                         {"u64max", std::numeric_limits<std::uint64_t>::max()},
                         {"yes", true},
                         {"no", false},
                     });
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0],
            R"({"time":"2026-11-29T09:13:28.123Z","instance":"dev","kind":"deny",)"
            R"("reason":"not in allow list","view":"view","owned":"owned","temp":"temporary",)"
            R"("int":-7,"i64min":-9223372036854775808,"unsigned":7,"u64max":18446744073709551615,)"
            R"("yes":true,"no":false})"
            "\n");
}

TEST(EventLogTest, FieldTypesAreKept) {
  EXPECT_TRUE(std::holds_alternative<std::string_view>(EventField("k", "c string").value));
  EXPECT_TRUE(std::holds_alternative<std::int64_t>(EventField("k", 1).value));
  EXPECT_TRUE(std::holds_alternative<std::uint64_t>(EventField("k", 1u).value));
  EXPECT_TRUE(std::holds_alternative<std::uint64_t>(EventField("k", std::size_t{1}).value));
  EXPECT_TRUE(std::holds_alternative<bool>(EventField("k", false).value));
}

TEST(EventLogTest, UntrustedTextIsEscaped) {
  CapturedLog c(fixed_clock(0), "in\"st");
  c.log.emit("ki\nnd", {{"name", "evil\"}\n{\"x\x80"}, {"k\\ey", 1}});
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0], R"({"time":"1970-01-01T00:00:00.000Z","instance":"in\"st","kind":"ki\nnd",)"
                        R"("name":"evil\"}\n{\"x\u0080","k\\ey":1})"
                        "\n");
  // Exactly one newline, at the end: the line cannot be split by the guest.
  EXPECT_EQ(c.lines[0].find('\n'), c.lines[0].size() - 1);
}

TEST(EventLogTest, ClockIsReadForEveryEvent) {
  std::int64_t now = 0;
  CapturedLog c([&now] { return at_millis(now); });
  c.log.emit("a");
  now = -1;
  c.log.emit("b");
  now = 1709251199999;
  c.log.emit("c");
  ASSERT_EQ(c.lines.size(), 3u);
  EXPECT_EQ(c.lines[0], R"({"time":"1970-01-01T00:00:00.000Z","instance":"dev","kind":"a"})"
                        "\n");
  EXPECT_EQ(c.lines[1], R"({"time":"1969-12-31T23:59:59.999Z","instance":"dev","kind":"b"})"
                        "\n");
  EXPECT_EQ(c.lines[2], R"({"time":"2024-02-29T23:59:59.999Z","instance":"dev","kind":"c"})"
                        "\n");
}

// The line buffer is reused: a short line after a long one has nothing left over.
TEST(EventLogTest, ReusedBufferLeavesNothingBehind) {
  CapturedLog c;
  c.log.emit("long", {{"padding", std::string(500, 'x')}});
  c.log.emit("s");
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[1], R"({"time":"2026-11-29T09:13:28.123Z","instance":"dev","kind":"s"})"
                        "\n");
}

TEST(EventLogTest, FailingSinkCountsDropped) {
  CapturedLog c;
  c.log.emit("one");
  c.accept = false;
  c.log.emit("two");
  c.log.emit("three");
  c.accept = true;
  c.log.emit("four");
  EXPECT_EQ(c.lines.size(), 4u);  // the sink was offered every line
  EXPECT_EQ(c.log.written(), 2u);
  EXPECT_EQ(c.log.dropped(), 2u);
}

TEST(EventLogTest, DefaultClockIsTheWallClock) {
  CapturedLog c(nullptr);
  auto before = format_utc_millis(system_clock::now());
  c.log.emit("now");
  auto after = format_utc_millis(system_clock::now());
  ASSERT_EQ(c.lines.size(), 1u);
  const std::string prefix = R"({"time":")";
  ASSERT_EQ(c.lines[0].rfind(prefix, 0), 0u);
  std::string stamp = c.lines[0].substr(prefix.size(), before.size());
  // Same fixed-width format, so text order is time order.
  EXPECT_LE(before, stamp);
  EXPECT_LE(stamp, after);
}

TEST(EventLogTest, DiscardKeepsNothingAndCountsWritten) {
  EventLog log = EventLog::discard();
  log.emit("x", {{"a", 1}});
  EXPECT_EQ(log.written(), 1u);
  EXPECT_EQ(log.dropped(), 0u);
}

// --- EventLog::to_fd

std::string read_available(int fd) {
  std::array<char, 4096> buf{};
  ssize_t n = ::read(fd, buf.data(), buf.size());
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

TEST(EventLogFdTest, WritesWholeLinesToAPipe) {
  Pipe p = make_pipe();
  EventLog log = EventLog::to_fd("box1", p.write.get(), fixed_clock());
  log.emit("allow", {{"name", "example.com"}, {"port", 443}});
  // One event is one write(2): a single read returns exactly the line.
  EXPECT_EQ(read_available(p.read.get()),
            R"({"time":"2026-11-29T09:13:28.123Z","instance":"box1","kind":"allow",)"
            R"("name":"example.com","port":443})"
            "\n");
  log.emit("b");
  log.emit("c");
  EXPECT_EQ(read_available(p.read.get()),
            R"({"time":"2026-11-29T09:13:28.123Z","instance":"box1","kind":"b"})"
            "\n"
            R"({"time":"2026-11-29T09:13:28.123Z","instance":"box1","kind":"c"})"
            "\n");
  EXPECT_EQ(log.written(), 3u);
  EXPECT_EQ(log.dropped(), 0u);
}

TEST(EventLogFdTest, DeadReaderDropsTheLine) {
  IgnoreSigpipe ignore;
  Pipe p = make_pipe();
  p.read.reset();
  EventLog log = EventLog::to_fd("box1", p.write.get(), fixed_clock());
  log.emit("lost");
  log.emit("lost again");
  EXPECT_EQ(log.written(), 0u);
  EXPECT_EQ(log.dropped(), 2u);
}

TEST(EventLogFdTest, BadFdDropsTheLine) {
  EventLog log = EventLog::to_fd("box1", -1, fixed_clock());
  log.emit("lost");
  EXPECT_EQ(log.dropped(), 1u);
  EXPECT_EQ(log.written(), 0u);
}

// A reader that stopped reading must not stall the data path.
TEST(EventLogFdTest, FullNonBlockingPipeDropsInsteadOfBlocking) {
  Pipe p = make_pipe();
  ASSERT_EQ(::fcntl(p.write.get(), F_SETFL, O_NONBLOCK), 0);
  std::array<char, 4096> chunk{};
  std::size_t filled = 0;
  for (;;) {
    ssize_t n = ::write(p.write.get(), chunk.data(), chunk.size());
    if (n > 0) {
      filled += static_cast<std::size_t>(n);
      continue;
    }
    ASSERT_EQ(n, -1);
    ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
    break;
  }
  // Single bytes until even those do not fit: the pipe is completely full.
  while (::write(p.write.get(), chunk.data(), 1) == 1) ++filled;
  ASSERT_GT(filled, 0u);

  ::alarm(10);  // a blocking write would hang here; the alarm fails the run instead
  EventLog log = EventLog::to_fd("box1", p.write.get(), fixed_clock());
  log.emit("overflow");
  ::alarm(0);
  EXPECT_EQ(log.dropped(), 1u);
  EXPECT_EQ(log.written(), 0u);

  // Once the reader drains, lines flow again and nothing partial was written.
  std::string drained;
  std::array<char, 4096> buf{};
  for (std::size_t got = 0; got < filled;) {
    ssize_t n = ::read(p.read.get(), buf.data(), std::min(buf.size(), filled - got));
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  log.emit("after");
  EXPECT_EQ(log.written(), 1u);
  EXPECT_EQ(read_available(p.read.get()),
            R"({"time":"2026-11-29T09:13:28.123Z","instance":"box1","kind":"after"})"
            "\n");
}

TEST(EventLogFdTest, DoesNotOwnTheFd) {
  Pipe p = make_pipe();
  {
    EventLog log = EventLog::to_fd("box1", p.write.get(), fixed_clock());
    log.emit("x");
  }
  errno = 0;
  EXPECT_NE(::fcntl(p.write.get(), F_GETFD), -1) << "the log closed an fd it does not own";
}

// A log that keeps every line, on a clock the test moves by hand, so a case
// can fill one second's budget and then open the next.
class EventLogRateLimit : public ::testing::Test {
 protected:
  system_clock::time_point now = system_clock::time_point{} + seconds(1'800'000'000);
  CapturedLog captured{[this] { return now; }, "i"};
  EventLog& log = captured.log;
  std::vector<std::string>& lines = captured.lines;
};

TEST_F(EventLogRateLimit, FloodIsBoundedAndSummarized) {
  log.set_max_per_second(10);
  for (int i = 0; i < 1000; ++i) log.emit("deny", {{"n", i}});
  EXPECT_EQ(lines.size(), 10u);
  EXPECT_EQ(log.suppressed(), 990u);
  now += milliseconds(1500);  // the next second opens with the summary
  log.emit("deny", {{"n", 1000}});
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_NE(lines[10].find("\"kind\":\"suppressed\""), std::string::npos) << lines[10];
  EXPECT_NE(lines[10].find("\"count\":990"), std::string::npos) << lines[10];
  EXPECT_NE(lines[11].find("\"n\":1000"), std::string::npos);
}

// reserve_line() is the cap without the line: past the cap the caller's
// fields are never built, and the lines it did not write are still counted
// and summarized like emit()'s.
TEST_F(EventLogRateLimit, ReserveLineChecksTheCapBeforeFieldsAreBuilt) {
  log.set_max_per_second(3);
  int built = 0;
  auto expensive = [&built](int i) {
    ++built;
    return "10.0.0." + std::to_string(i);
  };
  for (int i = 0; i < 100; ++i) {
    if (log.reserve_line()) log.write_reserved("admit", {{"dst", expensive(i)}});
  }
  log.emit("deny");  // emit() shares the budget
  EXPECT_EQ(built, 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("\"dst\":\"10.0.0.2\""), std::string::npos) << lines[2];
  EXPECT_EQ(log.suppressed(), 98u);
  EXPECT_EQ(log.written(), 3u);
  now += seconds(1);
  ASSERT_TRUE(log.reserve_line());
  log.write_reserved("admit", {{"dst", expensive(100)}});
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[3].find("\"count\":98"), std::string::npos) << lines[3];
  // Stamped with the time reserve_line() read.
  EXPECT_NE(lines[4].find(format_utc_millis(now)), std::string::npos) << lines[4];
}

}  // namespace
}  // namespace abox::base
