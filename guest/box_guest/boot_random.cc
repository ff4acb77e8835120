#include "guest/box_guest/boot_random.h"

#include <sys/random.h>
#include <time.h>

#ifndef GRND_INSECURE
#define GRND_INSECURE 0x0004
#endif

namespace abox::guest {

std::uint64_t BootRandom::next_u64() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_INSECURE) == static_cast<ssize_t>(sizeof v)) return v;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  // Kernels before 5.6 without a ready pool: the clock, stirred (splitmix64).
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  std::uint64_t z = (fallback_ += 0x9E3779B97F4A7C15ull) ^ static_cast<std::uint64_t>(ts.tv_nsec);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace abox::guest
