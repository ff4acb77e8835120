// Fuzz target: netstack/link/rtnetlink's read_answer(), the parser of the
// kernel's rtnetlink replies at setup, and read_address_messages(), the
// parser of its address dumps and notifications (HostAddressWatch). The
// kernel is trusted, but the parsers must not read past what they were given
// whatever arrives, so for any input:
//   - no crash, no read out of bounds (ASan), no hang;
//   - the answer is well-formed: an error code only with kError and always
//     positive, an index only with kLink;
//   - deterministic, and the first byte chooses the sequence number asked
//     about, so both matching and skipped messages are reached.

#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/link/rtnetlink.h"

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

  // Address messages: an error code only with kError and always positive;
  // nothing kept from a malformed datagram; every address of its family's size.
  using abox::netstack::rtnl::AddressMessages;
  const AddressMessages m = abox::netstack::rtnl::read_address_messages(datagram, seq);
  check(m.end != AddressMessages::End::kError || m.error > 0);
  check(m.end == AddressMessages::End::kError || m.error == 0);
  check(m.end != AddressMessages::End::kMalformed || m.changes.empty());
  check(m.changes.size() <= datagram.size() / 16);  // a header and an ifaddrmsg at least, each
  const AddressMessages m2 = abox::netstack::rtnl::read_address_messages(datagram, seq);
  check(m2.end == m.end && m2.changes.size() == m.changes.size());
  return 0;
}
