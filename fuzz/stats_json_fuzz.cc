// Fuzz target: netstack/program/stats_reader. `abox-net stats` parses whatever the
// process at the socket path sends, so whatever the input: no crash, no
// hang, and:
//   - an accepted reply has at most kMaxStatsFields fields, each with a
//     non-empty key of [A-Za-z0-9_] of at most kMaxStatsKeyBytes;
//   - an accepted reply round-trips: written back as compact JSON and
//     parsed again, it gives the same fields (so the table `abox-net stats`
//     prints is exactly what was sent).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "netstack/program/stats_reader.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool is_key_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one
                                   // namespace
  auto parsed = parse_stats_json(std::span(data, size));
  if (!parsed.ok()) {
    check(!parsed.error().empty());
    return 0;
  }
  const auto& fields = parsed.value();
  check(fields.size() <= kMaxStatsFields);
  std::string again = "{";
  for (const auto& f : fields) {
    check(!f.name.empty() && f.name.size() <= kMaxStatsKeyBytes);
    for (char c : f.name) check(is_key_byte(c));
    if (again.size() > 1) again += ',';
    again += '"' + f.name + "\":" + std::to_string(f.value);
  }
  again += '}';
  auto reparsed =
      parse_stats_json(std::span(reinterpret_cast<const std::uint8_t*>(again.data()), again.size()));
  check(reparsed.ok() && reparsed.value().size() == fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    check(reparsed.value()[i].name == fields[i].name && reparsed.value()[i].value == fields[i].value);
  }
  return 0;
}
