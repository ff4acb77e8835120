#include "guest/box_guest/console.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace abox::guest {
namespace {

std::int64_t clock_ms(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

std::uint64_t uptime_ms() {
  return static_cast<std::uint64_t>(clock_ms(CLOCK_BOOTTIME));
}
std::int64_t monotonic_ms() {
  return clock_ms(CLOCK_MONOTONIC);
}

void console_line(std::string_view text) {
  char prefix[48];
  auto up = uptime_ms();
  int n =
      std::snprintf(prefix, sizeof prefix, "box-guest: [%5llu.%03llu] ",
                    static_cast<unsigned long long>(up / 1000), static_cast<unsigned long long>(up % 1000));
  std::string line(prefix, n > 0 ? static_cast<std::size_t>(n) : 0);
  line.append(text);
  line.push_back('\n');
  // One write, so lines from box-guest and the kernel do not interleave
  // mid-line; a console that cannot be written to is not worth failing over.
  [[maybe_unused]] auto written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace abox::guest
