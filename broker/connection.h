// Connection: one guest connection to the broker, from its first byte to its
// close, with the upstream connection of the request in progress.
//
// connection.cc holds the guest half (hand-off, TLS, request, refusals,
// timers), connection_upstream.cc the provider half (resolve, connect,
// verified TLS or a pooled connection, the streamed response).
//
// How this works. A connection is a state machine driven by readiness of its
// two sockets (guest, upstream) and by its timer; drive() advances it as far
// as it can, then tells the loop which readiness it waits for.
//
//   handoff    (unix listener only) abox-net's line, read with MSG_PEEK and
//              then consumed exactly, so the guest's TLS bytes stay unread
//   handshake  TLS as a server; the SNI callback mints/picks the leaf only for
//              a name with a binding (and, after a hand-off, only that name)
//   head       the request head, parsed strictly (http_request.h); a bad
//              head is a 400 and close; then the injection gate: a refusal
//              is a 403 with `abox-refused: <reason>` and close; then the
//              binding's provider backoff (backoff_table.h): while it lasts,
//              a 429 with Retry-After and `abox-refused: provider_backoff`,
//              answered by the broker, and close
//   body       the whole body is read (bounded by http_body_bytes) and
//              scanned for a nonce before anything goes upstream, so a nonce
//              in the body is refused with the upstream having seen nothing
//   resolve    the binding's name, by the broker's own resolver
//   connect    each resolved address in turn (connect_timeout in all)
//   upstream_handshake  TLS verified against the roots, hostname checked
//   exchange   the rewritten head (key added, guest credentials dropped) and
//              the body go up; the response streams back as it arrives,
//              through the ResponseRelay: its head is parsed to count it and
//              to find where the body ends, and the body is decoded, scrubbed
//              of the key as the guest's client will read it, and framed
//              again (response_relay.h)
//   tunnel     after a 101 on a binding with allow_upgrade: bytes both ways,
//              the provider's through the relay (WebSocket messages scrubbed
//              across their fragments)
//   (a pooled upstream connection skips resolve, connect and handshake)
//   closing    flush what is queued for the guest, then close
// After a response ends the upstream connection is closed and, unless either
// side asked to close, the guest's next request is read (keep-alive).
//
// Bounds: the head (http_head_bytes), the body (http_body_bytes), response
// bytes queued for the guest (max_buffered_bytes: upstream reads pause past
// it), and one timer, due at the earlier of two clocks:
//   - a time-out from the last byte either way (connect while reaching the
//     provider, idle otherwise), and
//   - a deadline from a fixed point, which no byte moves: the hand-off line
//     and TLS handshake from accept (tls_handshake_ms: closed), the request
//     head from its first byte (http_head_ms), the body from the end of the
//     head (http_body_ms); a head or body past its deadline is answered 408
//     with `abox-refused: head_timeout` / `body_timeout` and closed. A peer
//     that sends a byte a second keeps an idle timer alive for ever, not a
//     deadline. The head's "first byte" is the first TLS byte that arrives
//     after the previous request (TlsStream::bytes_received()), so a head
//     trickled inside one TLS record is timed too.
//
// Upstream connections are kept for the next request when a response ends
// cleanly (upstream_pool.h).
//
// The key lives in the upstream request buffer until the response head
// arrives (for the one retry) and in the upstream TLS stream's buffer until
// sent; both are wiped. It is never logged.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/broker_handoff.h"
#include "base/unique_fd.h"
#include "broker/body_decoder.h"
#include "broker/injection_gate.h"
#include "broker/nonce.h"
#include "broker/response_head.h"
#include "broker/response_relay.h"
#include "broker/runtime.h"
#include "broker/tls_stream.h"

namespace abox::broker {

class Connection final : public io::EventLoop::Deletable {
 public:
  // `fd` is an accepted, non-blocking guest socket. `port` is the local
  // port it was accepted on (used only without a hand-off line).
  Connection(InstanceRuntime& rt, base::UniqueFd fd, std::uint64_t id);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts watching the guest socket. False when the loop refused it.
  bool start();
  std::uint64_t id() const { return id_; }

  // The SNI callback (SSL_CTX_set_tlsext_servername_callback): picks the
  // leaf, or refuses the name. Returns an SSL_TLSEXT_ERR_* value.
  int on_servername(SSL* ssl, int* alert);

 private:
  enum class State : std::uint8_t {
    handoff,
    handshake,
    head,
    body,
    resolve,
    connect,
    upstream_handshake,
    exchange,
    tunnel,
    closing,
    closed,
  };

  void drive();
  bool step();
  bool step_handoff();
  bool step_handshake();
  bool step_head();
  // Enters the head state: the idle timer runs until the head's first byte.
  void enter_head_state();
  // Starts the head's deadline once a byte of it has arrived.
  void start_head_deadline_at_first_byte();
  bool step_body();
  bool step_connect_result();
  bool step_upstream_handshake();
  bool step_exchange();
  bool step_tunnel();
  bool step_closing();
  bool flush_both();

