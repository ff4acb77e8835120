// The broker's per-request work outside TLS and sockets: parse the guest's
// head, run the injection gate, write the upstream head, decode the body,
// relay a response body.
// The head is the one the Anthropic Python SDK sends (18 fields, ~620
// bytes); the gate runs against a policy with that binding, this instance's
// nonce in x-api-key and one real key to look for (condition 5).
//
// Run (Release build):
//   cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target broker_gate_bench
//   build/bench/broker_gate_bench
// Read the _median rows; when other work shares the cores, the CPU column is
// the fairer one.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/body_decoder.h"
#include "broker/http_request.h"
#include "broker/injection_gate.h"
#include "broker/nonce.h"
#include "broker/response_relay.h"
#include "broker/upstream_head.h"
#include "policy/policy_file.h"

namespace abox::broker {
namespace {

constexpr std::string_view kPolicy = R"(
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
paths = ["/v1/"]

[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
)";

constexpr std::string_view kKey =
    "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyzAB";

struct Fixture {
  policy::Policy policy;
  NonceTable nonces;
  InjectionGate gate;
  std::string head_text;

  Fixture() : policy(load()), nonces(make_secret(), policy.brokers()), gate(policy, nonces) {
    head_text =
        "POST /v1/messages HTTP/1.1\r\n"
        "Host: api.anthropic.com\r\n"
        "Accept-Encoding: gzip, deflate\r\n"
        "Connection: keep-alive\r\n"
        "Accept: application/json\r\n"
        "Content-Type: application/json\r\n"
        "User-Agent: Anthropic/Python 0.40.0\r\n"
        "X-Stainless-Lang: python\r\n"
        "X-Stainless-Package-Version: 0.40.0\r\n"
        "X-Stainless-OS: Linux\r\n"
        "X-Stainless-Arch: x64\r\n"
        "X-Stainless-Runtime: CPython\r\n"
        "X-Stainless-Runtime-Version: 3.11.7\r\n"
        "X-Stainless-Async: false\r\n"
        "x-stainless-retry-count: 0\r\n"
        "x-stainless-read-timeout: 600\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "x-api-key: " +
        std::string(nonces.nonce_for(0)) +
        "\r\n"
        "Content-Length: 123\r\n"
        "\r\n";
  }
  static policy::Policy load() {
    auto r = policy::parse_policy(kPolicy, "bench.toml");
    if (!r.ok()) {
      std::fprintf(stderr, "%s", r.error().to_string().c_str());
      std::abort();
    }
    return std::move(r).value();
  }
  static InstanceSecretBytes make_secret() {
    InstanceSecretBytes s{};
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::uint8_t>(i * 31 + 7);
    return s;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

GateRequest gate_request(const RequestHead& head, const std::string_view& key) {
  GateRequest req;
  req.sni = "api.anthropic.com";
  req.port = 443;
  req.head = &head;
  req.real_keys = {&key, 1};
  return req;
}

void BM_ParseHead(benchmark::State& state) {
  auto& f = fixture();
  RequestHead head;
  for (auto _ : state) {
    auto r = parse_request_head(base::as_bytes(f.head_text), HeadLimits{}, head);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.head_text.size()));
}
BENCHMARK(BM_ParseHead);

void BM_Gate(benchmark::State& state) {
  auto& f = fixture();
  RequestHead head;
  if (!parse_request_head(base::as_bytes(f.head_text), HeadLimits{}, head).ok()) std::abort();
  std::string_view key = kKey;
  GateRequest req = gate_request(head, key);
  for (auto _ : state) {
    GateDecision d = f.gate.decide(req);
    if (!d.allowed()) std::abort();
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_Gate);

void BM_UpstreamHead(benchmark::State& state) {
  auto& f = fixture();
  RequestHead head;
  if (!parse_request_head(base::as_bytes(f.head_text), HeadLimits{}, head).ok()) std::abort();
  std::string out;
  out.reserve(2048);
  for (auto _ : state) {
    out.clear();
    write_upstream_head(head, KeyPlacement{"x-api-key", ""}, kKey, out);
    benchmark::DoNotOptimize(out.data());
  }
  wipe_string(out);
}
BENCHMARK(BM_UpstreamHead);

// Everything the broker does for one request head: parse, gate, rewrite.
void BM_WholeHead(benchmark::State& state) {
  auto& f = fixture();
  RequestHead head;
  std::string out;
  out.reserve(2048);
  std::string_view key = kKey;
  for (auto _ : state) {
    auto r = parse_request_head(base::as_bytes(f.head_text), HeadLimits{}, head);
    if (!r.ok()) std::abort();
    GateDecision d = f.gate.decide(gate_request(head, key));
    out.clear();
    write_upstream_head(head, KeyPlacement{d.binding->header, d.key_prefix}, kKey, out);
    benchmark::DoNotOptimize(out.data());
  }
  wipe_string(out);
}
BENCHMARK(BM_WholeHead);

// A chunked body of 1 MiB in 4 KiB chunks, fed in 16 KiB pieces (TLS records).
void BM_ChunkedBody(benchmark::State& state) {
  std::string wire;
  std::string chunk(4096, 'x');
  for (int i = 0; i < 256; ++i) append_chunk(base::as_bytes(chunk), wire);
  append_last_chunk(wire);
  std::uint64_t payload = 0;
  for (auto _ : state) {
    BodyDecoder body(BodyFraming::chunked, 0, BodyLimits{});
    auto all = base::as_bytes(wire);
    while (!all.empty() && !body.done()) {
      auto piece = all.first(std::min<std::size_t>(16384, all.size()));
      all = all.subspan(piece.size());
      while (!piece.empty() && !body.done()) {
        auto step = body.feed(piece);
        if (!step.ok()) std::abort();
        piece = piece.subspan(step->consumed);
      }
    }
    payload = body.payload_bytes();
    benchmark::DoNotOptimize(payload);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * payload));
}
BENCHMARK(BM_ChunkedBody);

// The body's nonce tripwire over the same 1 MiB.
void BM_BodyNonceScan(benchmark::State& state) {
  std::string body(1 << 20, 'a');
  for (auto _ : state) {
    NonceMarkerScanner scan;
    benchmark::DoNotOptimize(scan.feed(base::as_bytes(body)));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_BodyNonceScan);

// A provider's response body on its way to the guest, as connection_upstream.cc
// relays it (response_relay.h: decoded, scrubbed, framed again): 1 MiB of
// payload, fed in 16 KiB pieces (TLS records), the key scrubbed. Arg 0: chunked in 200-byte chunks (an SSE
// stream's events); arg 1: the same payload under Content-Length.
void BM_ResponseBody(benchmark::State& state) {
  const bool chunked = state.range(0) == 0;
  std::string payload;
  while (payload.size() < (1u << 20))
    payload.append(
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
        "{\"type\":\"text_delta\",\"text\":\"Sure, this is the next sentence of the answer.\"}}\n\n");
  std::string wire;
  if (chunked) {
    for (std::size_t at = 0; at < payload.size(); at += 200)
      append_chunk(base::as_bytes(std::string_view(payload).substr(at, 200)), wire);
    append_last_chunk(wire);
  } else {
    wire = payload;
  }
  std::string out;
  ResponseRelay relay;
  for (auto _ : state) {
    relay.start(kKey);
    relay.begin_body(chunked ? ResponseFraming::chunked : ResponseFraming::content_length, payload.size());
    std::string_view all = wire;
    std::size_t sent = 0;
    while (!all.empty() && !relay.body_done()) {
      std::string_view piece = all.substr(0, 16384);
      all.remove_prefix(piece.size());
      out.clear();
      auto used = relay.body(base::as_bytes(piece), out);
      if (!used.ok()) std::abort();
      sent += out.size();
    }
    benchmark::DoNotOptimize(sent);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * payload.size()));
}
BENCHMARK(BM_ResponseBody)->Arg(0)->Arg(1);

}  // namespace
}  // namespace abox::broker

BENCHMARK_MAIN();
