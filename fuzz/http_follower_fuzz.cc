// Fuzz target: netstack/stack/http_request_follower, which reads every byte a guest
// sends on a name-checked plain-HTTP flow. The first byte picks how the rest
// is cut into pieces (as TCP segments would cut it); the rest is the flow.
// Whatever the input: no crash, no hang, and
//   - progress: a step on a non-empty piece consumes at least one byte
//     unless it refuses, never more than the piece; after a refusal every
//     step refuses and consumes nothing;
//   - the pieces do not matter: fed whole, in the fuzzed pieces and a byte
//     at a time, the same Hosts come out (in order, each where its head ends
//     unless it is a TLS upgrade's ClientHello) and the same refusal;
//   - a prefix of the flow gives a prefix of the requests, and refuses only
//     if the whole flow refuses, for the same reason;
//   - every Host is canonical, never an IP literal, and occurs in the input
//     case-folded; a refusal's detail is set as its kind says;
//   - the first request agrees with the peek: when peek_name() says
//     http_host for the flow's first bytes, the follower reads that head too
//     (the same reader with the same rules) and its first Host is that name,
//     unless it refuses that head for asking an upgrade to something other
//     than TLS (the one rule the peek leaves to the follower).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "netstack/stack/http_request_follower.h"
#include "netstack/stack/name_peek.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace

constexpr std::size_t kLimit = 1024;  // small, so head_too_large is reached

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Outcome {
  std::vector<std::pair<std::string, std::size_t>> requests;  // Host, offset after its head (0: TLS hello)
  bool refused = false;
  FollowError error = FollowError::none;
  abox::base::http1::Error http = abox::base::http1::Error::none;
};

bool same(const Outcome& a, const Outcome& b) {
  return a.requests == b.requests && a.refused == b.refused && a.error == b.error && a.http == b.http;
}

std::uint8_t fold(std::uint8_t c) {
  return c >= 'A' && c <= 'Z' ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

bool occurs_folded(std::span<const std::uint8_t> haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [](std::uint8_t h, char n) { return fold(h) == static_cast<std::uint8_t>(n); }) !=
         haystack.end();
}

// Feeds `flow` cut after each offset in `cuts` (increasing).
Outcome follow(std::span<const std::uint8_t> flow, const std::vector<std::size_t>& cuts) {
  HttpRequestFollower f(kLimit);
  Outcome out;
  std::size_t offset = 0;
  std::size_t start = 0;
  auto piece = [&](std::span<const std::uint8_t> in) {
    while (!in.empty()) {
      const FollowStep step = f.feed(in);
      if (step.kind == FollowStep::Kind::refused) {
        check(step.consumed == 0);
        check(step.error != FollowError::none);
        const bool http = step.error == FollowError::head || step.error == FollowError::body;
        check(http == (step.http != abox::base::http1::Error::none));
        if (step.error == FollowError::host) check(step.peek.error != PeekError::none);
        const FollowStep again = f.feed(in);
        check(again.kind == FollowStep::Kind::refused && again.consumed == 0 && again.error == step.error);
        out.refused = true;
        out.error = step.error;
        out.http = step.http;
        return false;
      }
      check(step.consumed >= 1 && step.consumed <= in.size());
      offset += step.consumed;
      if (step.kind == FollowStep::Kind::request) {
        const std::string_view name = step.name.view();
        check(!name.empty());
        auto again = abox::policy::CanonicalName::from(name);
        check(again.ok() && again->view() == name);
        check(occurs_folded(flow, name));
        out.requests.emplace_back(std::string(name), f.opaque() ? 0 : offset);
      } else {
        check(step.name.view().empty());
      }
      in = in.subspan(step.consumed);
    }
    return true;
  };
  for (const std::size_t cut : cuts) {
    if (!piece(flow.subspan(start, cut - start))) return out;
    start = cut;
  }
  piece(flow.subspan(start));
  return out;
}

bool is_prefix(const Outcome& part, const Outcome& whole) {
  if (part.requests.size() > whole.requests.size()) return false;
  return std::equal(part.requests.begin(), part.requests.end(), whole.requests.begin(),
                    [](const auto& a, const auto& b) {
                      return a.first == b.first && (a.second == b.second || a.second == 0 || b.second == 0);
                    });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t cut_seed = data[0];
  const std::span<const std::uint8_t> flow(data + 1, size - 1);

  const Outcome whole = follow(flow, {});

  // Pieces of 1 + (seed-driven) bytes, as a guest's segments might come.
  std::vector<std::size_t> cuts;
  std::size_t step = 1 + cut_seed % 17;
  for (std::size_t at = step; at < flow.size(); at += step) {
    cuts.push_back(at);
    step = 1 + (step * 7 + cut_seed) % 23;
  }
  check(same(follow(flow, cuts), whole));

  if (flow.size() <= 4096) {
    std::vector<std::size_t> every;
    for (std::size_t i = 1; i < flow.size(); ++i) every.push_back(i);
    check(same(follow(flow, every), whole));
  }

  // Prefixes: never another request, never another refusal.
  for (std::size_t n : {flow.size() / 3, flow.size() / 2, flow.size() - flow.size() / 4}) {
    const Outcome part = follow(flow.first(n), {});
    check(is_prefix(part, whole));
    if (part.refused) check(whole.refused && part.error == whole.error && part.http == whole.http);
  }

  // The first request agrees with the peek.
  const PeekResult peek = peek_name(flow, kLimit);
  if (peek.status == PeekStatus::http_host) {
    // Same reader, same rules: the follower reads that very head, to the same
    // Host, or refuses it for the one thing the peek leaves to it: an upgrade
    // to something other than TLS.
    if (whole.requests.empty()) {
      check(whole.refused && whole.error == FollowError::upgrade);
    } else {
      check(whole.requests.front().first == peek.name.view());
    }
  }
  return 0;
}
