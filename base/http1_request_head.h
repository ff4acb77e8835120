// An HTTP/1 request head from a peer we do not trust, read strictly. Sans-I/O.
//
// The one head reader of the code base: the broker parses every request a
// guest sends it with it (broker/http_request.h), and abox-net reads with it
// the first request of a name-checked plain-HTTP flow (netstack/stack/name_peek.h)
// and every request after it (netstack/stack/http_request_follower.h). The callers
// differ only in the RequestRules they pass.
//
// What a head must be (RFC 9112, strictest reading; base/http1_syntax.h has
// the line and field rules):
//   - "METHOD SP request-target SP HTTP/1.1" CRLF (HTTP/1.0 too where
//     rules.http_1_0). The method is a token; CONNECT is refused in any
//     spelling, TRACE too unless rules.trace.
//   - The target is origin-form ("/..."), or "*" with OPTIONS only.
//     Absolute-form ("https://...") and authority-form ("host:port") are
//     refused: a server reads the host from them and ignores Host. With
//     TargetRules::strict the origin-form is "/" then pchar, "/", and one
//     optional "?" query of pchar, "/", "?" (RFC 3986); "%" only as "%XX";
//     no "//" at the start; the path part (up to "?") holds no dot segment
//     ("." or "..", also with ";params" after it) and no "%2e", "%2f" or
//     "%5c" in any case, so that a path prefix check means what it says.
//     With TargetRules::visible it is "/" then any visible ASCII.
//   - Header lines as http1_syntax.h says. Exactly one Host. Content-Length:
//     one header with one value (a repeat, even an equal one, is refused).
//     Transfer-Encoding: one header, exactly "chunked"; none at all in
//     HTTP/1.0 (RFC 9112 section 6.1: its framing would be faulty). Both
//     Content-Length and Transfer-Encoding: refused.
//   - Upgrade: an "Upgrade" header or an "upgrade" token in Connection sets
//     wants_upgrade; `upgrade` is the first Upgrade value, `upgrade_fields`
//     how many there were. Whether to allow it is the caller's decision.
//   - The whole head, request line to the empty line, is at most
//     rules.max_head_bytes, with at most rules.max_fields header fields.
//
// Invariants:
//   - Monotone: once a prefix decides (complete or an error), every longer
//     input decides the same. Checks are made in stream order as each line's
//     CRLF arrives; only need_more depends on where the input ends, and
//     need_more with max_head_bytes in hand is head_too_large.
//   - On complete, every string_view in the RequestHead (and in `fields`)
//     points into `received`: the caller keeps it unchanged while it uses
//     them. head_bytes bytes were the head; the body (or the next request)
//     starts right after.
//   - No allocation, no exception. Each call reads the prefix again, up to
//     max_head_bytes: O(limit) time. Every read goes through
//     base::ByteReader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/http1_syntax.h"
#include "base/result.h"

namespace abox::base::http1 {

enum class TargetRules : std::uint8_t {
  strict,   // RFC 3986 pchar, no dot segments or encoded separators (the broker's path checks need it)
  visible,  // any visible ASCII after "/" (a server's own reading decides nothing we check)
};

struct RequestRules {
  std::size_t max_head_bytes = 16384;
  std::size_t max_fields = 100;
  bool http_1_0 = false;  // accept HTTP/1.0 as well as HTTP/1.1
  bool trace = false;     // accept TRACE
  TargetRules target = TargetRules::strict;
};

struct RequestHead {
  std::string_view method;
  std::string_view target;   // as sent: path plus "?query" if any
  std::string_view path;     // the target up to "?"
  std::string_view host;     // the one Host value, OWS trimmed (may carry ":port")
  std::string_view upgrade;  // the first Upgrade value, OWS trimmed; empty if none
  std::uint8_t minor_version = 1;
  BodyFraming framing = BodyFraming::none;
  std::uint64_t content_length = 0;  // 0 unless framing is content_length
  bool wants_upgrade = false;
  std::size_t upgrade_fields = 0;  // Upgrade header lines
  std::size_t field_count = 0;
  std::size_t head_bytes = 0;  // request line through the empty line
};

enum class HeadStatus : std::uint8_t { need_more, complete };

// Reads the head at the start of `received` (everything the peer sent on
// this request so far). complete: `head` is filled, and the first
// head.field_count fields are in `fields` if it is not empty (then at most
// fields.size() fields are accepted, whatever rules.max_fields says).
// need_more: call again with more bytes; `head` is unspecified.
[[nodiscard]] Result<HeadStatus, Error> read_request_head(std::span<const std::uint8_t> received,
                                                          const RequestRules& rules, RequestHead& head,
                                                          std::span<HeaderField> fields = {});

}  // namespace abox::base::http1
