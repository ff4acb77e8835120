// EventLog: writes events as JSON lines, one line per event:
//   {"time":"2026-11-29T09:13:28.123Z","instance":"dev","kind":"deny","reason":"...",...}
//
// Every refusal, drop and unsafe use on the data path becomes one event.
// Each line is built in a reused buffer and handed to the sink in a single
// write(2), so lines from one process never interleave. A sink that would
// block or fails drops the line and counts it (dropped()): the data path
// never waits for a log reader. The clock is injected for deterministic tests.
//
// A guest controls how many refusals happen, so lines are rate-limited:
// at most max_per_second() lines in each wall-clock second; past that they
// are counted (suppressed()) and the next second opens with one
// {"kind":"suppressed","count":N} line, so a flood costs a bounded amount of
// disk and CPU and still leaves a trace. A caller whose fields cost work to
// build (addresses turned into text) asks reserve_line() first and builds
// them only when a line may be written, so a capped flood costs no
// formatting either.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace abox::base {

struct EventField {
  using Value = std::variant<std::string_view, std::int64_t, std::uint64_t, bool>;
  std::string_view key;
  Value value;

  EventField(std::string_view k, std::string_view v) : key(k), value(v) {}
  EventField(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  EventField(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  EventField(std::string_view k, std::int64_t v) : key(k), value(v) {}
  EventField(std::string_view k, int v) : key(k), value(std::int64_t{v}) {}
  EventField(std::string_view k, std::uint64_t v) : key(k), value(v) {}
  EventField(std::string_view k, unsigned v) : key(k), value(std::uint64_t{v}) {}
  EventField(std::string_view k, bool v) : key(k), value(v) {}
};

class EventLog {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;
  // Where finished lines go; returns false when the line was not taken whole.
  using Sink = std::function<bool(std::string_view line)>;

  EventLog(std::string instance, Sink sink, Clock clock = nullptr);

  // A log that writes to an fd it does not own (stdout, a pipe, a file).
  static EventLog to_fd(std::string instance, int fd, Clock clock = nullptr);
  // A log that keeps nothing (tools that do not want events).
  static EventLog discard();

  // Emits {"time","instance","kind", fields...}. Field keys must not repeat
  // the three fixed ones.
  void emit(std::string_view kind, std::initializer_list<EventField> fields = {});

  // The rate cap on its own, for fields that cost work to build:
  //   if (log.reserve_line()) log.write_reserved("admit", {{"dst", ep.to_string()}});
  // reserve_line() takes one line of this second's budget and returns true,
  // or returns false and counts the line as suppressed. write_reserved()
  // writes a line reserve_line() allowed (call it exactly once after true).
  bool reserve_line();
  void write_reserved(std::string_view kind, std::initializer_list<EventField> fields = {});

  std::uint64_t written() const { return written_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t suppressed() const { return suppressed_total_; }

  static constexpr std::uint32_t kDefaultMaxPerSecond = 1000;
  void set_max_per_second(std::uint32_t n) { max_per_second_ = n; }
  std::uint32_t max_per_second() const { return max_per_second_; }

 private:
  std::string instance_;
  Sink sink_;
  Clock clock_;
  std::string line_;
  void write_line(std::chrono::system_clock::time_point now, std::string_view kind,
                  std::initializer_list<EventField> fields);

  std::uint64_t written_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint32_t max_per_second_ = kDefaultMaxPerSecond;
  std::int64_t second_ = 0;           // the wall-clock second being counted
  std::uint32_t in_second_ = 0;       // lines written in it
  std::uint64_t suppressed_now_ = 0;  // lines suppressed since the last summary
  std::uint64_t suppressed_total_ = 0;
  std::chrono::system_clock::time_point reserved_at_{};  // the last reserve_line()'s clock read
};

// Formats t as RFC 3339 UTC with milliseconds: 2026-11-29T09:13:28.123Z.
std::string format_utc_millis(std::chrono::system_clock::time_point t);

}  // namespace abox::base
