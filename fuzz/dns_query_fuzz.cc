// Fuzz target: guest DNS queries (dns/wire). Every byte the guest sends to
// port 53 reaches parse_query(), so whatever the input: no crash, no hang, and
// what the gate builds from a parsed query is itself well-formed:
//   - the empty answer and its truncation walk cleanly (find_ttl_offsets),
//     carry no record with a TTL, echo the ID and question, and have TC set
//     after truncation;
//   - the upstream query parses back as a query with only RD set, our OPT,
//     the guest's DO bit, and the same question (name compared
//     case-insensitively, the same canonical name);
//   - a query that does not parse gets a 12-byte FORMERR iff it has an ID.
// find_ttl_offsets() also runs on the raw input (the cache's walker must
// survive any bytes), and every offset it reports must have 4 bytes behind it.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "dns/wire.h"

namespace {

using namespace abox::dns;  // NOLINT(google-build-using-namespace): a test driver for this one namespace

void check(bool ok) {
  if (!ok) __builtin_trap();
}

std::uint16_t u16_at(const std::vector<std::uint8_t>& b, std::size_t at) {
  return static_cast<std::uint16_t>((b.at(at) << 8) | b.at(at + 1));
}

bool same_name_ignoring_case(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  if (a.size() != b.size()) return false;
  auto fold = [](std::uint8_t c) { return c >= 'A' && c <= 'Z' ? static_cast<std::uint8_t>(c + 32) : c; };
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

// The question of a built message, as bytes: right after the header.
std::span<const std::uint8_t> question_of(const std::vector<std::uint8_t>& msg, const Query& q) {
  return std::span(msg).subspan(kHeaderSize, q.qname_wire_len + 4U);
}

void check_built_answer(const Query& q, const std::vector<std::uint8_t>& answer,
                        std::vector<std::uint16_t>& ttls) {
  check(find_ttl_offsets(answer, ttls));
  check(ttls.empty());  // no records, and the OPT has no TTL
  check(u16_at(answer, 0) == q.id);
  check((u16_at(answer, 2) & 0x8000) != 0);  // QR
  check(u16_at(answer, 4) == 1);
  check(u16_at(answer, 10) == (q.has_edns ? 1 : 0));
  const auto echoed = question_of(answer, q);
  check(std::equal(q.qname().begin(), q.qname().end(), echoed.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  std::vector<std::uint16_t> ttls;
  if (find_ttl_offsets(input, ttls)) {
    for (std::uint16_t at : ttls) check(std::size_t{at} + 4 <= size);
  }

  auto parsed = parse_query(input);
  std::vector<std::uint8_t> out;
  if (!parsed) {
    const bool built = build_formerr(input, out);
    check(built == (size >= 2));
    check(built ? out.size() == kHeaderSize : out.empty());
    return 0;
  }
  const Query& q = *parsed;
  check(q.qname_wire_len >= 1 && q.qname().back() == 0);  // ends with the root label
  check(q.udp_limit() >= kPlainUdpSize && q.udp_limit() <= kMaxAdvertisedUdpSize);

  build_empty_answer(q, rcode::REFUSED, out);
  check_built_answer(q, out, ttls);
  check((u16_at(out, 2) & 0x000F) == rcode::REFUSED);
  truncate_for_udp(q, out);
  check_built_answer(q, out, ttls);
  check((u16_at(out, 2) & 0x0200) != 0);  // TC

  build_upstream_query(q, 0x5A5A, out);
  auto up = parse_query(out);
  check(up.ok());
  check(up->id == 0x5A5A && up->flags == 0x0100);
  check(same_name_ignoring_case(up->qname(), q.qname()));
  check(up->qtype == q.qtype && up->qclass == q.qclass);
  check(up->has_edns && up->edns_udp_size == kMaxAdvertisedUdpSize && up->dnssec_ok == q.dnssec_ok);
  check(up->canonical_ok == q.canonical_ok);
  if (q.canonical_ok) check(up->name.view() == q.name.view());
  return 0;
}
