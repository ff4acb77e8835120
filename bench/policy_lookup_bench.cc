// Policy lookups on the data path: NameMatcher over a 10,000-pattern policy,
// the canonicalize-then-lookup sequence the DNS gate runs per query, and
// find_reserved for addresses in answers and first SYNs. Target: under 100 ns
// median per lookup.
//
// Run (Release build; each benchmark repeats 10 times and reports only the
// mean, median, stddev, cv and min of the repetitions):
//   cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target policy_lookup_bench
//   build/bench/policy_lookup_bench
// Add --benchmark_filter=Name to run some, --benchmark_min_time=1 for longer
// repetitions on a noisy machine. Read the _median rows; when other work
// shares the cores, the CPU column is the fairer one.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "policy/ip_address.h"
#include "policy/name.h"
#include "policy/name_matcher.h"
#include "policy/reserved_ranges.h"

namespace abox::policy {
namespace {

constexpr std::size_t kPatternCount = 10'000;

// Fixed seed, so every run measures the same table.
class SplitMix64 {
 public:
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  template <std::size_t N>
  const char* pick(const char* const (&from)[N]) {
    return from[next() % N];
  }

 private:
  std::uint64_t state_ = 0xAB0C5EED;
};

constexpr const char* kHosts[] = {"api",   "www",   "cdn",  "static", "auth",    "login",
                                  "files", "img",   "docs", "status", "uploads", "registry",
                                  "git",   "proxy", "edge", "assets", "media",   "objects"};
constexpr const char* kWords[] = {"acme",       "globex",   "initech",    "umbrella", "hooli",
                                  "vandelay",   "stark",    "wayne",      "tyrell",   "cyberdyne",
                                  "soylent",    "wonka",    "gringotts",  "monarch",  "oscorp",
                                  "pied-piper", "aperture", "black-mesa", "massive",  "dynamic"};
constexpr const char* kSuffixes[] = {"cloud", "data", "labs", "systems", "net", "apps", "io"};
constexpr const char* kRegions[] = {"us-east-1",    "us-west-2",  "eu-west-1",
                                    "eu-central-1", "ap-south-1", "ap-northeast-1"};
constexpr const char* kTlds[] = {"com", "net", "org", "io", "dev", "co.uk", "de", "ai"};

// Realistic-looking, deterministic, never a one-label wildcard (so the miss
// below really misses): "api.globex-labs42.com", "*.eu-west-1.hooli.io".
std::string random_pattern(SplitMix64& rng) {
  std::string company =
      std::string(rng.pick(kWords)) + "-" + rng.pick(kSuffixes) + std::to_string(rng.next() % 1000);
  std::string tld = rng.pick(kTlds);
  switch (rng.next() % 4) {
    case 0:
      return company + "." + tld;
    case 1:
      return std::string(rng.pick(kHosts)) + "." + company + "." + tld;
    case 2:
      return "*." + company + "." + tld;
    default:
      return "*." + std::string(rng.pick(kRegions)) + "." + company + "." + tld;
  }
}

NamePattern must_parse(std::string_view text) {
  auto p = NamePattern::parse(text);
  if (!p) {
    std::fprintf(stderr, "bench: bad pattern %.*s\n", static_cast<int>(text.size()), text.data());
    std::abort();
  }
  return *p;
}

// The tables and the names the benchmarks look up. Each benchmark cycles
// through many names rather than one, so that the figure does not hang on
// which bucket one lucky name landed in.
struct Corpus {
  NameMatcher matcher;
  std::vector<std::string> exact_hits;     // "api.globex-labs42.com"
  std::vector<std::string> wildcard_hits;  // "a1.b2.c3.d4.eu-west-1.hooli-io7.de"
  std::vector<std::string> misses;         // "cdn.tracking.vendor-net12.com"
  std::vector<std::string> wire_names;     // "API.Globex-Labs42.COM."
};

constexpr std::size_t kNamesPerKind = 512;

// Mixed case as a resolver might send it (0x20 randomization does this).
std::string scramble_case(std::string_view name, SplitMix64& rng) {
  std::string out(name);
  for (char& c : out)
    if (c >= 'a' && c <= 'z' && rng.next() % 2 == 0) c = static_cast<char>(c - 'a' + 'A');
  return out;
}

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus built;
    std::set<std::string> seen;
    std::vector<NamePattern> exact;
    std::vector<NamePattern> wildcard;
    SplitMix64 rng;
    std::uint32_t id = 0;
    while (seen.size() < kPatternCount) {
      std::string text = random_pattern(rng);
      if (!seen.insert(text).second) continue;
      NamePattern p = must_parse(text);
      built.matcher.add(p, id++);
      (p.wildcard ? wildcard : exact).push_back(p);
    }
    if (built.matcher.pattern_count() != kPatternCount) std::abort();

