// Fuzz target: base/broker_handoff. The broker reads this line first on every
// connection to its socket. Whatever the input: no crash, never a read past
// the first newline or kMaxHandoffLine, and a line that parses re-encodes to
// exactly the bytes consumed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/broker_handoff.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::base;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
  const std::span<const std::uint8_t> input(data, size);
  auto r = parse_handoff(input);
  if (!r.ok()) {
    if (size > kMaxHandoffLine) {
      auto cut = parse_handoff(input.first(kMaxHandoffLine));
      check(!cut.ok() && cut.error() == r.error());
    }
    return 0;
  }
  check(r->consumed <= size && r->consumed <= kMaxHandoffLine && data[r->consumed - 1] == '\n');
  auto again = encode_handoff(r->handoff);
  check(again.ok());
  check(std::string_view(again.value()) ==
        std::string_view(reinterpret_cast<const char*>(data), r->consumed));  // NOLINT: bytes as text
  // Bytes after the line never change the result.
  auto only_line = parse_handoff(input.first(r->consumed));
  check(only_line.ok() && only_line->consumed == r->consumed);
  return 0;
}
