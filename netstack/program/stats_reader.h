// StatsReader: reads the stats socket's reply back into (name, value) pairs
// for `abox-net stats` (a human table, or the JSON passed through).
//
// The reply comes from another process, so it is parsed like any untrusted
// bytes: through a ByteReader, every read bounds-checked. Accepted: one JSON
// object, optional whitespace and one trailing newline, whose keys are
// strings of [A-Za-z0-9_] (no escapes) and whose values are unsigned
// integers of at most 20 digits that fit in 64 bits. That is exactly what
// stats.h writes; anything else is rejected with a reason. At most
// kMaxFields fields, each key at most kMaxKeyBytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace abox::netstack {

struct StatsField {
  std::string name;
  std::uint64_t value = 0;
};

inline constexpr std::size_t kMaxStatsFields = 512;
inline constexpr std::size_t kMaxStatsKeyBytes = 64;

// Err: what was wrong and at which byte offset.
base::Result<std::vector<StatsField>, std::string> parse_stats_json(std::span<const std::uint8_t> bytes);

}  // namespace abox::netstack
