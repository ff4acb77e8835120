// ProviderBackoff: the per-binding state behind "after a provider's 429 (or
// 503) with Retry-After, the broker answers new requests on that binding
// with 429 itself until then, without touching the provider" (issue 18).
// Sans-I/O: the caller passes the clocks in.
//
// Wired by BackoffTable (backoff_table.h): one per binding; the connection
// asks it before a request goes upstream and tells it each final response.
//
// Retry-After is the provider's text (RFC 9110 10.2.3): delay-seconds
// (1*DIGIT) or an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"); the
// obsolete date forms, anything else, and a time not in the future start no
// backoff (the guest still gets the provider's answer as it was). Every
// backoff is capped at kMaxProviderBackoffSeconds, so a provider cannot
// switch a binding off for longer. A later answer may extend a backoff,
// never shorten it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/clock.h"

namespace abox::broker {

inline constexpr std::uint32_t kMaxProviderBackoffSeconds = 3600;

// Seconds from wall_now_unix until the time Retry-After names, capped at
// kMaxProviderBackoffSeconds; nullopt when it is neither form, or not later
// than wall_now_unix.
std::optional<std::uint32_t> retry_after_seconds(std::string_view value, std::int64_t wall_now_unix);

class ProviderBackoff {
 public:
  // One provider response on the binding. The seconds of the backoff this
  // answer starts or extends, or nullopt when it does neither (not a 429 or
  // 503, no usable Retry-After, or one that ends before the current backoff).
  std::optional<std::uint32_t> on_response(int status, std::string_view retry_after, base::MonoTime now,
                                           std::int64_t wall_now_unix);
  // While new requests are held back: the seconds left, rounded up (>= 1).
  std::optional<std::uint32_t> seconds_left(base::MonoTime now) const;

 private:
  std::optional<base::MonoTime> until_;
};

}  // namespace abox::broker
