// Name peek: which name does a guest's TCP flow say it is for? Sans-I/O.
//
// On ports where the policy asks for it (443 and 80 by default), admission
// holds a new flow's first bytes and calls peek_name() each time more arrive,
// until it decides. The name found must be one of the names the flow's
// address was answered for; the peek never admits on its own.
//
// Input: every byte the guest has sent on the flow so far, from the first,
// however the TCP segments split it (the caller accumulates), and `limit`,
// the policy's peek_bytes. Only the first `limit` bytes are ever looked at.
//
// The first byte picks the protocol:
//   0x16            a TLS handshake record: the ClientHello's server_name.
//   'A'..'Z'        an HTTP/1 request if the method ([A-Z][A-Z_-]*) is
//                   followed by a space: its Host header.
//   anything else   no_name (SSH, SSLv2-style hellos, lower-case junk, ...).
//
// TLS (RFC 8446, RFC 5246, RFC 6066). Records of type 22 with version
// 0x0301..0x0304 and a length of 1..2^14, which together carry one
// handshake message: a ClientHello (the record boundaries may fall anywhere,
// headers included). Its legacy_version is 0x0301..0x0304, the session id at
// most 32 bytes, the cipher suites an even number of at least 2 bytes, at
// least one compression method, and the extensions, when present, fill the
// rest of the message exactly, with no extension type twice. A server_name
// extension holds exactly one entry, of type host_name, whose name has a
// canonical form (policy::CanonicalName: case folded, one trailing dot
// dropped) and does not end in a number (an IP literal: RFC 6066 forbids
// them). An extension of kEncryptedHelloExtensions (ECH or ESNI, under any
// code point they were deployed with) makes it tls_ech. A bad server_name is
// malformed even next to ECH. Bytes after the ClientHello are not read.
//
// HTTP (RFC 9112): the first request head, read by the shared reader
// (base/http1_request_head.h) with http_request_rules(limit): HTTP/1.1 or
// HTTP/1.0, origin-form or "*" with OPTIONS (absolute-form, authority-form
// and CONNECT are malformed: a server would take the host from them, not
// from Host), any visible ASCII in the target, CRLF lines with no control
// byte but HTAB and no obs-fold, token ":" value fields (at most
// kMaxRequestFields), exactly one Host, a strict Content-Length or
// "chunked" (never both; no Transfer-Encoding in HTTP/1.0). The Host value
// is read by read_http_host(): host[:port] with OWS trimmed, the port, if
// any, 1..65535 in decimal and dropped; the host must have a canonical form
// and not end in a number; "[...]" IP literals are malformed too, since
// admission can only check names. "PRI * HTTP/2.0" (the HTTP/2 preface) is
// no_name. Nothing after the head is read: the request follower
// (http_request_follower.h) takes the flow from there.
//
// Invariants:
//   - Monotone: once a prefix of the flow decides (any status but need_more),
//     every longer input decides the same, name and error included. Each
//     check is made in stream order on bytes already seen, and nothing
//     depends on where the input happens to end except need_more.
//   - too_large: `limit` bytes are in and they decide nothing; or, early, a
//     ClientHello declares a length that cannot fit in `limit` bytes.
//   - `name` is non-empty only for tls_sni, http_host and tls_ech (and then
//     always canonical); `error` is PeekError::none unless status is
//     malformed.
//   - No allocation, no exception; stack use is bounded (one ClientHello
//     split across records is copied into a 64 KiB stack buffer). Each call
//     reads the whole prefix again: O(limit) time, no state kept.
//   - Every read of the input goes through base::ByteReader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/http1_request_head.h"
#include "policy/name.h"

