// WebSocketRelay: the provider's half of a WebSocket tunnel (after a 101
// with "Upgrade: websocket"), decoded, scrubbed of the key as the guest's
// client will read it, and framed again. Sans-I/O.
//
// Why: a client reads messages, not frames. A provider may fragment a
// message (RFC 6455 5.4) with a frame header inside an echoed key, which
// the bytes on the wire then never hold whole; so the payload of a message
// is scrubbed as one stream across its fragments and every read split, and
// the broker writes the frames the guest gets:
//   - a data message (text or binary, then continuations) goes out as one or
//     more frames of the broker's own making: the first with the message's
//     opcode, the rest continuations, FIN on the last (what the scrubber
//     holds back of a fragment goes out with the next one, or at FIN);
//   - a control frame (close, ping, pong; at most 125 bytes, never
//     fragmented) goes out as it came, its payload scrubbed whole, by a
//     scrubber of its own (one may come between two fragments of a
//     message).
// Lengths are kept by the mask, so a text message stays valid UTF-8.
//
// What a provider frame must be (else an error, and the tunnel is cut): no
// RSV bit (the broker never lets an extension be negotiated), not masked
// (RFC 6455 5.1: a server never masks), a known opcode, a control frame
// with FIN and at most 125 bytes, a 64-bit length with its top bit clear, a
// continuation only inside a message and a new data message only outside
// one. The relay keeps a few integers and the header of the frame in
// progress; nothing grows with a frame's length but the output.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "broker/key_scrubber.h"

namespace abox::broker {

enum class WebSocketError : std::uint8_t {
  reserved_bits,       // RSV1-3 set: an extension nobody negotiated
  masked,              // a masked frame from the server
  opcode,              // a reserved opcode
  control_frame,       // a control frame fragmented or over 125 bytes
  length,              // a 64-bit length with the top bit set
  continuation,        // a continuation outside a message
  message_in_message,  // a new text or binary frame inside an unfinished message
};
std::string_view to_string(WebSocketError e);

class WebSocketRelay {
 public:
  // A new tunnel; `key` must outlive the relay's use (the credentials own it).
  void start(std::string_view key);
  // Provider bytes: appends what the guest gets to `out`. Uses all of `in`
  // unless it fails; once it fails it keeps failing.
  [[nodiscard]] base::Result<std::size_t, WebSocketError> feed(std::span<const std::uint8_t> in,
                                                               std::string& out);
  std::uint64_t scrubbed() const { return data_scrubber_.scrubbed() + control_scrubber_.scrubbed(); }

 private:
  base::Result<std::size_t, WebSocketError> fail(WebSocketError e);
  // The header in header_ is complete: check it and start the payload.
  base::Result<void, WebSocketError> begin_frame();
  void end_frame(std::string& out);
  void emit_data(bool fin, std::string& out);

  KeyScrubber data_scrubber_;
  KeyScrubber control_scrubber_;
  std::array<std::uint8_t, 14> header_{};
  std::size_t header_have_ = 0;
  std::size_t header_need_ = 2;
  bool in_payload_ = false;
  std::uint64_t remaining_ = 0;
  std::uint8_t opcode_ = 0;
  bool fin_ = false;
  bool in_message_ = false;  // a data message began and has not ended
  std::uint8_t message_opcode_ = 0;
  bool message_started_out_ = false;  // a frame of this message went to the guest
  std::string run_;                   // scrubbed payload of the data frame in progress
  std::string control_;               // the control frame's payload (at most 125 bytes)
  bool failed_ = false;
  WebSocketError error_ = WebSocketError::opcode;
};

// Appends one unmasked frame (minimal length encoding).
void append_websocket_frame(bool fin, std::uint8_t opcode, std::string_view payload, std::string& out);

}  // namespace abox::broker
