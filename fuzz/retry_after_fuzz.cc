// Fuzz target: broker/provider_backoff. A provider's Retry-After value (the
// input) at a wall clock taken from the input's first 8 bytes. Whatever the
// input: no crash; a value that parses is 1 to kMaxProviderBackoffSeconds;
// a backoff started from it holds exactly that long, rounded up.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "broker/provider_backoff.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::broker;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
  std::int64_t wall = 1700000000;
  if (size >= 8) {
    std::memcpy(&wall, data, 8);
    wall %= (std::int64_t{1} << 40);  // within a few thousand years either way
    data += 8;
    size -= 8;
  }
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  auto seconds = retry_after_seconds(value, wall);
  if (seconds) check(*seconds >= 1 && *seconds <= kMaxProviderBackoffSeconds);
  ProviderBackoff b;
  const abox::base::MonoTime t0{};
  auto started = b.on_response(429, value, t0, wall);
  check(started == seconds);
  if (started) {
    check(b.seconds_left(t0) == started);
    check(!b.seconds_left(t0 + abox::base::Seconds(*started)));
  } else {
    check(!b.seconds_left(t0));
  }
  return 0;
}
