// RotatingLog: a detached instance's output.log, bounded. Chunks are appended
// to PATH; when PATH would pass max_bytes it becomes PATH.1 (replacing the
// older one) and a new PATH starts, so the two together hold at most
// 2 * max_bytes and always the newest output. Write errors drop the chunk and
// count it (the agent's output is worth less than the instance running on).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/unique_fd.h"

namespace abox::engine {

inline constexpr std::uint64_t kOutputLogBytes = 8ull << 20;

class RotatingLog {
 public:
  RotatingLog(std::string path, std::uint64_t max_bytes);
  void write(std::span<const std::uint8_t> bytes);
  std::uint64_t rotations() const { return rotations_; }
  std::uint64_t dropped_bytes() const { return dropped_; }

 private:
  void open_fresh();
  std::string path_;
  std::uint64_t max_bytes_;
  base::UniqueFd fd_;
  std::uint64_t size_ = 0;
  std::uint64_t rotations_ = 0, dropped_ = 0;
};

}  // namespace abox::engine