namespace abox::netstack {

// The largest `limit` honoured; a larger one is treated as this (the policy
// caps peek_bytes at the same value).
inline constexpr std::size_t kMaxPeekLimit = 65536;

// Every extension type under which a ClientHello has carried an encrypted
// ClientHello or an encrypted server name, in a draft that was implemented
// and deployed or in the RFC. A ClientHello with any of them is tls_ech: a
// server that still speaks that draft would read the real name out of it,
// and the SNI we check would only be the public name. Each draft took the
// next value (the ECH drafts name it 0xfe00 + the draft's number from
// draft-08 on); the inner-only markers (ech_nonce 0xff03 and
// outer_extensions 0xff04 of draft-07, ech_is_inner 0xda09 of drafts 09-12,
// ech_outer_extensions 0xfd00) are not here: they belong to the encrypted
// inner hello and hide nothing in an outer one.
struct EncryptedHelloExtension {
  std::uint16_t type;
  std::string_view source;  // where the code point is defined, and who deployed it
};
inline constexpr EncryptedHelloExtension kEncryptedHelloExtensions[] = {
    {0xffce, "encrypted_server_name: ESNI, draft-ietf-tls-esni-00..05 (Firefox, Cloudflare 2018-2020)"},
    {0xff02, "encrypted_client_hello: draft-ietf-tls-esni-06 and -07"},
    {0xfe08, "encrypted_client_hello: draft-ietf-tls-esni-08 (NSS, Firefox)"},
    {0xfe09, "encrypted_client_hello: draft-ietf-tls-esni-09"},
    {0xfe0a, "encrypted_client_hello: draft-ietf-tls-esni-10 (NSS, BoringSSL, Cloudflare)"},
    {0xfe0b, "encrypted_client_hello: draft-ietf-tls-esni-11"},
    {0xfe0c, "encrypted_client_hello: draft-ietf-tls-esni-12"},
    {0xfe0d,
     "encrypted_client_hello: draft-ietf-tls-esni-13 to -25 and RFC 9849 (Chrome, Firefox, BoringSSL)"},
};

enum class PeekStatus : std::uint8_t {
  need_more,        // no decision yet: call again with more bytes
  tls_sni,          // a ClientHello naming `name`
  tls_ech,          // a ClientHello with an extension of kEncryptedHelloExtensions
                    // (ECH under any code point it was deployed with, or ESNI):
                    // the real destination is hidden. `name` is the outer SNI
                    // if any (the ECH public name, or a GREASE ECH client's
                    // real name), for logs and for a policy that chooses to
                    // trust it.
  tls_without_sni,  // a well-formed ClientHello without server_name
  http_host,        // an HTTP/1 request whose Host is `name`
  no_name,          // neither TLS nor HTTP/1 (or the HTTP/2 preface)
  malformed,        // claims TLS or HTTP/1 and breaks its rules: see `error`
  too_large,        // no decision within `limit` bytes
};

// Why a flow's first bytes are malformed. Each reads as a message.
enum class PeekError : std::uint8_t {
  none,
  tls_record_type,          // a record before the ClientHello's end is not a handshake record
  tls_record_version,       // a record's version is not 0x0301..0x0304
  tls_record_length,        // a record is empty or longer than 2^14 bytes
  tls_not_client_hello,     // the first handshake message is not a ClientHello
  tls_hello_version,        // the ClientHello's legacy_version is not 0x0301..0x0304
  tls_hello_syntax,         // a ClientHello field is out of range or overruns the message
  tls_duplicate_extension,  // an extension type appears twice
  tls_sni_syntax,           // server_name is not exactly one host_name entry
  tls_sni_name,             // the host_name has no canonical form
  tls_sni_ip_literal,       // the host_name is an IP address (RFC 6066 forbids it)
  http_request_line,        // the request line is not METHOD SP target SP version
  http_line_ending,         // a bare LF, or a CR not followed by LF
  http_control_byte,        // a control byte other than HTAB in the head
  http_version,             // the version is not HTTP/1.0 .. HTTP/1.9
  http_connect,             // a CONNECT (proxy tunnel) request
  http_request_target,      // not origin-form ("/...") or "*" for OPTIONS: a proxy request or junk
  http_obs_fold,            // a header line starts with whitespace (line folding)
  http_header_syntax,       // a header line is not token ":" value
  http_too_many_fields,     // more than kMaxRequestFields header fields
  http_framing,             // Content-Length or Transfer-Encoding invalid, or both
  http_missing_host,        // the header section has no Host
  http_duplicate_host,      // the header section has more than one Host
  http_host_value,          // the Host has no canonical form, or a bad port
  http_host_ip_literal,     // the Host is an IP address (dotted, numeric or "[...]")
};

struct PeekResult {
  PeekStatus status = PeekStatus::need_more;
  policy::CanonicalName name;  // see the invariants above
  PeekError error = PeekError::none;
};

// Peeks at `first_bytes` (the flow so far) for the name it is addressed to;
// `limit` is the policy's peek_bytes. Pure: the same input always gives the
// same result.
[[nodiscard]] PeekResult peek_name(std::span<const std::uint8_t> first_bytes, std::size_t limit);

inline bool decided(PeekStatus s) {
  return s != PeekStatus::need_more;
}

// How many header fields a request on a name-checked flow may have (the
// broker's default too). A real client sends a few dozen at most; the bound
// keeps the cost of reading a head that arrives a line at a time in check.
inline constexpr std::size_t kMaxRequestFields = 100;

// The shared head reader's rules for requests on a name-checked plain-HTTP
// flow, heads of at most `limit` bytes (capped at kMaxPeekLimit): the peek
// reads the first request with them, the follower every later one.
base::http1::RequestRules http_request_rules(std::size_t limit);

// A Host value (OWS trimmed): host[:port], as the header above says. Sets
// `out` and returns PeekError::none, or returns http_host_value or
// http_host_ip_literal.
PeekError read_http_host(std::string_view value, policy::CanonicalName& out);

// For logs and counters: "tls_sni", "malformed", ...
std::string_view to_string(PeekStatus s);
// A sentence fragment: "an extension type appears twice".
std::string_view describe(PeekError e);

}  // namespace abox::netstack
