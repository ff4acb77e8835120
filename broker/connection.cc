#include "broker/connection.h"

#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "broker/upstream.h"
#include "broker/upstream_head.h"
#include "broker/upstream_pool.h"
#include "policy/name.h"

namespace abox::broker {

namespace {

std::string_view status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

bool has_close_token(const RequestHead& head) {
  for (const auto& f : head.fields()) {
    if (!iequals(f.name, "connection")) continue;
    std::string_view v = f.value;
    std::size_t pos = 0;
    while (pos <= v.size()) {
      std::size_t comma = v.find(',', pos);
      std::string_view t =
          v.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
      while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
      while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
      if (iequals(t, "close")) return true;
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
  }
  return false;
}

}  // namespace

Connection::Connection(InstanceRuntime& rt, base::UniqueFd fd, std::uint64_t id)
    : rt_(rt), id_(id), guest_fd_(std::move(fd)), last_activity_(rt.loop.now()) {
  guest_fd_number_ = guest_fd_.get();
  state_ = rt_.expects_handoff ? State::handoff : State::handshake;
}

Connection::~Connection() {
  if (timer_ != 0) rt_.loop.cancel(timer_);
  if (resolve_ticket_ != 0) rt_.resolver.cancel(resolve_ticket_);
  if (counted_handshake_) --rt_.accounting.service().handshakes_in_progress;
  wipe_string(upstream_request_);
}

bool Connection::start() {
  ++rt_.accounting.service().handshakes_in_progress;
  counted_handshake_ = true;
  if (!rt_.loop.watch(guest_fd_number_, EPOLLIN, [this](std::uint32_t) { drive(); })) return false;
  arm_timer(rt_.limits.handshake_timeout);
  if (state_ == State::handshake) {
    // No hand-off line: TLS starts at the first byte.
    SslPtr ssl(SSL_new(rt_.server_ctx));
    if (!ssl) return false;
    SSL_set_app_data(ssl.get(), this);
    SSL_set_accept_state(ssl.get());
    guest_ = std::make_unique<TlsStream>(std::move(guest_fd_), std::move(ssl));
  }
  return true;
}

// ---- the SNI callback ----

int Connection::on_servername(SSL* ssl, int* alert) {
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  *alert = SSL_AD_UNRECOGNIZED_NAME;
  if (name == nullptr) {
    ++rt_.accounting.service().sni_refused;
    rt_.events.emit("broker_sni_refused", {{"reason", "no_sni"}});
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  auto canonical = policy::CanonicalName::from(name);
  const policy::BrokerBinding* binding = nullptr;
  std::string_view why = "sni_not_brokered";
  if (canonical.ok()) {
    if (handoff_) {
      // abox-net said which name the guest asked DNS for; the SNI must be it.
      if (canonical->view() != handoff_->name) {
        why = "sni_differs_from_handoff";
      } else {
        binding = rt_.policy.broker_for(canonical->view(), handoff_->port);
      }
    } else {
      for (const auto& b : rt_.policy.brokers()) {
        if (b.name == canonical->view()) {
          binding = &b;
          break;
        }
      }
    }
  }
  if (binding == nullptr) {
    ++rt_.accounting.service().sni_refused;
    std::string sni(name, ::strnlen(name, 255));
    rt_.events.emit("broker_sni_refused", {{"reason", why}, {"sni", sni}});
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  const LeafCertificate* leaf = rt_.leaves.get(binding->name, static_cast<std::int64_t>(std::time(nullptr)));
  if (leaf == nullptr || SSL_use_certificate(ssl, leaf->certificate.get()) != 1 ||
      SSL_use_PrivateKey(ssl, leaf->key.get()) != 1) {
    *alert = SSL_AD_INTERNAL_ERROR;
    rt_.events.emit("broker_error", {{"what", "leaf certificate"}, {"sni", binding->name}});
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  sni_ = binding->name;
  binding_ = binding;
  binding_index_ = static_cast<std::size_t>(binding - rt_.policy.brokers().data());
  if (!handoff_) port_ = binding->port;
  return SSL_TLSEXT_ERR_OK;
}

// ---- driving ----

void Connection::drive() {
  if (state_ == State::closed) return;
  last_activity_ = rt_.loop.now();
  // Bounded: each step either makes progress on a bounded buffer or returns
  // false; the guard stops a bug from spinning the loop forever.
  for (int guard = 0; guard < 10'000 && state_ != State::closed; ++guard) {
    if (!step()) break;
  }
  if (state_ != State::closed) update_interest();
}

bool Connection::step() {
  switch (state_) {
    case State::handoff:
      return step_handoff();
    case State::handshake:
      return step_handshake();
    case State::head: {
      bool flushed = flush_both();
      return step_head() || flushed;
    }
    case State::body: {
      bool flushed = flush_both();  // a 100 Continue
      return step_body() || flushed;
    }
    case State::resolve:
      return false;  // the resolver calls back
    case State::connect:
      return step_connect_result();
    case State::upstream_handshake:
      return step_upstream_handshake();
    case State::exchange:
      return step_exchange();
    case State::tunnel:
      return step_tunnel();
    case State::closing:
      return step_closing();
    case State::closed:
      return false;
  }
  return false;
}

bool Connection::flush_both() {
  bool progress = false;
  if (guest_ && guest_->queued_bytes() > 0) {
    std::size_t before = guest_->queued_bytes();
    if (guest_->flush() == TlsIo::failed) {
      close_now();
      return false;
    }
    progress = guest_->queued_bytes() < before;
  }
  if (upstream_ && upstream_->handshake_done() && upstream_->queued_bytes() > 0) {
    std::size_t before = upstream_->queued_bytes();
    if (upstream_->flush() == TlsIo::failed) {
      if (retry_on_fresh_connection()) return true;
      drop_upstream();
      if (!response_started_) {
        fail_upstream(GateReason::upstream_connect_failed, "upstream write failed");
      } else {
        begin_closing();
      }
      return false;
    }
    progress = progress || upstream_->queued_bytes() < before;
  }
  return progress;
}

bool Connection::step_handoff() {
  std::array<std::uint8_t, base::kMaxHandoffLine> buf{};
  ssize_t n = ::recv(guest_fd_.get(), buf.data(), buf.size(), MSG_PEEK);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return false;
    close_now();
    return false;
  }
  if (n == 0) {
    close_now();
    return false;
  }
  auto parsed = base::parse_handoff(std::span(buf.data(), static_cast<std::size_t>(n)));
  if (!parsed.ok() && parsed.error() == base::HandoffError::incomplete) return false;
  std::string_view why;
  if (!parsed.ok()) {
    why = base::describe(parsed.error());
  } else if (parsed->handoff.instance != rt_.instance) {
    why = "the hand-off names another instance";
  } else if (rt_.policy.broker_for(parsed->handoff.name, parsed->handoff.port) == nullptr) {
    why = "no broker binding for the hand-off's name and port";
  }
  if (!why.empty()) {
    ++rt_.accounting.service().handoff_refused;
    rt_.events.emit("broker_handoff_refused", {{"reason", why}});
    close_now();
    return false;
  }
  // Consume exactly the line; the guest's TLS bytes stay in the socket.
  std::size_t consumed = parsed->consumed;
  if (::recv(guest_fd_.get(), buf.data(), consumed, 0) != static_cast<ssize_t>(consumed)) {
    close_now();
    return false;
  }
  handoff_ = std::move(parsed->handoff);
  port_ = handoff_->port;
  SslPtr ssl(SSL_new(rt_.server_ctx));
  if (!ssl) {
    close_now();
    return false;
  }
  SSL_set_app_data(ssl.get(), this);
  SSL_set_accept_state(ssl.get());
  guest_ = std::make_unique<TlsStream>(std::move(guest_fd_), std::move(ssl));
  state_ = State::handshake;
  return true;
}

bool Connection::step_handshake() {
  switch (guest_->handshake()) {
    case TlsIo::done:
      --rt_.accounting.service().handshakes_in_progress;
      counted_handshake_ = false;
      if (binding_ == nullptr) {  // cannot happen: no certificate without a binding
        close_now();
        return false;
      }
      state_ = State::head;
      arm_timer(rt_.limits.idle_timeout);
      return true;
    case TlsIo::would_block:
      return false;
    case TlsIo::closed:
    case TlsIo::failed:
      ++rt_.accounting.service().handshake_failed;
      if (binding_ != nullptr) {
        // The name was fine; the client gave up (e.g. it does not trust the CA).
        std::string detail = guest_->error_text();
        rt_.events.emit("broker_handshake_failed", {{"sni", sni_}, {"detail", detail}});
      }
      close_now();
      return false;
  }
  return false;
}

bool Connection::read_guest(std::size_t max) {
  switch (guest_->read(in_, max)) {
    case TlsIo::done:
      return true;
    case TlsIo::would_block:
      return false;
    case TlsIo::closed:
      // The guest is done. Between requests that is a clean close.
      close_now();
      return false;
    case TlsIo::failed:
      close_now();
      return false;
  }
  return false;
}

bool Connection::step_head() {
  if (state_ != State::head) return false;
  if (!in_.empty()) {
    RequestHead head;
    auto parsed = parse_request_head(bytes_of(in_), rt_.head_limits, head);
    if (!parsed.ok()) {
      ++rt_.accounting.service().malformed_requests;
      refuse(400, to_string(parsed.error()), describe(parsed.error()));
      return false;
    }
    if (*parsed == HeadStatus::complete) {
      on_head(head);
      return true;
    }
  }
  std::size_t limit = rt_.head_limits.max_head_bytes + 1;
  if (in_.size() >= limit) return false;  // the parser decides at the limit
  return read_guest(limit - in_.size());
}

void Connection::on_head(const RequestHead& head) {
  GateRequest request;
  request.sni = sni_;
  request.port = port_;
  request.head = &head;
  request.real_keys = rt_.credentials.all_keys();
  GateDecision decision = rt_.gate.decide(request);
  method_ = std::string(head.method());
  if (!decision.allowed()) {
    // Not the path: it may be where the guest put a nonce.
    refuse(http_status(decision.reason), to_string(decision.reason), describe(decision.reason));
    return;
  }
  path_ = std::string(head.path());
  request_is_head_ = head.method() == "HEAD";
  guest_wants_close_ = has_close_token(head);
  upgrade_allowed_ = head.wants_upgrade();  // the gate let it through: the binding allows it
  std::string_view key = rt_.credentials.key_for(binding_index_);
  wipe_string(upstream_request_);
  write_upstream_head(head, KeyPlacement{binding_->header, decision.key_prefix}, key, upstream_request_);
  body_.emplace(head.framing(), head.content_length(), rt_.body_limits);
  body_chunked_ = head.framing() == BodyFraming::chunked;
  body_scanner_ = NonceMarkerScanner{};
  body_offset_ = head.head_bytes();
  if (body_->error() != HttpError::none) {
    ++rt_.accounting.service().malformed_requests;
    refuse(400, to_string(body_->error()), describe(body_->error()));
    return;
  }
  scrubber_.reset(key);
  // The whole body is read before anything goes upstream, so the broker
  // answers "Expect: 100-continue" itself (the provider's own 100, if it
  // sends one, is then not forwarded twice).
  sent_continue_ = false;
  const HeaderField* expect = head.find("expect");
  if (expect != nullptr && iequals(expect->value, "100-continue") && head.framing() != BodyFraming::none) {
    guest_->queue("HTTP/1.1 100 Continue\r\n\r\n");
    sent_continue_ = true;
  }
  state_ = State::body;
}

bool Connection::step_body() {
  while (!body_->done() && body_offset_ < in_.size()) {
    auto step = body_->feed(bytes_of(std::string_view(in_).substr(body_offset_)));
    if (!step.ok()) {
      ++rt_.accounting.service().malformed_requests;
      refuse(400, to_string(step.error()), describe(step.error()));
      return false;
    }
    body_scanner_.feed(step->payload);
    body_offset_ += step->consumed;
    if (step->payload.empty()) continue;
    // Re-framed for upstream as the head said: a chunk, or the bytes as is.
    if (body_chunked_) {
      append_chunk(step->payload, upstream_request_);
    } else {
      upstream_request_.append(reinterpret_cast<const char*>(step->payload.data()), step->payload.size());
    }
  }
  if (body_->done()) {
    if (body_chunked_) append_last_chunk(upstream_request_);
    in_.erase(0, body_offset_);  // what is left is the guest's next request
    body_offset_ = 0;
    on_body_done();
    return true;
  }
  // The bytes read so far belong to this body: drop them to keep in_ small.
  in_.erase(0, body_offset_);
  body_offset_ = 0;
  return read_guest(64 * 1024);
}

void Connection::on_body_done() {
  if (body_scanner_.found()) {
    wipe_string(upstream_request_);
    refuse(http_status(GateReason::nonce_in_body), to_string(GateReason::nonce_in_body),
           describe(GateReason::nonce_in_body));
    return;
  }
  body_.reset();
  request_counted_ = false;
  start_upstream();
}

void Connection::start_upstream() {
  if (auto pooled = rt_.pool.take(binding_index_)) {
    upstream_ = std::move(pooled);
    upstream_fd_number_ = upstream_->fd();
    if (rt_.loop.watch(upstream_fd_number_, EPOLLIN | EPOLLOUT, [this](std::uint32_t) { drive(); })) {
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
    if (!rt_.loop.watch(upstream_fd_number_, EPOLLOUT, [this](std::uint32_t) { drive(); })) {
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
  response_raw_.clear();
  response_head_done_ = false;
  response_body_.reset();
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
        if (status != 100 || !sent_continue_)
          forward_to_guest(std::string_view(response_raw_).substr(0, head_bytes));
        response_raw_.erase(0, head_bytes);
        progress = true;
        continue;
      }
      ++account.statuses[status];
      if (status == 429) ++account.rate_limited;
      if (status >= 500) ++account.server_errors;
      if (!response_head_.retry_after.empty()) account.last_retry_after = response_head_.retry_after;
      response_head_done_ = true;
      if (status == 101) {
        forward_to_guest(std::string_view(response_raw_).substr(0, head_bytes));
      } else {
        // The provider's connection headers are about the broker's pooled
        // connection; the guest learns only whether its own one closes.
        close_guest_after_ = guest_wants_close_ || response_head_.framing == ResponseFraming::until_close;
        guest_head_.clear();
        write_guest_response_head(std::string_view(response_raw_).substr(0, head_bytes), close_guest_after_,
                                  guest_head_);
        forward_to_guest(guest_head_);
      }
      response_raw_.erase(0, head_bytes);
      progress = true;
      if (status == 101) {
        if (!upgrade_allowed_) {
          begin_closing();
          return false;
        }
        state_ = State::tunnel;
        if (!response_raw_.empty()) {
          forward_to_guest(response_raw_);
          response_raw_.clear();
        }
        return true;
      }
      switch (response_head_.framing) {
        case ResponseFraming::none:
          finish_response();
          return true;
        case ResponseFraming::content_length:
          response_body_.emplace(BodyFraming::content_length, response_head_.content_length,
                                 BodyLimits{UINT64_MAX});
          break;
        case ResponseFraming::chunked:
          response_body_.emplace(BodyFraming::chunked, 0, BodyLimits{UINT64_MAX});
          break;
        case ResponseFraming::until_close:
          break;
      }
      continue;
    }
    if (!response_body_) {  // until_close: everything goes through
      forward_to_guest(response_raw_);
      response_raw_.clear();
      return true;
    }
    auto step = response_body_->feed(bytes_of(response_raw_));
    if (!step.ok()) {
      ++rt_.accounting.service().upstream_failures;
      rt_.events.emit("broker_upstream_cut",
                      {{"binding", binding_->name}, {"detail", "bad response body framing"}});
      drop_upstream();
      begin_closing();
      return false;
    }
    forward_to_guest(std::string_view(response_raw_).substr(0, step->consumed));
    response_raw_.erase(0, step->consumed);
    progress = true;
    if (response_body_->done()) {
      finish_response();
      return true;
    }
  }
  if (response_head_done_ && response_body_ && response_body_->done() && state_ == State::exchange) {
    finish_response();
    return true;
  }
  return progress;
}

void Connection::forward_to_guest(std::string_view bytes) {
  scrubbed_.clear();
  std::uint64_t before = scrubber_.scrubbed();
  scrubber_.feed(bytes, scrubbed_);
  if (scrubber_.scrubbed() != before) {
    auto& account = rt_.accounting.binding(binding_index_);
    account.keys_scrubbed += scrubber_.scrubbed() - before;
    rt_.events.emit("broker_key_scrubbed",
                    {{"binding", binding_->name}, {"occurrences", scrubber_.scrubbed() - before}});
  }
  response_started_ = true;
  response_bytes_down_ += scrubbed_.size();
  rt_.accounting.binding(binding_index_).bytes_down += scrubbed_.size();
  guest_->queue(scrubbed_);
}

void Connection::finish_response() {
  scrubbed_.clear();
  scrubber_.finish(scrubbed_);
  if (!scrubbed_.empty()) {
    response_bytes_down_ += scrubbed_.size();
    rt_.accounting.binding(binding_index_).bytes_down += scrubbed_.size();
    guest_->queue(scrubbed_);
  }
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
    rt_.loop.unwatch(upstream_fd_number_);
    upstream_fd_number_ = -1;
    rt_.pool.give(binding_index_, std::move(upstream_));
  }
  drop_upstream();
  response_body_.reset();
  response_head_done_ = false;
  if (close_guest) {
    begin_closing();
    return;
  }
  state_ = State::head;
  arm_timer(rt_.limits.idle_timeout);
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
        forward_to_guest(response_raw_);
        response_raw_.clear();
        progress = true;
        break;
      case TlsIo::would_block:
        break;
      case TlsIo::closed:
      case TlsIo::failed:
        drop_upstream();
        begin_closing();
        return false;
    }
  }
  return progress;
}

bool Connection::step_closing() {
  if (!guest_) {
    close_now();
    return false;
  }
  TlsIo r = guest_->flush();
  if (r == TlsIo::would_block) return false;
  if (r == TlsIo::done) guest_->shutdown();
  close_now();
  return false;
}

// ---- endings ----

void Connection::count_refusal(std::string_view reason) {
  if (binding_ == nullptr) return;
  auto& account = rt_.accounting.binding(binding_index_);
  ++account.refused;
  ++account.refused_by_reason[std::string(reason)];
}

void Connection::refuse(int status, std::string_view reason, std::string_view detail) {
  count_refusal(reason);
  rt_.events.emit("broker_refused",
                  {{"reason", reason}, {"status", status}, {"sni", sni_}, {"method", method_}});
  std::string body = std::string(detail) + "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) +
                         "\r\nabox-refused: " + std::string(reason) +
                         "\r\ncontent-type: text/plain\r\ncontent-length: " + std::to_string(body.size()) +
                         "\r\nconnection: close\r\n\r\n" + body;
  wipe_string(upstream_request_);
  drop_upstream();
  if (guest_) guest_->queue(response);
  begin_closing();
}

void Connection::fail_upstream(GateReason reason, std::string_view detail) {
  ++rt_.accounting.service().upstream_failures;
  rt_.events.emit("broker_upstream_failed", {{"binding", binding_ ? binding_->name : std::string()},
                                             {"reason", to_string(reason)},
                                             {"detail", detail}});
  refuse(http_status(reason), to_string(reason), describe(reason));
}

void Connection::begin_closing() {
  if (state_ == State::closed) return;
  state_ = State::closing;
}

void Connection::drop_upstream() {
  if (connecting_fd_) {
    rt_.loop.unwatch(upstream_fd_number_);
    connecting_fd_.reset();
  }
  if (upstream_) {
    rt_.loop.unwatch(upstream_fd_number_);
    // The stream (and its fd) go after the turn: its handler may be running.
    rt_.loop.defer([s = std::shared_ptr<TlsStream>(std::move(upstream_))] {});
  }
  upstream_fd_number_ = -1;
}

void Connection::close_now() {
  if (state_ == State::closed) return;
  state_ = State::closed;
  drop_upstream();
  rt_.loop.unwatch(guest_fd_number_);
  if (timer_ != 0) {
    rt_.loop.cancel(timer_);
    timer_ = 0;
  }
  if (resolve_ticket_ != 0) {
    rt_.resolver.cancel(resolve_ticket_);
    resolve_ticket_ = 0;
  }
  rt_.on_closed(this);
}

void Connection::update_interest() {
  std::uint32_t guest_events = 0;
  switch (state_) {
    case State::handoff:
    case State::handshake:
    case State::body:
    case State::tunnel:
      guest_events = EPOLLIN;
      break;
    case State::head:
      // Not while a response is still queued: reading waits for the flush.
      guest_events = EPOLLIN;
      break;
    default:
      break;
  }
  if (guest_ && guest_->wants_read_event()) guest_events |= EPOLLIN;
  if (guest_ && guest_->wants_write_event()) guest_events |= EPOLLOUT;
  rt_.loop.modify(guest_fd_number_, guest_events);
  if (upstream_fd_number_ >= 0) {
    std::uint32_t up_events = 0;
    if (state_ == State::connect) up_events = EPOLLOUT;
    if (upstream_) {
      if (state_ == State::upstream_handshake) {
        up_events = upstream_->wants_read_event() ? std::uint32_t{EPOLLIN} : 0u;
        if (upstream_->wants_write_event()) up_events |= EPOLLOUT;
      } else {
        if (guest_->queued_bytes() < rt_.limits.max_buffered_bytes) up_events |= EPOLLIN;
        if (upstream_->wants_write_event()) up_events |= EPOLLOUT;
      }
    }
    rt_.loop.modify(upstream_fd_number_, up_events);
  }
}

void Connection::arm_timer(base::Millis timeout) {
  timeout_ = timeout;
  last_activity_ = rt_.loop.now();
  if (timer_ != 0) return;  // the running timer re-checks last_activity_
  timer_ = rt_.loop.schedule(last_activity_ + timeout_, [this] { on_timer(); });
}

void Connection::on_timer() {
  timer_ = 0;
  if (state_ == State::closed) return;
  auto due = last_activity_ + timeout_;
  if (rt_.loop.now() < due) {
    timer_ = rt_.loop.schedule(due, [this] { on_timer(); });
    return;
  }
  ++rt_.accounting.service().idle_timeouts;
  std::string_view what = state_ == State::handoff || state_ == State::handshake ? "handshake" : "idle";
  if (state_ == State::resolve || state_ == State::connect || state_ == State::upstream_handshake) {
    fail_upstream(GateReason::upstream_connect_failed, "upstream timed out");
    drive();
    return;
  }
  rt_.events.emit("broker_timeout", {{"what", what}, {"sni", sni_}});
  close_now();
}

}  // namespace abox::broker
