#include "base/event_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "base/json.h"

namespace abox::base {

std::string format_utc_millis(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = floor<milliseconds>(t.time_since_epoch()).count();  // floor: 1ns before 1970 is 23:59:59.999
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  long millis = static_cast<long>(ms % 1000);
  if (millis < 0) {  // before 1970: keep the fraction positive
    millis += 1000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];  // 77 covers every int the format can take (-Wformat-truncation)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

EventLog::EventLog(std::string instance, Sink sink, Clock clock)
    : instance_(std::move(instance)), sink_(std::move(sink)), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
}

EventLog EventLog::to_fd(std::string instance, int fd, Clock clock) {
  return EventLog(
      std::move(instance),
      [fd](std::string_view line) {
        for (;;) {
          ssize_t n = ::write(fd, line.data(), line.size());
          if (n == static_cast<ssize_t>(line.size())) return true;
          if (n < 0 && errno == EINTR) continue;
          return false;  // partial, EAGAIN or a dead reader: the line is dropped
        }
      },
      std::move(clock));
}

EventLog EventLog::discard() {
  return EventLog("", [](std::string_view) { return true; });
}

void EventLog::emit(std::string_view kind, std::initializer_list<EventField> fields) {
  if (reserve_line()) write_reserved(kind, fields);
}

bool EventLog::reserve_line() {
  const auto now = clock_();
  reserved_at_ = now;
  auto second = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  if (second != second_) {
    second_ = second;
    in_second_ = 0;
    if (suppressed_now_ > 0) {
      std::uint64_t n = suppressed_now_;
      suppressed_now_ = 0;
      ++in_second_;
      write_line(now, "suppressed", {{"reason", "event rate limit"}, {"count", n}});
    }
  }
  if (in_second_ >= max_per_second_) {
    ++suppressed_now_;
    ++suppressed_total_;
    return false;
  }
  ++in_second_;
  return true;
}

void EventLog::write_reserved(std::string_view kind, std::initializer_list<EventField> fields) {
  // The time reserve_line() read: one clock read per line, and the line is
  // stamped in the second that counted it.
  write_line(reserved_at_, kind, fields);
}

void EventLog::write_line(std::chrono::system_clock::time_point now, std::string_view kind,
                          std::initializer_list<EventField> fields) {
  line_.clear();
  JsonWriter w(line_);
  w.begin_object();
  w.field("time", format_utc_millis(now));
  w.field("instance", instance_);
  w.field("kind", kind);
  for (const auto& f : fields) {
    w.key(f.key);
    std::visit([&w](const auto& v) { w.value(v); }, f.value);
  }
  w.end_object();
  line_ += '\n';
  if (sink_(line_)) {
    ++written_;
  } else {
    ++dropped_;
  }
}

}  // namespace abox::base
