#include "base/token_bucket.h"

#include <algorithm>

namespace abox::base {

TokenBucket::TokenBucket(std::uint32_t per_second, std::uint32_t burst)
    : interval_(std::chrono::nanoseconds(std::chrono::seconds(1)) / std::max<std::uint32_t>(per_second, 1)),
      burst_(std::max<std::uint32_t>(burst, 1)),
      tokens_(burst_) {}

bool TokenBucket::take(base::MonoTime now) {
  if (tokens_ == burst_) {
    // Full: time spent full earns nothing.
    refilled_until_ = now;
  } else if (now > refilled_until_) {
    const auto earned = (now - refilled_until_) / interval_;
    if (earned >= burst_ - tokens_) {
      tokens_ = burst_;
      refilled_until_ = now;
    } else if (earned > 0) {
      tokens_ += static_cast<std::uint32_t>(earned);
      // Only whole tokens: the remainder counts toward the next one.
      refilled_until_ += interval_ * earned;
    }
  }
  if (tokens_ == 0) return false;
  --tokens_;
  return true;
}

}  // namespace abox::base
