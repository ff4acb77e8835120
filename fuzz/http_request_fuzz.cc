// Fuzz target: broker/http_request and broker/body_decoder. Every byte a
// guest sends inside a brokered TLS connection reaches them. The first input
// byte picks the limits and how the body is split; the rest is the request.
// Whatever the input: no crash, no hang, and
//   - the head parse is monotone: a prefix that decides decides the same
//     (sampled prefixes, the last one included); bytes past the head limit
//     are never read;
//   - a complete head's views all lie inside the input, head_bytes() is at
//     most the limit and ends in CRLF CRLF, the framing is consistent, and
//     the upstream head built from it (write_upstream_head) parses again to
//     the same method, target, framing and number of fields, minus the
//     dropped credential, hop-by-hop, Accept-Encoding and
//     Sec-WebSocket-Extensions headers, plus the
//     key header and "Accept-Encoding: identity";
//   - the body decodes to the same payload and the same verdict whether it
//     arrives whole or in pieces; each feed() makes progress; the payload
//     is never larger than the limit; re-framed as chunks it decodes back
//     to itself.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/body_decoder.h"
#include "broker/http_request.h"
#include "broker/upstream_head.h"

namespace {

using namespace abox::broker;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
using Bytes = std::span<const std::uint8_t>;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool inside(std::string_view v, Bytes input) {
  if (v.empty()) return true;
  auto* begin = reinterpret_cast<const char*>(input.data());
  return v.data() >= begin && v.data() + v.size() <= begin + input.size();
}

bool same(const abox::base::Result<HeadStatus, HttpError>& a,
          const abox::base::Result<HeadStatus, HttpError>& b) {
  if (a.ok() != b.ok()) return false;
  return a.ok() ? *a == *b : a.error() == b.error();
}

struct BodyRun {
  bool ok = true;
  HttpError error = HttpError::none;
  bool done = false;
  std::string payload;
};

BodyRun run_body(const RequestHead& head, Bytes body, std::size_t piece, std::uint64_t max_body) {
  BodyLimits limits;
  limits.max_body_bytes = max_body;
  BodyDecoder decoder(head.framing(), head.content_length(), limits);
  BodyRun out;
  if (decoder.error() != HttpError::none) {
    out.ok = false;
    out.error = decoder.error();
    return out;
  }
  while (!body.empty() && !decoder.done()) {
    Bytes in = body.first(std::min(piece, body.size()));
    body = body.subspan(in.size());
    while (!in.empty() && !decoder.done()) {
      auto step = decoder.feed(in);
      if (!step.ok()) {
        out.ok = false;
        out.error = step.error();
        check(decoder.error() == step.error());
        return out;
      }
      check(step->consumed > 0 && step->consumed <= in.size());
      if (!step->payload.empty()) {
        check(step->payload.data() >= in.data() &&
              step->payload.data() + step->payload.size() <= in.data() + step->consumed);
      }
      out.payload.append(reinterpret_cast<const char*>(step->payload.data()), step->payload.size());
      in = in.subspan(step->consumed);
    }
  }
  out.done = decoder.done();
  check(out.payload.size() <= max_body);
  check(decoder.payload_bytes() == out.payload.size());
  return out;
}

void check_head(const RequestHead& head, Bytes input, const HeadLimits& limits) {
  check(head.head_bytes() >= 4 && head.head_bytes() <= limits.max_head_bytes &&
        head.head_bytes() <= input.size());
  auto text = std::string_view(reinterpret_cast<const char*>(input.data()), head.head_bytes());
  check(text.ends_with("\r\n\r\n"));
  check(inside(head.method(), input) && inside(head.target(), input) && inside(head.path(), input));
  check(inside(head.host(), input));
  check(head.fields().size() <= limits.max_fields && head.fields().size() <= kMaxHeaderFields);
  std::size_t credentials = 0;
  for (const auto& f : head.fields()) {
    check(!f.name.empty() && inside(f.name, input) && inside(f.value, input));
    if (is_guest_credential_header(f.name) || is_hop_by_hop_header(f.name) || iequals(f.name, "x-key") ||
        iequals(f.name, "accept-encoding") || iequals(f.name, "sec-websocket-extensions")) {
      ++credentials;
    }
  }
  check(head.count("host") == 1);
  check(head.framing() == BodyFraming::content_length || head.content_length() == 0);
  check(head.method() != "CONNECT" && head.method() != "TRACE");
  check(head.path() == "*" || head.path().starts_with("/"));

  // The upstream head is a valid head with the guest's credentials replaced.
  std::string upstream;
  write_upstream_head(head, KeyPlacement{"x-key", "Bearer "}, "k", upstream);
  HeadLimits roomy;
  roomy.max_head_bytes = upstream.size() + 1;
  roomy.max_fields = kMaxHeaderFields;
  RequestHead again;
  auto r = parse_request_head(abox::base::as_bytes(upstream), roomy, again);
  // The key, "Accept-Encoding: identity", "Connection: upgrade".
  const std::size_t added = 2 + (head.wants_upgrade() ? 1 : 0);
  if (head.fields().size() - credentials + added <= kMaxHeaderFields) {
    check(r.ok() && *r == HeadStatus::complete);
    check(again.method() == head.method() && again.target() == head.target());
    check(again.framing() == head.framing() && again.content_length() == head.content_length());
    check(again.fields().size() == head.fields().size() - credentials + added);
    check(again.wants_upgrade() == head.wants_upgrade());
    check(again.count("x-key") == 1 && again.find("x-key")->value == "Bearer k");
    check(again.count("accept-encoding") == 1 && again.find("accept-encoding")->value == "identity");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t knobs = data[0];
  Bytes input(data + 1, size - 1);

  HeadLimits limits;
  limits.max_head_bytes = (knobs & 1) ? 16384 : 256;
  limits.max_fields = (knobs & 2) ? 100 : 4;
  const std::uint64_t max_body = (knobs & 4) ? (1u << 20) : 16;
  const std::size_t piece = 1 + (knobs >> 3);

  RequestHead head;
  auto full = parse_request_head(input, limits, head);
  if (input.size() > limits.max_head_bytes) {
    RequestHead cut;
    check(same(parse_request_head(input.first(limits.max_head_bytes), limits, cut), full));
  }
  // Monotone on sampled prefixes.
  constexpr std::size_t kSamples = 24;
  for (std::size_t i = 0; i <= kSamples; ++i) {
    std::size_t n = i == kSamples ? (input.empty() ? 0 : input.size() - 1) : input.size() * i / kSamples;
    RequestHead prefix_head;
    auto r = parse_request_head(input.first(n), limits, prefix_head);
    if (!(r.ok() && *r == HeadStatus::need_more)) check(same(r, full));
    if (full.ok() && *full == HeadStatus::need_more) check(r.ok() && *r == HeadStatus::need_more);
  }
  if (!full.ok() || *full != HeadStatus::complete) return 0;
  check_head(head, input, limits);

  Bytes body = input.subspan(head.head_bytes());
  BodyRun whole = run_body(head, body, body.size() + 1, max_body);
  BodyRun pieces = run_body(head, body, piece, max_body);
  check(whole.ok == pieces.ok && whole.error == pieces.error && whole.done == pieces.done);
  check(whole.payload == pieces.payload);

  // Re-framed as chunks (as the broker forwards a chunked body), the payload
  // decodes back to itself.
  if (whole.ok) {
    std::string reframed;
    append_chunk(abox::base::as_bytes(whole.payload), reframed);
    append_last_chunk(reframed);
    BodyDecoder again(BodyFraming::chunked, 0, BodyLimits{});
    auto in = abox::base::as_bytes(reframed);
    std::string decoded;
    while (!in.empty() && !again.done()) {
      auto step = again.feed(in);
      check(step.ok());
      decoded.append(reinterpret_cast<const char*>(step->payload.data()), step->payload.size());
      in = in.subspan(step->consumed);
    }
    check(again.done() && in.empty() && decoded == whole.payload);
  }
  return 0;
}
