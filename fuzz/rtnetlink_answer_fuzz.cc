// Fuzz target: netstack/rtnetlink's read_answer(), the parser of the
// kernel's rtnetlink replies at setup. The kernel is trusted, but the parser
// must not read past what it was given whatever arrives, so for any input:
//   - no crash, no read out of bounds (ASan), no hang;
//   - the answer is well-formed: an error code only with kError and always
//     positive, an index only with kLink;
//   - deterministic, and the first byte chooses the sequence number asked
//     about, so both matching and skipped messages are reached.

#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/rtnetlink.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using abox::netstack::rtnl::Answer;
  if (size == 0) return 0;
  const std::uint32_t seq = data[0] % 4;
  const std::span<const std::uint8_t> datagram(data + 1, size - 1);
  const Answer a = abox::netstack::rtnl::read_answer(datagram, seq);
  check(a.kind != Answer::Kind::kError || a.error > 0);
  check(a.kind == Answer::Kind::kError || a.error == 0);
  check(a.kind == Answer::Kind::kLink || a.ifindex == 0);
  const Answer again = abox::netstack::rtnl::read_answer(datagram, seq);
  check(again.kind == a.kind && again.error == a.error && again.ifindex == a.ifindex);
  return 0;
}
