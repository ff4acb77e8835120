// HttpRequestFollower: every request of a name-checked plain-HTTP flow, not
// only the first. Sans-I/O.
//
// The peek (name_peek.h) reads the first request's Host before a flow on a
// name-checked port is connected. A kept-alive connection carries more
// requests, pipelined or one after another, each with a Host of its own: a
// server that hosts many names on one address serves each by its Host. So
// once the peek has said http_host, every byte the guest sends on the flow
// goes through a follower before it is sent: it reads HTTP/1.1's framing the
// way the server will (a head, a body by Content-Length or chunked, the next
// head) and hands the caller each request head's Host, which the caller
// checks against the names the address was answered for
// (admission.h: check_peeked_name) before the bytes that end that head are
// sent. The follower starts at the flow's first byte, so the first request
// is read again; bytes that cannot be followed strictly end the flow.
//
// The rules:
//   - Every head is read by the shared reader (base/http1_request_head.h)
//     with http_request_rules(limit): the same rules as the peek's, so a head
//     is at most `limit` bytes (the policy's peek_bytes) with at most
//     kMaxRequestFields fields, HTTP/1.1 or 1.0, exactly one Host, strict
//     Content-Length, Transfer-Encoding only "chunked", never both. Its Host
//     must be a name (read_http_host): no IP literal, no port out of range.
//   - Bodies go through BodyDecoder (base/http1_body.h): a Content-Length
//     body is counted, not read; a chunked body's size lines are read, its
//     data counted; trailer fields (at most kMaxRequestFields, `limit`
//     bytes) are checked and let through. There is no size limit: the
//     follower holds nothing of a body.
//   - An Upgrade is allowed only to TLS (RFC 2817: one Upgrade header whose
//     every protocol is "TLS" or "TLS/version"); a Connection: upgrade
//     without it, or an upgrade to anything else (websocket, h2c, ...),
//     ends the flow. After such a request the next bytes are either another
//     request (the server declined) or, when they start with a TLS record,
//     the upgrade's ClientHello: read by peek_name(), it must be a tls_sni
//     naming the same host as that request's Host, and is handed to the
//     caller like a head. From then on the flow is TLS and opaque: nothing
//     more is read.
//
// Costs: a head that arrives in one piece is read where it lies. One that
// spans pieces is copied into a buffer of at most `limit` bytes and read
// again only when a piece arrives that could change the reader's answer
// (one with a control byte, CR and LF included, or right after a CR): a head
// can end only at an LF, and the reader refuses every other byte only once
// it sees it. So a head is read at most about 2 x kMaxRequestFields + 2
// times, whatever the pieces. Body bytes cost O(1) per piece (a chunk's size
// line is read byte by byte).
//
// Invariants: feed() on a non-empty input consumes at least one byte or
// refuses; once it refuses it keeps refusing (consuming nothing). It
// allocates only the head buffer, once per flow (reused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/http1_body.h"
#include "base/http1_request_head.h"
#include "netstack/stack/name_peek.h"
#include "policy/name.h"

namespace abox::netstack {

// Why a followed flow ends. Each reads as a message (describe(FollowStep)).
enum class FollowError : std::uint8_t {
  none,
  head,         // a request head the shared reader refuses: see FollowStep::http
  host,         // its Host is no name (an IP literal, a bad port): see FollowStep::peek
  body,         // its body's framing breaks the rules: see FollowStep::http
  upgrade,      // an Upgrade to something other than TLS
  tls_upgrade,  // after an upgrade to TLS, not a ClientHello naming that request's Host
};

struct FollowStep {
  enum class Kind : std::uint8_t {
    more,     // `consumed` bytes read, no head ended in them: send them, feed the rest
    request,  // a request head (or the ClientHello of a TLS upgrade) ended at `consumed`:
              // check `name` before sending those bytes
    refused,  // end the flow (reset): see `error`
  };
  Kind kind = Kind::more;
  std::size_t consumed = 0;
  policy::CanonicalName name;                          // request: the Host (or the upgrade's SNI)
  FollowError error = FollowError::none;               // refused
  base::http1::Error http = base::http1::Error::none;  // error head or body
  PeekResult peek;                                     // error host (peek.error) or tls_upgrade
};

// For the deny event: "a request head is refused: a bare LF, ...".
std::string describe(const FollowStep& step);

class HttpRequestFollower {
 public:
  // `limit`: the policy's peek_bytes (the largest head, and ClientHello,
  // read), capped at kMaxPeekLimit.
  explicit HttpRequestFollower(std::size_t limit);

  // Reads from the front of `in`, the flow's next bytes from the guest (the
  // first call gets the flow's first byte).
  [[nodiscard]] FollowStep feed(std::span<const std::uint8_t> in);

  // The flow turned into TLS after an upgrade: feed() reads nothing more.
  bool opaque() const { return state_ == State::opaque; }
  // Request heads read and passed so far (the ClientHello of an upgrade not
  // counted): a refusal is about request requests() + 1.
  std::size_t requests() const { return requests_; }

 private:
  enum class State : std::uint8_t { head, body, tls_hello, opaque, refused };

  FollowStep read_head(std::span<const std::uint8_t> in);
  FollowStep finish_head(const base::http1::RequestHead& head, std::size_t consumed);
  FollowStep read_tls_hello(std::span<const std::uint8_t> in);
  FollowStep refuse(FollowStep step);

  std::size_t limit_;
  base::http1::RequestRules rules_;
  base::http1::BodyLimits body_limits_;
  State state_ = State::head;
  std::vector<std::uint8_t> pending_;  // a head or ClientHello that spans pieces; at most limit_ bytes
  base::http1::BodyDecoder body_;
  bool tls_may_follow_ = false;  // the last request asked to upgrade to TLS
  policy::CanonicalName upgrade_host_;
  std::size_t requests_ = 0;
  FollowStep refusal_;  // repeated once refused
};

}  // namespace abox::netstack
