// HttpRequestFollower's cost per byte of a plain-HTTP flow on a name-checked
// port (netstack/stack/http_request_follower.h): what abox-net now spends, before
// it sends them, on the guest's bytes of such a flow.
//
//   ContentLengthBody   one PUT of 64 MiB, fed in 64 KiB pieces (what a
//                       guest's TSO segments give on a 64 KiB MTU): bodies
//                       are counted, so this is the per-piece cost
//   ChunkedBody         the same, chunked in 16 KiB chunks: the size lines
//                       are read byte by byte, the data counted
//   PipelinedGets       a batch of small GET heads in one piece, as a
//                       keep-alive client pipelines them: every head is read
//   GetsByteByByte      one head a byte at a time (the worst split: copied,
//                       read again at each LF)
//
// Run (Release build):
//   cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target http_follower_bench
//   build/bench/http_follower_bench
// Read bytes_per_second (and requests/s for the head rows).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "netstack/stack/http_request_follower.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kLimit = 4096;  // the policy's default peek_bytes
constexpr std::size_t kPiece = 64 * 1024;
constexpr std::size_t kBody = 64u << 20;

using Bytes = std::vector<std::uint8_t>;

Bytes bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// Feeds one piece; false when the follower refused (the benchmark is wrong then).
bool feed_all(HttpRequestFollower& f, std::span<const std::uint8_t> in, std::size_t& requests) {
  while (!in.empty()) {
    const FollowStep step = f.feed(in);
    if (step.kind == FollowStep::Kind::refused) return false;
    if (step.kind == FollowStep::Kind::request) ++requests;
    in = in.subspan(step.consumed);
  }
  return true;
}

void ContentLengthBody(benchmark::State& state) {
  const Bytes head = bytes_of(
      "PUT /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n");
  const Bytes piece(kPiece, 'x');
  std::size_t requests = 0;
  for (auto _ : state) {
    HttpRequestFollower f(kLimit);
    if (!feed_all(f, head, requests)) state.SkipWithError("refused");
    for (std::size_t sent = 0; sent < kBody; sent += kPiece) {
      if (!feed_all(f, piece, requests)) state.SkipWithError("refused");
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * (kBody + head.size())));
}
BENCHMARK(ContentLengthBody)->Unit(benchmark::kMillisecond);

void ChunkedBody(benchmark::State& state) {
  const Bytes head =
      bytes_of("POST /upload HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n");
  // 64 KiB pieces of a stream of 16 KiB chunks ("4000\r\n" data "\r\n").
  std::string stream;
  while (stream.size() < kBody) {
    stream += "4000\r\n";
    stream.append(16 * 1024, 'x');
    stream += "\r\n";
  }
  stream += "0\r\n\r\n";
  const Bytes body = bytes_of(stream);
  std::size_t requests = 0;
  for (auto _ : state) {
    HttpRequestFollower f(kLimit);
    if (!feed_all(f, head, requests)) state.SkipWithError("refused");
    for (std::size_t at = 0; at < body.size(); at += kPiece) {
      const std::size_t n = std::min(kPiece, body.size() - at);
      if (!feed_all(f, std::span(body).subspan(at, n), requests)) state.SkipWithError("refused");
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * (body.size() + head.size())));
}
BENCHMARK(ChunkedBody)->Unit(benchmark::kMillisecond);

const std::string kGet =
    "GET /index.html HTTP/1.1\r\nHost: a.example\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n"
    "Accept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n";

void PipelinedGets(benchmark::State& state) {
  std::string batch;
  for (int i = 0; i < 64; ++i) batch += kGet;
  const Bytes piece = bytes_of(batch);
  std::size_t requests = 0;
  HttpRequestFollower f(kLimit);
  for (auto _ : state) {
    if (!feed_all(f, piece, requests)) state.SkipWithError("refused");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * piece.size()));
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsRate);
}
BENCHMARK(PipelinedGets);

void GetsByteByByte(benchmark::State& state) {
  const Bytes head = bytes_of(kGet);
  std::size_t requests = 0;
  HttpRequestFollower f(kLimit);
  for (auto _ : state) {
    for (std::size_t i = 0; i < head.size(); ++i) {
      if (!feed_all(f, std::span(head).subspan(i, 1), requests)) state.SkipWithError("refused");
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * head.size()));
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsRate);
}
BENCHMARK(GetsByteByByte);

}  // namespace
}  // namespace abox::netstack

BENCHMARK_MAIN();