  // Reads more from the guest into in_; false when nothing came (would
  // block, or the connection ended: state changed).
  bool read_guest(std::size_t max);
  void on_head(const RequestHead& head);
  void on_body_done();
  void start_upstream();
  void start_resolve();
  // A request that failed on a pooled connection before any response byte
  // goes again on a fresh one; false when that does not apply.
  bool retry_on_fresh_connection();
  void try_next_address();
  void on_upstream_handshake_done();
  bool process_response();
  // Queues relayed_ (what relay_ made of the provider's bytes) for the
  // guest, and counts it and the keys scrubbed from it.
  void send_relayed();
  // After a 101: response_raw_ through the relay to the guest; false when
  // the tunnel was cut (a bad WebSocket frame).
  bool relay_tunnel_bytes();
  void finish_response();

  void refuse(int status, std::string_view reason, std::string_view detail);
  // 429 with Retry-After, answered for a provider in backoff (backoff_table.h).
  void refuse_backoff(std::uint32_t seconds_left);
  // The broker's own answer (`abox-refused: reason`, the detail as a text
  // body, extra header lines each starting with CRLF), then close.
  void answer_and_close(int status, std::string_view reason, std::string_view detail,
                        std::string_view extra_header_lines);
  void fail_upstream(GateReason reason, std::string_view detail);
  void begin_closing();
  void close_now();
  void drop_upstream();
  void update_interest();
  // The idle (or connect) time-out, from now and from every later byte.
  void arm_timer(base::Millis timeout);
  enum class Deadline : std::uint8_t { none, handshake, head, body };
  void set_deadline(Deadline what, base::Millis after);
  void clear_deadline() { deadline_what_ = Deadline::none; }
  // (Re)schedules the loop timer for the earlier of the two.
  void schedule_timer();
  void on_timer();
  void on_deadline();
  void count_refusal(std::string_view reason);

  InstanceRuntime& rt_;
  std::uint64_t id_;
  State state_ = State::handoff;

  // The guest side: the raw fd until the TLS stream takes it.
  base::UniqueFd guest_fd_;
  std::unique_ptr<TlsStream> guest_;
  int guest_fd_number_ = -1;
  bool counted_handshake_ = false;

  std::optional<base::BrokerHandoff> handoff_;
  std::string sni_;
  const policy::BrokerBinding* binding_ = nullptr;  // from the SNI
  std::size_t binding_index_ = 0;
  std::uint16_t port_ = 443;

  // The request in progress.
  std::string in_;  // guest plaintext not consumed yet
  // Head (with the key) and body; kept until the response head arrives, for
  // one retry when a pooled upstream connection turns out closed.
  std::string upstream_request_;
  bool request_counted_ = false;
  bool reused_upstream_ = false;
  // A read that could only find nothing is not tried (each is a system
  // call): the provider's answer cannot come before the loop sees its
  // socket readable after the request went out, nor the guest's next
  // request before its answer was queued (a pipelined one the loop reports
  // too: the guest watch always has POLLIN in the head state). Set then;
  // cleared by any event on that fd but POLLOUT. TLS bytes already
  // decrypted (has_pending()) are read regardless.
  bool upstream_quiet_ = false;
  bool guest_quiet_ = false;
  void on_guest_events(std::uint32_t events);
  void on_upstream_events(std::uint32_t events);
  std::optional<BodyDecoder> body_;
  NonceMarkerScanner body_scanner_;
  std::size_t body_offset_ = 0;  // where the body starts in in_
  bool body_chunked_ = false;
  bool request_is_head_ = false;
  bool sent_continue_ = false;  // we answered Expect: 100-continue ourselves
  bool guest_wants_close_ = false;
  bool upgrade_allowed_ = false;
  std::string method_;
  std::string path_;

  // Upstream.
  UpstreamResolver::Ticket resolve_ticket_ = 0;
  std::vector<policy::IpAddress> addresses_;
  std::size_t next_address_ = 0;
  base::UniqueFd connecting_fd_;
  std::unique_ptr<TlsStream> upstream_;
  int upstream_fd_number_ = -1;
  std::string response_raw_;  // upstream plaintext not processed yet
  bool response_head_done_ = false;
  ResponseHead response_head_;
  bool response_started_ = false;  // a byte of the response reached the guest
  bool close_guest_after_ = true;  // the guest's connection closes after this response
  std::string guest_head_;         // the response head as the guest gets it
  std::uint64_t request_bytes_up_ = 0;
  std::uint64_t response_bytes_down_ = 0;
  // Heads and bodies go to the guest scrubbed as its client decodes them.
  ResponseRelay relay_;
  std::string relayed_;  // the relay's output, queued for the guest by send_relayed()
  std::uint64_t scrubbed_reported_ = 0;

  // The one timer (deadline or time-out, whichever is due first), a loop
  // Timer of its own: moving it is a heap update, not an allocation.
  struct DueTimer final : io::EventLoop::Timer {
    explicit DueTimer(Connection& c) : owner(c) {}
    void on_timer() override { owner.on_timer(); }
    Connection& owner;
  };
  DueTimer timer_{*this};
  base::MonoTime last_activity_;
  base::Millis timeout_{0};
  Deadline deadline_what_ = Deadline::none;
  base::MonoTime deadline_;
  std::size_t head_start_bytes_ = 0;  // guest TLS bytes received when the head state began
};

}  // namespace abox::broker
