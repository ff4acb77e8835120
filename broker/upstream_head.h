// The request head the broker sends upstream: the guest's head with the
// guest's credentials removed and the real key added. Sans-I/O.
//
// Written only after the injection gate allowed the request. From the guest's
// head, in order:
//   - the request line, rebuilt as "METHOD SP target SP HTTP/1.1" CRLF;
//   - every header field as sent (name spelling kept, value OWS-trimmed),
//     except these, dropped in any case spelling: authorization,
//     proxy-authorization, x-api-key, cookie, and the binding's own header
//     (which carried the nonce); and the hop-by-hop headers connection,
//     keep-alive, proxy-connection and te (RFC 9110 7.6.1): the upstream
//     connection is the broker's own, kept alive across guest connections,
//     so a guest's "Connection: close" must not end it. An upgrade request
//     (wants_upgrade(), only past the gate when the binding allows it) gets
//     "Connection: upgrade" instead, next to its Upgrade header;
//   - the guest's Accept-Encoding is replaced by "Accept-Encoding: identity":
//     the key scrubber reads the body as the guest will decode it, which it
//     cannot do inside gzip or brotli (the broker refuses a response with a
//     content coding all the same: connection_upstream.cc); for the same
//     reason Sec-WebSocket-Extensions is dropped, so that no
//     permessage-deflate is negotiated for a tunnel (a 101 that names an
//     extension anyway is refused);
//   - then "<binding header>: <key prefix><key>" CRLF, and the empty line.
// Framing headers (Content-Length, Transfer-Encoding) pass through unchanged:
// the broker forwards the body under the same framing (body_decoder.h).
//
// The output holds the key: the caller sends it and wipes it
// (wipe_string()), and never logs it.
#pragma once

#include <string>
#include <string_view>

#include "broker/http_request.h"

namespace abox::broker {

struct KeyPlacement {
  std::string_view header;  // lower case, from the binding (e.g. "x-api-key")
  std::string_view prefix;  // written before the key: "" or "Bearer " (GateDecision::key_prefix)
};

// Is this one of the header names a guest may never send upstream
// (authorization, proxy-authorization, x-api-key, cookie)? Case-insensitive.
bool is_guest_credential_header(std::string_view name);
// Is this a hop-by-hop header the broker writes itself (connection,
// keep-alive, proxy-connection, te)? Case-insensitive.
bool is_hop_by_hop_header(std::string_view name);

// Appends the upstream head to `out` (which the caller may reuse across
// requests: no allocation once its capacity suffices).
void write_upstream_head(const RequestHead& head, const KeyPlacement& placement, std::string_view key,
                         std::string& out);

// Overwrites the string's whole capacity (OPENSSL_cleanse: not optimized
// away) and clears it.
void wipe_string(std::string& s);

}  // namespace abox::broker
