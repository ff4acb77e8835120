// Response relay. How this works: the framing of the body picks the path.
// Content-Length and chunked bodies go through a BodyDecoder; each payload
// run it returns is fed to the scrubber, straight into `out` for
// Content-Length, into run_ for chunked, which then becomes one chunk. Until
// close, every byte is payload. The decoder consumes framing bytes itself,
// so a chunk-size line, an extension or a trailer field never reaches the
// scrubber or the guest.
#include "broker/response_relay.h"

#include "base/byte_reader.h"

namespace abox::broker {

namespace {

std::string_view chars_of(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace

void ResponseRelay::start(std::string_view key) {
  key_ = key;
  tunnel_is_websocket_ = false;
  scrubber_.reset(key);
  framing_ = ResponseFraming::none;
  decoder_.reset();
}

void ResponseRelay::head(std::string_view head, std::string& out) {
  scrubber_.feed(head, out);
  scrubber_.finish(out);
}

void ResponseRelay::begin_body(ResponseFraming framing, std::uint64_t content_length) {
  framing_ = framing;
  decoder_.reset();
  switch (framing) {
    case ResponseFraming::none:
    case ResponseFraming::until_close:
      break;
    case ResponseFraming::content_length:
      decoder_.emplace(BodyFraming::content_length, content_length, BodyLimits{UINT64_MAX});
      break;
    case ResponseFraming::chunked:
      // Trailer fields (RFC 9112 7.1.2) are allowed, bounded like the head,
      // checked, and dropped: a provider could put there what its head may
      // not pass on (framing, Connection, Set-Cookie to a client that merges
      // trailers into the head), and no provider client needs them.
      decoder_.emplace(BodyFraming::chunked, 0,
                       BodyLimits{UINT64_MAX, kMaxResponseFields, kMaxResponseHeadBytes});
      break;
  }
}

bool ResponseRelay::body_done() const {
  switch (framing_) {
    case ResponseFraming::none:
      return true;
    case ResponseFraming::until_close:
      return false;
    case ResponseFraming::content_length:
    case ResponseFraming::chunked:
      return decoder_->done();
  }
  return true;
}

base::Result<std::size_t, HttpError> ResponseRelay::body(std::span<const std::uint8_t> in, std::string& out) {
  if (framing_ == ResponseFraming::none) return std::size_t{0};
  if (framing_ == ResponseFraming::until_close) {
    scrubber_.feed(chars_of(in), out);
    return in.size();
  }
  const bool chunked = framing_ == ResponseFraming::chunked;
  std::string& payload_out = chunked ? run_ : out;
  run_.clear();
  std::size_t used = 0;
  while (used < in.size() && !decoder_->done()) {
    auto step = decoder_->feed(in.subspan(used));
    if (!step.ok()) {
      if (chunked) append_chunk(base::as_bytes(run_), out);  // what came before the bad byte
      return base::Err{step.error()};
    }
    used += step->consumed;
    if (!step->payload.empty()) scrubber_.feed(chars_of(step->payload), payload_out);
  }
  if (decoder_->done()) scrubber_.finish(payload_out);
  if (chunked) {
    append_chunk(base::as_bytes(run_), out);
    if (decoder_->done()) append_last_chunk(out);
  }
  return used;
}

void ResponseRelay::end_of_stream(std::string& out) {
  // Any other body was cut by the close: nothing more (no fake end).
  if (framing_ == ResponseFraming::until_close && !tunnel_is_websocket_) scrubber_.finish(out);
}

void ResponseRelay::begin_tunnel(bool websocket) {
  begin_body(ResponseFraming::until_close, 0);
  tunnel_is_websocket_ = websocket;
  if (websocket) websocket_.start(key_);
}

base::Result<std::size_t, std::string_view> ResponseRelay::tunnel(std::span<const std::uint8_t> in,
                                                                  std::string& out) {
  if (!tunnel_is_websocket_) {
    scrubber_.feed(chars_of(in), out);
    return in.size();
  }
  auto used = websocket_.feed(in, out);
  if (!used.ok()) return base::Err{to_string(used.error())};
  return *used;
}

}  // namespace abox::broker
