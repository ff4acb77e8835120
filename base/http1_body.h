// BodyDecoder: the body of one HTTP/1 message, framed as its head says,
// decoded incrementally as bytes arrive in pieces. Sans-I/O.
//
// Two users: the broker, which forwards what it decodes (request bodies from
// the guest, response bodies from providers), and abox-net's request
// follower (netstack/stack/http_request_follower.h), which only needs to know where
// each body ends so that it can read the next request's head.
//
// The broker forwards the body as it arrives: each payload piece the decoder
// returns is sent upstream at once (re-framed by the broker: as a chunk when
// the guest sent chunked, see append_chunk(), or as is under the same
// Content-Length). The decoder never copies: a piece is a view into the
// input of that call.
//
// Use:
//   BodyDecoder body(head.framing(), head.content_length(), limits);
//   while (!in.empty() && !body.done()) {
//     auto step = body.feed(in);                 // error: 400 and close
//     forward(step->payload);                    // may be empty (framing bytes)
//     in = in.subspan(step->consumed);
//   }
//   // body.done(): bytes left in `in` belong to the next request.
//
// Chunked (RFC 9112 section 7.1), strictly: chunk-size is 1..16 hex digits
// with no leading whitespace and no overflow past 2^64-1; an optional
// extension (";" ...) of at most kMaxChunkExtensionBytes with no control byte
// but HTAB; then CRLF (a bare LF or lone CR is chunk_size / chunk_extension's
// line_ending case: refused). Data is followed by exactly CRLF. The last
// chunk ("0") is followed by CRLF alone unless BodyLimits allows trailer
// fields (RFC 9112 section 7.1.2; the broker allows them in upstream
// responses only): then each is token ":" value CRLF (no obs-fold, no
// control byte but HTAB, no bare LF or lone CR), at most
// max_trailer_fields of them in at most max_trailer_bytes (CRLFs included),
// and the empty line ends the body. Trailer fields are checked, never kept:
// a step whose bytes are trailer fields says so (BodyStep::trailer), and
// they carry no payload: the broker's response relay, which frames the
// payload again for the guest, forwards none (broker/response_relay.h says why).
// Content-Length: exactly that many bytes, then done.
// Both: the sum of payload bytes is at most BodyLimits::max_body_bytes (the
// policy's http_body_bytes); a Content-Length above it is refused before any
// byte is read, by the constructor's check (see error()).
//
// Invariants: feed() on a non-empty input before done() consumes at least
// one byte or fails; after done() or an error it consumes nothing. Once it
// fails it keeps failing with the same error. No allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/http1_syntax.h"
#include "base/result.h"

namespace abox::base::http1 {

inline constexpr std::size_t kMaxChunkExtensionBytes = 256;

struct BodyLimits {
  std::uint64_t max_body_bytes = 32u << 20;
  // Trailer fields after a chunked body; 0 fields: refused (Error::trailer).
  std::size_t max_trailer_fields = 0;
  std::size_t max_trailer_bytes = 0;
};

struct BodyStep {
  std::size_t consumed = 0;               // bytes of the input used by this call
  std::span<const std::uint8_t> payload;  // body bytes to forward (a view into the input)
  // The consumed bytes are trailer fields (all of them, or none: a call
  // stops where trailer bytes begin or end), checked and not to be passed on.
  bool trailer = false;
};

class BodyDecoder {
 public:
  BodyDecoder(BodyFraming framing, std::uint64_t content_length, const BodyLimits& limits);

  // Reads from the front of `in`: at most one contiguous payload piece.
  [[nodiscard]] base::Result<BodyStep, Error> feed(std::span<const std::uint8_t> in);

  bool done() const;
  // Error::none unless the body is refused (including a Content-Length
  // over the limit, known at construction: check it before sending the head).
  Error error() const { return error_; }
  std::uint64_t payload_bytes() const { return payload_bytes_; }
  // Trailer fields read so far (checked; the caller drops their bytes).
  std::size_t trailer_fields() const { return trailer_fields_; }

 private:
  enum class State : std::uint8_t {
    length_body,    // Content-Length bytes remain
    size_line,      // reading hex digits of a chunk size
    extension,      // after ';' up to CR
    size_lf,        // saw CR after the size line
    data,           // chunk data remains
    data_cr,        // expecting CR after data
    data_lf,        // expecting LF after data
    last_cr,        // after "0...CRLF" or a trailer field: the final CR, or a trailer field
    last_lf,        // expecting the final LF
    trailer_name,   // in a trailer field's name, up to ':'
    trailer_value,  // in its value, up to CR
    trailer_lf,     // expecting the LF that ends it
    done,
    failed,
  };
  base::Result<BodyStep, Error> fail(Error e);

  State state_;
  std::uint64_t remaining_ = 0;  // of the current Content-Length body or chunk
  std::uint64_t chunk_size_ = 0;
  std::size_t size_digits_ = 0;
  std::size_t extension_bytes_ = 0;
  std::uint64_t payload_bytes_ = 0;
  std::uint64_t max_body_bytes_;
  std::size_t max_trailer_fields_;
  std::size_t max_trailer_bytes_;
  std::size_t trailer_fields_ = 0;
  std::size_t trailer_bytes_ = 0;
  Error error_ = Error::none;
};

// Appends "<hex size>\r\n" + data + "\r\n" (one chunk; nothing for empty data).
void append_chunk(std::span<const std::uint8_t> data, std::string& out);
// Appends the last chunk "0\r\n\r\n".
void append_last_chunk(std::string& out);

}  // namespace abox::base::http1
