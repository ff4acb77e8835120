// HTTP/1.1 request heads from the guest, parsed strictly. Sans-I/O.
//
// The broker accumulates what the guest sent on a TLS connection and calls
// parse_request_head() each time more arrives, until it is complete or
// refused. A refused head is answered 400 with to_string(error) as the
// reason and the connection is closed; the upstream sees nothing.
//
// What a head must be (RFC 9112, strictest reading, plus our own rules):
//   - "METHOD SP request-target SP HTTP/1.1" CRLF; HTTP/1.0 and every other
//     version are refused. The method is a token; CONNECT and TRACE are
//     refused by the parser whatever the binding says.
//   - The target is origin-form: "/" then pchar, "/", and one optional "?"
//     query of pchar, "/", "?" (RFC 3986); "%" only as "%XX" with hex
//     digits. Absolute-form ("https://...") and authority-form ("host:port")
//     are refused, and "*" (asterisk-form) only with OPTIONS. The path part
//     (up to "?") holds no dot segment ("." or "..", also with ";params"
//     after it, which some servers strip), and no "%2e", "%2f" or
//     "%5c" in any case, so that a path prefix check means what it says.
//   - Every line ends in CRLF: a bare LF or a CR not followed by LF is
//     refused. No control byte but HTAB anywhere in the head (DEL included);
//     bytes >= 0x80 only inside header values (obs-text).
//   - Header lines are token ":" OWS value OWS. No whitespace before the
//     colon; no line starts with SP or HTAB (obs-fold).
//   - Exactly one Host. Content-Length: digits only, one header with one
//     value (a repeat, even an equal one, is refused), at most 2^63-1.
//     Transfer-Encoding: one header whose value is exactly "chunked" (ASCII
//     case-insensitive, OWS trimmed); any other coding or list is refused.
//     Both Content-Length and Transfer-Encoding: refused.
//   - Upgrade: an "Upgrade" header or an "upgrade" token in Connection sets
//     wants_upgrade(); the gate refuses it unless the binding allows it.
//   - The whole head, request line to the empty line, is at most
//     HeadLimits::max_head_bytes (the policy's http_head_bytes), with at most
//     HeadLimits::max_fields header fields (never more than kMaxHeaderFields).
//
// Invariants:
//   - Monotone: once a prefix decides (complete or an error), every longer
//     input decides the same. Checks are made in stream order as each line's
//     CRLF arrives; only need_more depends on where the input ends.
//   - On complete, every string_view in the RequestHead points into the
//     `received` buffer passed to the call: the caller keeps that buffer
//     unchanged while it uses the head. head_bytes() bytes were the head;
//     the body (or the next request) starts right after.
//   - No allocation, no exception. Each call reads the prefix again, up to
//     max_head_bytes: O(limit) time. Every read goes through base::ByteReader.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/result.h"
#include "policy/policy.h"

namespace abox::broker {

// The most header fields a RequestHead can hold (the array is inline).
inline constexpr std::size_t kMaxHeaderFields = 128;

struct HeadLimits {
  std::size_t max_head_bytes = 16384;
  std::size_t max_fields = 100;  // clamped to kMaxHeaderFields

  static HeadLimits from(const policy::Limits& limits);
};

// Why a request (head or body) is refused. Each has a stable snake_case name
// (to_string: the 400's reason header and the event's reason) and a sentence
// (describe).
enum class HttpError : std::uint8_t {
  none,
  // head
  head_too_large,            // no complete head within max_head_bytes
  too_many_fields,           // more header fields than max_fields
  line_ending,               // a bare LF, or a CR not followed by LF
  control_byte,              // a control byte other than HTAB (or a non-ASCII byte outside a value)
  request_line,              // not METHOD SP target SP version
  method,                    // the method is not a token
  version,                   // not HTTP/1.1
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
  transfer_encoding,         // Transfer-Encoding is not exactly "chunked", or appears twice
  length_and_chunked,        // both Content-Length and Transfer-Encoding
  // body (BodyDecoder, body_decoder.h)
  body_too_large,   // more payload than the policy's http_body_bytes
  chunk_size,       // a chunk size is empty, not hex, or overflows
  chunk_extension,  // a chunk extension is too long or holds a control byte
  chunk_crlf,       // a chunk's data is not followed by CRLF
  trailer,          // trailer fields after the last chunk (refused: the guest's requests)
  // trailer fields where they are allowed (upstream responses, BodyLimits)
  trailer_syntax,     // a trailer line is not token ":" value CRLF (bare LF, control byte, obs-fold)
  trailer_too_large,  // more trailer fields, or trailer bytes, than the limits
};

std::string_view to_string(HttpError e);  // "duplicate_content_length"
std::string_view describe(HttpError e);   // "Content-Length appears twice"

enum class BodyFraming : std::uint8_t {
  none,            // no Content-Length and no Transfer-Encoding: an empty body
  content_length,  // content_length() bytes
  chunked,         // Transfer-Encoding: chunked
};

// One header field as sent: views into the caller's buffer. `name` is as the
// guest spelled it (compare with iequals); `value` has OWS trimmed.
struct HeaderField {
  std::string_view name;
  std::string_view value;
};

// ASCII case-insensitive equality, for header names and tokens.
bool iequals(std::string_view a, std::string_view b);

// A complete, validated request head. Filled only by parse_request_head().
class RequestHead {
 public:
  std::string_view method() const { return method_; }
  std::string_view target() const { return target_; }  // as sent: path plus "?query" if any
  std::string_view path() const { return path_; }      // the target up to "?"
  std::string_view host() const { return host_; }      // the one Host value, OWS trimmed (may carry ":port")
  std::span<const HeaderField> fields() const { return {fields_.data(), field_count_}; }
  BodyFraming framing() const { return framing_; }
  std::uint64_t content_length() const { return content_length_; }  // 0 unless framing is content_length
  bool wants_upgrade() const { return wants_upgrade_; }
  std::size_t head_bytes() const { return head_bytes_; }  // request line through the empty line

  // The first field named `name` (ASCII case-insensitive), or nullptr.
  const HeaderField* find(std::string_view name) const;
  std::size_t count(std::string_view name) const;

 private:
  friend struct RequestHeadBuilder;
  std::string_view method_, target_, path_, host_;
  std::array<HeaderField, kMaxHeaderFields> fields_{};
  std::size_t field_count_ = 0;
  BodyFraming framing_ = BodyFraming::none;
  std::uint64_t content_length_ = 0;
  bool wants_upgrade_ = false;
  std::size_t head_bytes_ = 0;
};

enum class HeadStatus : std::uint8_t { need_more, complete };

// Parses the head at the start of `received` (everything the guest sent on
// this request so far). complete: `head` is filled (views into `received`).
// need_more: call again with more bytes; `head` is unspecified. An error:
// refuse with 400 and close.
[[nodiscard]] base::Result<HeadStatus, HttpError> parse_request_head(std::span<const std::uint8_t> received,
                                                                     const HeadLimits& limits,
                                                                     RequestHead& head);

}  // namespace abox::broker
