// Fuzz target: the self-test's DNS (guest/box_guest/dns_probe_message.h):
// the answer parser reads whatever a resolver, or anything on the path,
// sends back to a probe.
//
// The first byte picks what the rest is:
//   even: an answer to the query (ID 0xBEEF, A secret.example.test): no
//         crash, no read past the input; an answer that parses has no more
//         A records than answer records and an rcode of 4 bits;
//   odd:  a name for build_a_query(); a query that builds, turned into a
//         REFUSED response (QR and RCODE set), must parse back as exactly
//         that: one reading of one message.
// Seeds (fuzz/corpus/guest_dns_answer/): REFUSED, NXDOMAIN, answers with
// compression and CNAMEs, loops, truncated and lying records, names.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "guest/box_guest/dns_probe_message.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::guest;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
  if (size < 1) return 0;
  std::span<const std::uint8_t> rest(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto r = parse_a_answer(rest, 0xBEEF, "secret.example.test");
    if (r.ok()) {
      check(r->a_count <= r->answer_count);
      check(r->rcode <= 15);
    } else {
      check(!dns_answer_error_name(r.error()).empty());
    }
    return 0;
  }
  std::string_view name(reinterpret_cast<const char*>(rest.data()), rest.size());
  std::vector<std::uint8_t> q;
  if (!build_a_query(name, 0x4242, q)) {
    check(q.empty());
    return 0;
  }
  q[2] |= 0x80;  // QR
  q[3] = static_cast<std::uint8_t>((q[3] & 0xF0) | 5);
  auto r = parse_a_answer(q, 0x4242, name);
  check(r.ok());
  check(r->rcode == 5 && r->a_count == 0 && r->answer_count == 0 && !r->truncated);
  return 0;
}
