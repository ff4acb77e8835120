// Fuzz target: netstack/stack/name_peek. The first bytes of every guest flow on a
// peeked port reach peek_name(), so whatever the input: no crash, no hang,
// and, for two limits (the default peek_bytes and one below the input's
// size, so too_large is reached):
//   - monotone: a prefix that decides decides the same as the whole input
//     (status, error and name); if the whole input is undecided, so is every
//     prefix. Checked on every prefix of short inputs and on a sample of
//     prefixes plus the shortest deciding one (found by bisection) of long
//     ones;
//   - bytes past the limit are never read: the input cut to the limit gives
//     the same result;
//   - the result is well-formed: a name iff tls_sni, http_host or tls_ech
//     (and only then), always canonical and never ending in a number; an
//     error iff malformed; too_large only with `limit` bytes in or for TLS;
//   - an HTTP Host name occurs in the input, case folded (a TLS name may be
//     split by record headers, so it is not checked this way).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "netstack/stack/name_peek.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool same(const PeekResult& a, const PeekResult& b) {
  return a.status == b.status && a.error == b.error && a.name.view() == b.name.view();
}

std::uint8_t fold(std::uint8_t c) {
  return c >= 'A' && c <= 'Z' ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

bool occurs_folded(std::span<const std::uint8_t> haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](std::uint8_t h, char n) { return fold(h) == static_cast<std::uint8_t>(n); });
  return it != haystack.end();
}

bool ends_in_digit_label(std::string_view name) {
  const std::size_t dot = name.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; })) return true;
  return last.substr(0, 2) == "0x" && std::all_of(last.begin() + 2, last.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void check_well_formed(const PeekResult& r, std::span<const std::uint8_t> input, std::size_t limit) {
  check(r.status <= PeekStatus::too_large);
  check(r.error <= PeekError::http_host_ip_literal);
  check((r.error != PeekError::none) == (r.status == PeekStatus::malformed));
  const std::string_view name = r.name.view();
  const bool may_name =
      r.status == PeekStatus::tls_sni || r.status == PeekStatus::http_host || r.status == PeekStatus::tls_ech;
  check(may_name || name.empty());
  if (r.status == PeekStatus::tls_sni || r.status == PeekStatus::http_host) check(!name.empty());
  if (!name.empty()) {
    auto again = abox::policy::CanonicalName::from(name);
    check(again.ok() && again->view() == name);
    check(name.back() != '.');
    check(!ends_in_digit_label(name));
  }
  if (r.status == PeekStatus::http_host) check(occurs_folded(input, name));
  if (r.status == PeekStatus::too_large) {
    check(std::min(limit, kMaxPeekLimit) <= input.size() || (!input.empty() && input[0] == 0x16));
  }
}

void check_limit(std::span<const std::uint8_t> input, std::size_t limit) {
  const PeekResult full = peek_name(input, limit);
  check_well_formed(full, input, limit);

  // Nothing past the limit matters.
  if (input.size() > limit) check(same(peek_name(input.first(limit), limit), full));

  auto check_prefix = [&](std::size_t n) {
    const PeekResult r = peek_name(input.first(n), limit);
    check_well_formed(r, input.first(n), limit);
    if (r.status != PeekStatus::need_more) check(same(r, full));
    if (full.status == PeekStatus::need_more) check(r.status == PeekStatus::need_more);
    return r.status != PeekStatus::need_more;
  };

  constexpr std::size_t kEveryPrefixUpTo = 96;
  constexpr std::size_t kSamples = 48;
  if (input.size() <= kEveryPrefixUpTo) {
    for (std::size_t n = 0; n < input.size(); ++n) check_prefix(n);
    return;
  }
  for (std::size_t n = 0; n < kEveryPrefixUpTo / 2; ++n) check_prefix(n);
  for (std::size_t i = 1; i <= kSamples; ++i) check_prefix(input.size() * i / (kSamples + 1));
  check_prefix(input.size() - 1);

  // The shortest deciding prefix: decided there, undecided one byte before.
  if (full.status == PeekStatus::need_more) return;
  std::size_t lo = 0;
  std::size_t hi = input.size();  // peek(hi) decides
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (check_prefix(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  check(check_prefix(hi));
  check(hi == 0 || !check_prefix(hi - 1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  constexpr std::size_t kDefaultLimit = 4096;
  check_limit(input, kDefaultLimit);
  if (size > 1) check_limit(input, size - 1 - size / 4);
  return 0;
}
