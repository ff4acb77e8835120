// HTTP/1.1 syntax rules (RFC 9112, RFC 9110 section 5), read the strictest
// way, in one place for every reader of HTTP/1 bytes from a peer we do not
// trust: the broker's request parser (broker/http_request.h) and abox-net's
// name peek and request follower (netstack/stack/name_peek.h,
// netstack/stack/http_request_follower.h). Whatever one of them refuses, the
// others refuse for the same reason; none has its own copy of these rules.
// Sans-I/O, std only, no allocation, every read through base::ByteReader.
//
// The rules:
//   - A line ends in CRLF. A bare LF, or a CR not followed by LF, is
//     line_ending; a control byte other than HTAB (DEL included) is
//     control_byte, refused as soon as it is seen.
//   - A header line is token ":" OWS value OWS: no whitespace before the
//     colon, no line that starts with SP or HTAB (obs-fold).
//   - Content-Length is decimal digits only, one value (a list is
//     duplicate_content_length), at most 2^63-1.
//   - Transfer-Encoding is exactly "chunked" (ASCII case-insensitive, OWS
//     trimmed); every other coding or list is refused by the head readers.
//   - Tokens compare ASCII case-insensitively (iequals); lists split on ","
//     with OWS trimmed (lists_token).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/byte_reader.h"
#include "base/result.h"

namespace abox::base::http1 {

// Why HTTP/1 bytes are refused, by any of our readers. Each has a stable
// snake_case name (to_string: the broker's 400 reason header, event reasons)
// and a sentence (describe).
enum class Error : std::uint8_t {
  none,
  // head
  head_too_large,            // no complete head within the reader's limit
  too_many_fields,           // more header fields than the reader's limit
  line_ending,               // a bare LF, or a CR not followed by LF
  control_byte,              // a control byte other than HTAB (or a non-ASCII byte outside a value)
  request_line,              // not METHOD SP target SP version
  method,                    // the method is not a token
  version,                   // not a version the reader accepts (HTTP/1.1; HTTP/1.0 where allowed)
  connect_method,            // CONNECT (a proxy tunnel)
  trace_method,              // TRACE (reflects headers back)
  absolute_form,             // "scheme://..." target: a proxy request
  authority_form,            // "host:port" target: a proxy request
  asterisk_form,             // "*" target with a method other than OPTIONS
  target_syntax,             // a byte or percent-escape not allowed in origin-form
  path_dot_segment,          // "." or ".." segment in the path
  path_encoded_separator,    // "%2e", "%2f" or "%5c" in the path
  obs_fold,                  // a header line starts with whitespace
  field_syntax,              // a header line is not token ":" value (or space before the colon)
  missing_host,              // no Host header
  duplicate_host,            // more than one Host header
  content_length_value,      // Content-Length is not digits, or is too large
  duplicate_content_length,  // Content-Length appears twice, or holds a list
  transfer_encoding,         // Transfer-Encoding is not exactly "chunked", appears twice, or is in HTTP/1.0
  length_and_chunked,        // both Content-Length and Transfer-Encoding
  // body (BodyDecoder, base/http1_body.h)
  body_too_large,   // more payload than the reader's limit
  chunk_size,       // a chunk size is empty, not hex, or overflows
  chunk_extension,  // a chunk extension is too long or holds a control byte
  chunk_crlf,       // a chunk's data is not followed by CRLF
  trailer,          // trailer fields after the last chunk where none are allowed
  // trailer fields where they are allowed (BodyLimits)
  trailer_syntax,     // a trailer line is not token ":" value CRLF (bare LF, control byte, obs-fold)
  trailer_too_large,  // more trailer fields, or trailer bytes, than the limits
};

std::string_view to_string(Error e);  // "duplicate_content_length"
std::string_view describe(Error e);   // "Content-Length appears twice or holds a list"

enum class BodyFraming : std::uint8_t {
  none,            // no Content-Length and no Transfer-Encoding: an empty body
  content_length,  // that many bytes
  chunked,         // Transfer-Encoding: chunked
};

// One header field as sent: views into the caller's buffer. `name` is as the
// peer spelled it (compare with iequals); `value` has OWS trimmed.
struct HeaderField {
  std::string_view name;
  std::string_view value;
};

// ---- byte classes (one table load each) -------------------------------------

// RFC 9110 section 5.6.2.
bool is_tchar(std::uint8_t c);
// A control byte other than HTAB, or DEL.
bool is_control(std::uint8_t c);
inline bool is_ows(char c) {
  return c == ' ' || c == '\t';
}
inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
inline bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// RFC 3986: unreserved / sub-delims / ":" / "@" (pchar without pct-encoded),
// plus "/" and "?", which origin-form allows around its segments.
bool is_target_char(char c);

// ---- text ------------------------------------------------------------------------

inline std::string_view as_text(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}
// ASCII case-insensitive equality, for header names and tokens.
bool iequals(std::string_view a, std::string_view b);
bool is_token(std::string_view s);
// OWS stripped from both ends.
std::string_view trim_ows(std::string_view s);
// Does the comma-separated list hold `token` (ASCII case-insensitively, OWS
// around each item ignored)?
bool lists_token(std::string_view list, std::string_view token);

// ---- lines and fields -------------------------------------------------------------

enum class LineStatus : std::uint8_t { line, need_more, error };

struct Line {
  LineStatus status = LineStatus::need_more;
  std::span<const std::uint8_t> text;  // without its CRLF
  Error error = Error::none;           // line_ending or control_byte
};

// The next CRLF-terminated line at the reader's cursor; the cursor moves past
// the CRLF only when a whole line is returned. Checks every byte it passes:
// LF only after CR, CR only before LF, no control byte but HTAB.
Line next_line(ByteReader& r);

// A header line (non-empty, control bytes already refused by next_line):
// token ":" OWS value OWS. obs_fold or field_syntax.
Error parse_field(std::string_view line, HeaderField& out);

// A Content-Length value: decimal digits, one value, at most 2^63-1.
Result<std::uint64_t, Error> parse_content_length(std::string_view value);

}  // namespace abox::base::http1
