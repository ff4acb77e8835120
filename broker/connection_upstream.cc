// Connection, upstream half: resolving the binding's name, connecting,
// verified TLS to the provider (or a pooled connection), sending the
// request, and streaming the response back through the scrubber (see
// connection.h for the whole state machine).
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <ctime>

#include "broker/connection.h"
#include "broker/upstream.h"
#include "broker/upstream_head.h"
#include "broker/upstream_pool.h"

namespace abox::broker {

namespace {

std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

void Connection::start_upstream() {
  if (auto pooled = rt_.pool.take(binding_index_)) {
    upstream_ = std::move(pooled);
    upstream_fd_number_ = upstream_->fd();
    // Its fd is still watched (the pool's handler): taken over, so that no
    // poll is removed and armed again. update_interest() sets the events.
    if (rt_.loop.hand_over(upstream_fd_number_, [this](std::uint32_t ev) { on_upstream_events(ev); })) {
      reused_upstream_ = true;
      ++rt_.accounting.service().upstream_reused;
      on_upstream_handshake_done();
      return;
    }
    drop_upstream();
  }
  reused_upstream_ = false;
  start_resolve();
}

bool Connection::retry_on_fresh_connection() {
  if (!reused_upstream_ || response_started_ || upstream_request_.empty()) return false;
  drop_upstream();
  reused_upstream_ = false;
  start_resolve();
  return true;
}

void Connection::start_resolve() {
  state_ = State::resolve;
  arm_timer(rt_.limits.connect_timeout);
  resolve_ticket_ = rt_.resolver.resolve(binding_->name, [this](const ResolveResult& r) {
    resolve_ticket_ = 0;
    if (state_ != State::resolve) return;
    if (!r.ok()) {
      fail_upstream(r.error == ResolveError::all_reserved ? GateReason::upstream_address_reserved
                                                          : GateReason::upstream_resolve_failed,
                    r.error == ResolveError::all_reserved ? "every address is in a reserved range"
                                                          : "the name did not resolve");
      drive();
      return;
    }
    addresses_ = r.addresses;
    next_address_ = 0;
    try_next_address();
    if (state_ != State::closed) drive();
  });
}

void Connection::try_next_address() {
  state_ = State::connect;
  while (next_address_ < addresses_.size()) {
    const policy::IpAddress& a = addresses_[next_address_++];
    // The resolver filtered reserved ranges already; checked again here
    // because this is the last moment before a packet leaves.
    if (rt_.policy.check_address(a).refused()) continue;
    connecting_fd_ = connect_nonblocking(a, binding_->port);
    if (!connecting_fd_) continue;
    upstream_fd_number_ = connecting_fd_.get();
    if (!rt_.loop.watch(upstream_fd_number_, POLLOUT, [this](std::uint32_t ev) { on_upstream_events(ev); })) {
      connecting_fd_.reset();
      continue;
    }
    return;
  }
  fail_upstream(GateReason::upstream_connect_failed, "no address accepted a connection");
}

bool Connection::step_connect_result() {
  if (!connecting_fd_) return false;
  int err = connect_result(connecting_fd_.get());
  if (err == EINPROGRESS || err == EALREADY) return false;
  if (err != 0) {
    // Writability with an error: this address failed, try the next.
    rt_.loop.unwatch(upstream_fd_number_);
    connecting_fd_.reset();
    try_next_address();
    return state_ == State::connect;
  }
  // Connected? A zero SO_ERROR before writability means still connecting:
  // getpeername tells.
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(connecting_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  SslPtr ssl = make_upstream_ssl(rt_.upstream_ctx, binding_->name);
  if (!ssl) {
    fail_upstream(GateReason::upstream_connect_failed, "cannot make the upstream TLS session");
    return false;
  }
  upstream_ = std::make_unique<TlsStream>(std::move(connecting_fd_), std::move(ssl));
  ++rt_.accounting.service().upstream_connections;
  state_ = State::upstream_handshake;
  return true;
}

bool Connection::step_upstream_handshake() {
  switch (upstream_->handshake()) {
    case TlsIo::done:
      on_upstream_handshake_done();
      return true;
    case TlsIo::would_block:
      return false;
    case TlsIo::closed:
    case TlsIo::failed: {
      long verify = SSL_get_verify_result(upstream_->ssl());
      if (verify != X509_V_OK) {
        std::string detail = X509_verify_cert_error_string(verify);
        fail_upstream(GateReason::upstream_tls_unverified, detail);
      } else {
        std::string detail = upstream_->error_text();
        fail_upstream(GateReason::upstream_connect_failed, detail);
      }
      return false;
    }
  }
  return false;
}

void Connection::on_upstream_handshake_done() {
  // SSL_VERIFY_PEER already failed the handshake on a bad chain or name;
  // checked again so that a change of context settings cannot skip it.
  X509Ptr peer(SSL_get_peer_certificate(upstream_->ssl()));
  if (SSL_get_verify_result(upstream_->ssl()) != X509_V_OK || !peer) {
    fail_upstream(GateReason::upstream_tls_unverified, "no verified certificate");
    return;
  }
  request_bytes_up_ = upstream_request_.size();
  upstream_->queue(upstream_request_);
  upstream_quiet_ = true;  // until the request is out and the loop says so
  response_raw_.clear();
  response_head_done_ = false;
  response_started_ = false;
  close_guest_after_ = true;
  response_bytes_down_ = 0;
  if (!request_counted_) {
    request_counted_ = true;
    auto& account = rt_.accounting.binding(binding_index_);
    ++account.requests;
    account.bytes_up += request_bytes_up_;
  }
  state_ = State::exchange;
  arm_timer(rt_.limits.idle_timeout);
}

bool Connection::step_exchange() {
  bool progress = flush_both();
  if (state_ != State::exchange) return false;
  if (process_response()) progress = true;
  if (state_ != State::exchange) return true;
  if (guest_->queued_bytes() >= rt_.limits.max_buffered_bytes) return progress;
  if (upstream_quiet_ && !upstream_->has_pending()) return progress;
  switch (upstream_->read(response_raw_, 64 * 1024)) {
    case TlsIo::done:
      return true;
    case TlsIo::would_block:
      return progress;
    case TlsIo::closed:
      if (response_head_done_ && response_head_.framing == ResponseFraming::until_close) {
        finish_response();
        return true;
      }
      [[fallthrough]];
    case TlsIo::failed: {
      // A kept connection the provider closed as the request went out (its
      // idle close crossing our send): not one byte of an answer came, so
      // the request goes once more on a fresh connection.
      if (response_raw_.empty() && !response_head_done_ && retry_on_fresh_connection()) return true;
      std::string detail = upstream_->error_text();
      drop_upstream();
      if (!response_started_) {
        fail_upstream(GateReason::upstream_connect_failed,
                      detail.empty() ? std::string("upstream closed early") : detail);
      } else {
        // Cut mid-response: the guest sees the connection end (no fake end).
        ++rt_.accounting.service().upstream_failures;
        rt_.events.emit("broker_upstream_cut", {{"binding", binding_->name}, {"detail", detail}});
        begin_closing();
      }
      return false;
    }
  }
  return progress;
}

bool Connection::process_response() {
  bool progress = false;
  while (!response_raw_.empty() && state_ == State::exchange) {
    if (!response_head_done_) {
      auto parsed = parse_response_head(bytes_of(response_raw_), request_is_head_, response_head_);
      if (!parsed.ok()) {
        std::string detail = std::string("bad response head: ") + std::string(to_string(parsed.error()));
        drop_upstream();
        if (!response_started_) {
          fail_upstream(GateReason::upstream_connect_failed, detail);
        } else {
          begin_closing();
        }
        return false;
      }
      if (*parsed == ResponseHeadStatus::need_more) return progress;
      std::size_t head_bytes = response_head_.head_bytes;
      int status = response_head_.status;
      wipe_string(upstream_request_);  // the provider answered: no retry from here
      auto& account = rt_.accounting.binding(binding_index_);
      if (status >= 100 && status < 200 && status != 101) {
        // Interim (100 Continue, 103): forwarded, the final head follows.
        if (status != 100 || !sent_continue_) {
          relay_.head(std::string_view(response_raw_).substr(0, head_bytes), relayed_);
          send_relayed();
        }
        response_raw_.erase(0, head_bytes);
        progress = true;
        continue;
      }
      ++account.statuses[status];
      if (response_head_.content_coded &&
          (response_head_.framing != ResponseFraming::none || status == 101)) {
        // Asked for identity and no WebSocket extension (upstream_head.h),
        // sent gzip or permessage-deflate anyway: the guest would decode what
        // the scrubber cannot read. Not one byte of it goes on; the
        // provider's connection is not kept.
        drop_upstream();
        fail_upstream(GateReason::upstream_content_encoding,
                      status == 101 ? "a WebSocket extension" : "Content-Encoding other than identity");
        return false;
      }
      if (status == 429) ++account.rate_limited;
      if (status >= 500) ++account.server_errors;
      if (!response_head_.retry_after.empty()) account.last_retry_after = response_head_.retry_after;
      rt_.backoffs.on_response(binding_index_, status, response_head_.retry_after, rt_.loop.now(),
                               static_cast<std::int64_t>(std::time(nullptr)));
      response_head_done_ = true;
      if (status == 101) {
        relay_.head(std::string_view(response_raw_).substr(0, head_bytes), relayed_);
      } else {
        // The provider's connection headers are about the broker's pooled
        // connection; the guest learns only whether its own one closes.
        close_guest_after_ = guest_wants_close_ || response_head_.framing == ResponseFraming::until_close;
        guest_head_.clear();
        write_guest_response_head(std::string_view(response_raw_).substr(0, head_bytes), close_guest_after_,
                                  guest_head_);
        relay_.head(guest_head_, relayed_);
      }
      send_relayed();
      response_raw_.erase(0, head_bytes);
      progress = true;
      if (status == 101) {
        if (!upgrade_allowed_) {
          begin_closing();
          return false;
        }
        state_ = State::tunnel;
        // WebSocket messages are scrubbed across their fragments; any other
        // protocol's bytes as a stream.
        relay_.begin_tunnel(response_head_.websocket);
        return relay_tunnel_bytes();
      }
      // The body is decoded, scrubbed and framed again (response_relay.h).
      relay_.begin_body(response_head_.framing, response_head_.content_length);
      if (relay_.body_done()) {  // no body (1xx, 204, 304, HEAD) or Content-Length: 0
        finish_response();
        return true;
      }
      continue;
    }
    auto used = relay_.body(bytes_of(response_raw_), relayed_);
    send_relayed();
    if (!used.ok()) {
      ++rt_.accounting.service().upstream_failures;
      rt_.events.emit("broker_upstream_cut",
                      {{"binding", binding_->name}, {"detail", "bad response body framing"}});
      drop_upstream();
      begin_closing();
      return false;
    }
    response_raw_.erase(0, *used);
    progress = true;
    if (relay_.body_done()) {
      rt_.accounting.service().trailer_fields_dropped += relay_.trailer_fields();
      finish_response();
      return true;
    }
  }
  return progress;
}

bool Connection::relay_tunnel_bytes() {
  if (response_raw_.empty()) return true;
  auto used = relay_.tunnel(bytes_of(response_raw_), relayed_);
  response_raw_.clear();
  send_relayed();
  if (!used.ok()) {
    ++rt_.accounting.service().upstream_failures;
    rt_.events.emit("broker_upstream_cut",
                    {{"binding", binding_->name},
                     {"detail", std::string("bad WebSocket frame: ") + std::string(used.error())}});
    drop_upstream();
    begin_closing();
    return false;
  }
  return true;
}

void Connection::send_relayed() {
  std::uint64_t scrubbed = relay_.scrubbed();
  if (scrubbed != scrubbed_reported_) {
    auto& account = rt_.accounting.binding(binding_index_);
    account.keys_scrubbed += scrubbed - scrubbed_reported_;
    rt_.events.emit("broker_key_scrubbed",
                    {{"binding", binding_->name}, {"occurrences", scrubbed - scrubbed_reported_}});
    scrubbed_reported_ = scrubbed;
  }
  response_started_ = true;
  if (relayed_.empty()) return;
  response_bytes_down_ += relayed_.size();
  rt_.accounting.binding(binding_index_).bytes_down += relayed_.size();
  guest_->queue(relayed_);
  relayed_.clear();
}

void Connection::finish_response() {
  relay_.end_of_stream(relayed_);  // until_close: the held tail
  send_relayed();
  rt_.events.emit("broker_request", {{"binding", binding_->name},
                                     {"method", method_},
                                     {"path", path_},
                                     {"status", response_head_.status},
                                     {"bytes_up", request_bytes_up_},
                                     {"bytes_down", response_bytes_down_}});
  bool close_guest = close_guest_after_;
  wipe_string(upstream_request_);
  bool reusable = upstream_ && !response_head_.connection_close && response_head_.status != 101 &&
                  response_head_.framing != ResponseFraming::until_close && response_raw_.empty() &&
                  !upstream_->has_pending() && upstream_->queued_bytes() == 0;
  if (reusable) {
    // The fd stays watched: the pool takes the watch over.
    upstream_fd_number_ = -1;
    rt_.pool.give(binding_index_, std::move(upstream_));
  }
  drop_upstream();
  response_head_done_ = false;
  if (close_guest) {
    begin_closing();
    return;
  }
  guest_quiet_ = true;  // its next request comes after this answer (or the loop says so)
  enter_head_state();
}

bool Connection::step_tunnel() {
  bool progress = flush_both();
  if (state_ != State::tunnel) return false;
  if (upstream_->queued_bytes() < rt_.limits.max_buffered_bytes && !in_.empty()) {
    upstream_->queue(in_);
    in_.clear();
    progress = true;
  }
  if (upstream_->queued_bytes() < rt_.limits.max_buffered_bytes) {
    switch (guest_->read(in_, 64 * 1024)) {
      case TlsIo::done:
        progress = true;
        break;
      case TlsIo::would_block:
        break;
      case TlsIo::closed:
      case TlsIo::failed:
        close_now();
        return false;
    }
  }
  if (guest_->queued_bytes() < rt_.limits.max_buffered_bytes) {
    switch (upstream_->read(response_raw_, 64 * 1024)) {
      case TlsIo::done:
        if (!relay_tunnel_bytes()) return false;
        progress = true;
        break;
      case TlsIo::would_block:
        break;
      case TlsIo::closed:
      case TlsIo::failed:
        relay_.end_of_stream(relayed_);  // the held tail
        send_relayed();
        drop_upstream();
        begin_closing();
        return false;
    }
  }
  return progress;
}

}  // namespace abox::broker
