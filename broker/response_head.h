// The head of an upstream (provider) response: what the broker needs to
// stream it back and count it. Sans-I/O.
//
// Provider bytes are not ours either, so the parse is strict and bounded:
//   - "HTTP/1.1" or "HTTP/1.0", SP, three digits (100-599), SP, a reason of
//     printable bytes / HTAB, CRLF; every line ends in CRLF;
//   - header lines token ":" OWS value OWS, no obs-fold, no control byte but
//     HTAB; at most kMaxResponseHeadBytes for the whole head and
//     kMaxResponseFields fields;
//   - Content-Length: digits, and every copy equal; Transfer-Encoding
//     exactly "chunked", once (another transfer coding is refused: the
//     broker never offers one, and the guest's client would undo it after
//     the scrubber saw coded bytes); both together is refused (a smuggling
//     shape on the way back);
//   - Content-Encoding other than "identity", or any Sec-WebSocket-Extensions
//     (permessage-deflate), sets content_coded (the broker asks for neither
//     and refuses a coded body or tunnel: a key inside deflate is out of the
//     scrubber's sight, not the guest's).
// It extracts the status, how the body ends (length, chunked, at close, or
// none for 1xx/204/304 and HEAD requests), Retry-After as sent (for
// accounting), whether the server closes after this response, and whether
// the body has a content coding.
//
// parse_response_head() is monotone like the request parser: a prefix that
// decides keeps deciding the same way. Every read goes through ByteReader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::broker {

inline constexpr std::size_t kMaxResponseHeadBytes = 65536;
inline constexpr std::size_t kMaxResponseFields = 256;

enum class ResponseError : std::uint8_t {
  head_too_large,
  too_many_fields,
  line_ending,
  control_byte,
  status_line,
  field_syntax,
  content_length,     // not digits, too large, or two different values
  transfer_encoding,  // not exactly one "chunked"
  length_and_chunked,
};
std::string_view to_string(ResponseError e);

enum class ResponseFraming : std::uint8_t { none, content_length, chunked, until_close };

struct ResponseHead {
  int status = 0;
  ResponseFraming framing = ResponseFraming::until_close;
  std::uint64_t content_length = 0;
  std::string retry_after;  // as sent (at most 64 bytes kept), empty when absent
  bool connection_close = false;
  bool http10 = false;
  bool content_coded = false;  // a Content-Encoding other than identity, or a WebSocket extension
  bool websocket = false;      // "Upgrade: websocket" (a 101's tunnel is WebSocket frames)
  std::size_t head_bytes = 0;  // status line through the empty line
};

enum class ResponseHeadStatus : std::uint8_t { need_more, complete };

// `request_was_head`: the request was HEAD, so the response has no body.
[[nodiscard]] base::Result<ResponseHeadStatus, ResponseError> parse_response_head(
    std::span<const std::uint8_t> received, bool request_was_head, ResponseHead& head);

// The head as the guest gets it: the provider's head with its own
// connection-level headers (connection, keep-alive, proxy-connection) taken
// out, since the provider's connection is the broker's, and Trailer (the
// broker drops trailer fields: response_relay.h), plus
// "Connection: close" when the broker closes the guest's connection after
// this response. `raw` must be a head parse_response_head() completed
// (head_bytes long): its lines are known to be well formed. Appends to out.
void write_guest_response_head(std::string_view raw, bool close, std::string& out);

}  // namespace abox::broker
