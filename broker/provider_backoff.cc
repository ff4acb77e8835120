#include "broker/provider_backoff.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "base/decimal.h"

namespace abox::broker {

namespace {

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// The number in s (only digits, 1 or more), or nullopt.
std::optional<std::int64_t> digits(std::string_view s) {
  auto v = base::parse_decimal<std::uint64_t>(s);
  if (!v || *v > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(*v);
}

// Days since 1970-01-01 of a proleptic Gregorian date (month 1-12).
std::int64_t days_from_civil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool leap(std::int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

// "Sun, 06 Nov 1994 08:49:37 GMT", exactly: the unix time, or nullopt.
std::optional<std::int64_t> imf_fixdate(std::string_view s) {
  static constexpr std::array<std::string_view, 7> kDays = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
  static constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (s.size() != 29 || s.substr(3, 2) != ", " || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
      s[19] != ':' || s[22] != ':' || s.substr(25) != " GMT") {
    return std::nullopt;
  }
  std::size_t day_name = kDays.size();
  for (std::size_t i = 0; i < kDays.size(); ++i) {
    if (s.substr(0, 3) == kDays[i]) day_name = i;
  }
  std::int64_t month = 0;
  for (std::size_t i = 0; i < kMonths.size(); ++i) {
    if (s.substr(8, 3) == kMonths[i]) month = static_cast<std::int64_t>(i) + 1;
  }
  auto day = digits(s.substr(5, 2));
  auto year = digits(s.substr(12, 4));
  auto hour = digits(s.substr(17, 2));
  auto minute = digits(s.substr(20, 2));
  auto second = digits(s.substr(23, 2));
  if (day_name == kDays.size() || month == 0 || !day || !year || !hour || !minute || !second)
    return std::nullopt;
  static constexpr std::array<int, 12> kMonthDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const std::int64_t month_days =
      kMonthDays[static_cast<std::size_t>(month - 1)] + (month == 2 && leap(*year));
  if (*day < 1 || *day > month_days || *hour > 23 || *minute > 59 || *second > 60) return std::nullopt;
  const std::int64_t days = days_from_civil(*year, month, *day);
  // 1970-01-01 was a Thursday (index 3): the day name must match the date.
  if (static_cast<std::size_t>(((days % 7) + 7 + 3) % 7) != day_name) return std::nullopt;
  return days * 86400 + *hour * 3600 + *minute * 60 + std::min<std::int64_t>(*second, 59);
}

}  // namespace

std::optional<std::uint32_t> retry_after_seconds(std::string_view value, std::int64_t wall_now_unix) {
  std::int64_t seconds = 0;
  if (!value.empty() && digit(value.front())) {
    for (char c : value) {
      if (!digit(c)) return std::nullopt;
    }
    // Any number of digits is valid; past the cap's width it is the cap.
    std::size_t first = value.find_first_not_of('0');
    if (first == std::string_view::npos) return std::nullopt;  // 0
    std::string_view significant = value.substr(first);
    seconds = significant.size() > 9 ? kMaxProviderBackoffSeconds : *digits(significant);
  } else {
    auto when = imf_fixdate(value);
    if (!when) return std::nullopt;
    seconds = *when - wall_now_unix;
    if (seconds <= 0) return std::nullopt;
  }
  return static_cast<std::uint32_t>(std::min<std::int64_t>(seconds, kMaxProviderBackoffSeconds));
}

std::optional<std::uint32_t> ProviderBackoff::on_response(int status, std::string_view retry_after,
                                                          base::MonoTime now, std::int64_t wall_now_unix) {
  if (status != 429 && status != 503) return std::nullopt;
  auto seconds = retry_after_seconds(retry_after, wall_now_unix);
  if (!seconds) return std::nullopt;
  const base::MonoTime until = now + base::Seconds(*seconds);
  if (until_ && *until_ >= until) return std::nullopt;
  until_ = until;
  return seconds;
}

std::optional<std::uint32_t> ProviderBackoff::seconds_left(base::MonoTime now) const {
  if (!until_ || *until_ <= now) return std::nullopt;
  const auto left = std::chrono::ceil<base::Seconds>(*until_ - now).count();
  return static_cast<std::uint32_t>(std::max<std::int64_t>(left, 1));
}

}  // namespace abox::broker
