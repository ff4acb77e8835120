// RandomSource: where DNS IDs and other unpredictable values come from.
//
// SystemRandom draws from the kernel (getrandom) in blocks, so upstream query
// IDs cannot be predicted by a guest or an off-path spoofer. SeededRandom is
// deterministic, for tests and fuzzing only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace abox::base {

class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual std::uint64_t next_u64() = 0;
  std::uint16_t next_u16() { return static_cast<std::uint16_t>(next_u64()); }
};

class SystemRandom final : public RandomSource {
 public:
  std::uint64_t next_u64() override;

 private:
  std::array<std::uint64_t, 64> pool_{};
  std::size_t used_ = pool_.size();
};

// splitmix64: fast, deterministic, NOT unpredictable.
class SeededRandom final : public RandomSource {
 public:
  explicit SeededRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() override;

 private:
  std::uint64_t state_;
};

}  // namespace abox::base
