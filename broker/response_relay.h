// ResponseRelay: one provider response on its way to the guest, scrubbed as
// the guest's client will decode it. Sans-I/O.
//
// Why it decodes first: a client does not read the bytes on the wire, it
// reads a head's fields and a body with its framing taken off. A provider
// that echoes the key in a chunked body may put a chunk-size line inside it
// ("sk-...6c54\r\n1d\r\n62ac..."): the framed bytes never hold the key, the
// decoded body does. So the scrubber (key_scrubber.h) is fed what the client
// decodes, and the body is framed again, by the broker, for the guest:
//   - a head (interim or final): scrubbed as one text, on its own (a client
//     reads the head apart from the body; nothing is held across);
//   - Content-Length: the payload, scrubbed as one stream; the mask keeps
//     lengths, so the head's Content-Length stays right;
//   - chunked: decoded (BodyDecoder: strict and bounded; chunk extensions
//     and trailer fields are checked and dropped), the payload scrubbed as
//     one stream across every chunk boundary and read split, and what the
//     scrubber lets out of one call written as one chunk of the broker's
//     own; the body ends "0\r\n\r\n" (no extension, no trailer);
//   - until the provider closes: the bytes are the payload; end_of_stream()
//     lets the held tail out at the close;
//   - after a 101 (tunnel()): WebSocket frames are decoded and each message
//     scrubbed across its fragments (websocket_relay.h); any other
//     protocol's bytes are scrubbed as one stream.
// The scrubber holds back only a tail that could still begin the key (an
// SSE event ends "\n\n", which begins no key), so streaming is not delayed.
//
// Invariant: for any input and any split into calls, what the relay wrote
// decodes (with any HTTP/1.1 client's reading) to the provider's payload with
// every key occurrence masked, and never holds the key
// (fuzz/response_relay_fuzz.cc checks it for random chunkings, extensions,
// trailers and read splits). A body whose framing is broken is an error at
// the first bad byte; what was written before it decodes to a prefix of the
// payload, scrubbed the same way.
//
// Use, per request (the broker's connection_upstream.cc):
//   relay.start(key);
//   relay.head(interim_head, out);         // each 1xx the guest gets
//   relay.head(final_head, out);           // as the guest gets it
//   relay.begin_body(head.framing, head.content_length);
//   while (!relay.body_done()) {           // as provider bytes arrive
//     auto used = relay.body(in, out);     // error: cut the exchange
//     in = in.subspan(*used);
//   }
//   relay.end_of_stream(out);              // the provider closed
// A 101 is followed by begin_body(ResponseFraming::until_close, 0).
// Cost: one copy of each payload byte into `out` (two for chunked, through a
// reused buffer), the scrubber's search, and the decoder's byte-wise look at
// framing bytes only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "broker/body_decoder.h"
#include "broker/http_request.h"
#include "broker/key_scrubber.h"
#include "broker/response_head.h"
#include "broker/websocket_relay.h"

namespace abox::broker {

class ResponseRelay {
 public:
  // A new request: the key its responses must not carry (empty: none).
  void start(std::string_view key);

  // A head, whole (status line through the empty line), as the guest gets it.
  void head(std::string_view head, std::string& out);

  // After the final head: how its body ends.
  void begin_body(ResponseFraming framing, std::uint64_t content_length);
  // Provider body bytes from the front of `in`: appends what the guest gets
  // to `out` and returns how many bytes it used (all of `in`, or up to the
  // body's end: the rest is not this body's). A framing error: the exchange
  // is cut (what `out` got before stays valid).
  [[nodiscard]] base::Result<std::size_t, HttpError> body(std::span<const std::uint8_t> in, std::string& out);
  bool body_done() const;
  // The provider's stream ended. A body that ends at the close (until_close,
  // a byte-stream tunnel) is complete: the scrubber's held tail (which
  // cannot be the key any more) goes out. Any other body was cut: nothing is
  // written (nor the rest of a WebSocket message, which a client drops).
  void end_of_stream(std::string& out);

  // After a 101: the tunnel's bytes from the provider. A WebSocket tunnel
  // ("Upgrade: websocket") is decoded frame by frame and its messages
  // scrubbed across fragments (websocket_relay.h); any other is a byte
  // stream, scrubbed as one. An error says why the tunnel must be cut.
  void begin_tunnel(bool websocket);
  [[nodiscard]] base::Result<std::size_t, std::string_view> tunnel(std::span<const std::uint8_t> in,
                                                                   std::string& out);

  std::uint64_t scrubbed() const { return scrubber_.scrubbed() + websocket_.scrubbed(); }
  // Trailer fields of a chunked body, checked and dropped.
  std::size_t trailer_fields() const { return decoder_ ? decoder_->trailer_fields() : 0; }

 private:
  KeyScrubber scrubber_;
  std::string_view key_;
  bool tunnel_is_websocket_ = false;
  WebSocketRelay websocket_;
  ResponseFraming framing_ = ResponseFraming::none;
  std::optional<BodyDecoder> decoder_;
  std::string run_;  // chunked: one call's scrubbed payload, before its chunk-size line
};

}  // namespace abox::broker
