// TokenBucket: how many answers abox-net may send the guest now, for what
// the guest can ask for as fast as it likes: ICMP(v6) errors for refused
// datagrams (RFC 4443 section 2.4(f) asks every IPv6 node to bound its
// error rate; IPv4's are bounded the same way), neighbour discovery and
// DHCPv6 answers. `burst` at once, then one every 1/per_second; what is
// over is not sent (the caller counts it), so a guest that floods gets a
// few answers, not one each.
//
// Invariants: tokens() <= burst; per_second >= 1 (one a second at least:
// an error that never comes would turn every refusal into a timeout).
// Time only moves forward (base::MonoTime); an earlier `now` adds nothing.
#pragma once

#include <cstdint>

#include "base/clock.h"

namespace abox::base {

class TokenBucket {
 public:
  TokenBucket(std::uint32_t per_second, std::uint32_t burst);

  // True (one token spent) when an error may be sent at `now`.
  bool take(base::MonoTime now);
  std::uint32_t tokens() const { return tokens_; }

 private:
  std::chrono::nanoseconds interval_;  // one token's worth of time
  std::uint32_t burst_;
  std::uint32_t tokens_;
  base::MonoTime refilled_until_{};  // the tokens stand for the time up to here
};

}  // namespace abox::base
