// Monotonic time for the data path. Components never read the clock
// themselves: the event loop reads it once per turn and passes `now` in, so
// tests and fuzzers drive time by hand (deterministic mode).
#pragma once

#include <chrono>

namespace abox::base {

using MonoClock = std::chrono::steady_clock;
using MonoTime = MonoClock::time_point;
using Seconds = std::chrono::seconds;
using Millis = std::chrono::milliseconds;

}  // namespace abox::base