    for (std::size_t i = 0; i < kNamesPerKind; ++i) {
      const NamePattern& e = exact[rng.next() % exact.size()];
      const NamePattern& w = wildcard[rng.next() % wildcard.size()];
      built.exact_hits.push_back(e.base);
      built.wildcard_hits.push_back("a1.b2.c3.d4." + w.base);
      // Same shape as the generated names, but vendor-* is never generated.
      built.misses.push_back(std::string(rng.pick(kHosts)) + ".tracking.vendor-" + std::to_string(i) + "." +
                             rng.pick(kTlds));
      const std::string& target = (i % 2 == 0) ? e.base : "objects." + w.base;
      built.wire_names.push_back(scramble_case(target, rng) + ".");
    }
    return built;
  }();
  return c;
}

void lookup(benchmark::State& state, const std::vector<std::string>& names, bool expect) {
  const NameMatcher& m = corpus().matcher;
  for (const std::string& name : names) {
    if (m.matches(name) != expect) {
      state.SkipWithError(("unexpected lookup result for " + name).c_str());
      return;
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    std::string_view name = names[i];
    i = (i + 1) % names.size();
    bool hit = m.matches(name);
    benchmark::DoNotOptimize(hit);
  }
}

// One probe of the exact table, which hits.
void BM_NameExactHit(benchmark::State& state) {
  lookup(state, corpus().exact_hits, true);
}

// The exact probe and four wildcard misses before the wildcard hits.
void BM_NameWildcardDeepHit(benchmark::State& state) {
  lookup(state, corpus().wildcard_hits, true);
}

// Every probe misses: the exact table and each of the three suffixes.
void BM_NameMiss(benchmark::State& state) {
  lookup(state, corpus().misses, false);
}

// What the DNS gate does per question: canonicalize the wire name (mixed
// case, trailing dot), then look it up. Half exact hits, half wildcard hits
// one label deep.
void BM_CanonicalizeAndLookup(benchmark::State& state) {
  const Corpus& c = corpus();
  for (const std::string& wire : c.wire_names) {
    auto name = CanonicalName::from(wire);
    if (!name || !c.matcher.matches(name->view())) {
      state.SkipWithError(("unexpected lookup result for " + wire).c_str());
      return;
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    std::string_view wire = c.wire_names[i];
    i = (i + 1) % c.wire_names.size();
    auto name = CanonicalName::from(wire);
    bool hit = name.ok() && c.matcher.matches(name->view());
    benchmark::DoNotOptimize(hit);
  }
}

void find(benchmark::State& state, std::string_view text, bool expect_reserved) {
  auto address = IpAddress::parse(text);
  if (!address || (find_reserved(*address) != nullptr) != expect_reserved) {
    state.SkipWithError("unexpected address or classification");
    return;
  }
  const IpAddress a = *address;
  for (auto _ : state) {
    benchmark::DoNotOptimize(a);
    const ReservedRange* r = find_reserved(a);
    benchmark::DoNotOptimize(r);
  }
}

void BM_ReservedV4Public(benchmark::State& state) {
  find(state, "93.184.215.14", false);
}
void BM_ReservedV4Metadata(benchmark::State& state) {
  find(state, "169.254.169.254", true);
}
void BM_ReservedV6Public(benchmark::State& state) {
  find(state, "2606:4700:4700::1111", false);
}
void BM_ReservedV6UniqueLocal(benchmark::State& state) {
  find(state, "fd12:3456::1", true);
}

double min_of(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

// Repeated so that one descheduling on a 2-core machine moves the mean, not
// the median; the minimum shows the floor.
void configure(benchmark::internal::Benchmark* b) {
  b->Repetitions(10)->ReportAggregatesOnly(true)->ComputeStatistics("min", min_of);
}

BENCHMARK(BM_NameExactHit)->Apply(configure);
BENCHMARK(BM_NameWildcardDeepHit)->Apply(configure);
BENCHMARK(BM_NameMiss)->Apply(configure);
BENCHMARK(BM_CanonicalizeAndLookup)->Apply(configure);
BENCHMARK(BM_ReservedV4Public)->Apply(configure);
BENCHMARK(BM_ReservedV4Metadata)->Apply(configure);
BENCHMARK(BM_ReservedV6Public)->Apply(configure);
BENCHMARK(BM_ReservedV6UniqueLocal)->Apply(configure);

}  // namespace
}  // namespace abox::policy

BENCHMARK_MAIN();
