#include "base/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace abox::base {

std::uint64_t SystemRandom::next_u64() {
  if (used_ == pool_.size()) {
    auto* p = reinterpret_cast<unsigned char*>(pool_.data());
    std::size_t want = sizeof pool_;
    std::size_t got = 0;
    while (got < want) {
      ssize_t n = ::getrandom(p + got, want - got, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        // Without randomness DNS IDs would be guessable: a broken
        // environment, not input, so stop rather than go on unsafely.
        std::perror("abox: getrandom");
        std::abort();
      }
      got += static_cast<std::size_t>(n);
    }
    used_ = 0;
  }
  return pool_[used_++];
}

std::uint64_t SeededRandom::next_u64() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace abox::base
