// Connection, guest half: the hand-off line, TLS with the SNI callback, the
// request head and body, the gate, refusals, interest and timers (see
// connection.h for the whole state machine).
#include "broker/connection.h"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "broker/upstream_head.h"
#include "policy/name.h"

namespace abox::broker {

namespace {

std::string_view status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 408:
      return "Request Timeout";
    case 429:
      return "Too Many Requests";
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
  // A connection destroyed open (the service going, a start() that failed
  // after its watch) leaves no handler behind that names it.
  if (state_ != State::closed) {
    if (upstream_fd_number_ >= 0) rt_.loop.unwatch(upstream_fd_number_);
    rt_.loop.unwatch(guest_fd_number_);
  }
  rt_.loop.io().cancel(timer_);
  if (resolve_ticket_ != 0) rt_.resolver.cancel(resolve_ticket_);
  if (counted_handshake_) --rt_.accounting.service().handshakes_in_progress;
  wipe_string(upstream_request_);
}

bool Connection::start() {
  ++rt_.accounting.service().handshakes_in_progress;
  counted_handshake_ = true;
  if (!rt_.loop.watch(guest_fd_number_, POLLIN, [this](std::uint32_t ev) { on_guest_events(ev); }))
    return false;
  arm_timer(rt_.limits.handshake_timeout);
  // A deadline too: every byte of a trickled ClientHello resets the idle timer.
  set_deadline(Deadline::handshake, rt_.limits.handshake_timeout);
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

void Connection::on_guest_events(std::uint32_t events) {
  if ((events & ~std::uint32_t{POLLOUT}) != 0) guest_quiet_ = false;
  drive();
}

void Connection::on_upstream_events(std::uint32_t events) {
  if ((events & ~std::uint32_t{POLLOUT}) != 0) upstream_quiet_ = false;
  drive();
}

void Connection::drive() {
  if (state_ == State::closed) return;
  last_activity_ = rt_.loop.now();
  // Bounded: each step either makes progress on a bounded buffer or returns
  // false; the guard stops a bug from spinning the loop forever.
  for (int guard = 0; guard < 10'000 && state_ != State::closed; ++guard) {
    if (!step()) break;
  }
  // A step that began closing returns false; with nothing left to flush no
  // readiness would ever come back for it (the provider ending a tunnel
  // kept the guest's connection open until the idle time-out).
  if (state_ == State::closing) step_closing();
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
      enter_head_state();
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

void Connection::enter_head_state() {
  state_ = State::head;
  method_.clear();  // no request yet: a refusal's event names none
  path_.clear();
  clear_deadline();
  head_start_bytes_ = guest_->bytes_received();
  arm_timer(rt_.limits.idle_timeout);
}

void Connection::start_head_deadline_at_first_byte() {
  if (deadline_what_ == Deadline::head) return;
  if (in_.empty() && guest_->bytes_received() == head_start_bytes_) return;
  set_deadline(Deadline::head, rt_.limits.head_deadline);
}

bool Connection::step_head() {
  if (state_ != State::head) return false;
  start_head_deadline_at_first_byte();
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
  if (guest_quiet_ && !guest_->has_pending()) return false;
  bool read = read_guest(limit - in_.size());
  if (state_ == State::head) start_head_deadline_at_first_byte();  // also a record that did not decrypt yet
  return read;
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
  // The provider asked for a pause on this binding (backoff_table.h): the
  // broker answers for it, and nothing goes upstream.
  if (auto left = rt_.backoffs.held_back(binding_index_, rt_.loop.now())) {
    refuse_backoff(*left);
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
  relay_.start(key);
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
  set_deadline(Deadline::body, rt_.limits.body_deadline);
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
  clear_deadline();
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
  answer_and_close(status, reason, detail, "");
}

void Connection::refuse_backoff(std::uint32_t seconds_left) {
  count_refusal("provider_backoff");
  rt_.events.emit("broker_refused", {{"reason", "provider_backoff"},
                                     {"status", 429},
                                     {"sni", sni_},
                                     {"method", method_},
                                     {"binding", binding_->name},
                                     {"retry_after", static_cast<std::uint64_t>(seconds_left)}});
  const std::string where = binding_->name + ":" + std::to_string(binding_->port);
  answer_and_close(
      429, "provider_backoff",
      "abox broker: this answer is the broker's, not the provider's: the request was not sent. The "
      "provider of " +
          where + " answered an earlier request with 429 or 503 and Retry-After; until then the " +
          "broker answers for it. Retry after " + std::to_string(seconds_left) + " s.",
      "\r\nretry-after: " + std::to_string(seconds_left));
}

void Connection::answer_and_close(int status, std::string_view reason, std::string_view detail,
                                  std::string_view extra_header_lines) {
  std::string body = std::string(detail) + "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) +
                         "\r\nabox-refused: " + std::string(reason) + std::string(extra_header_lines) +
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
  clear_deadline();  // (what is queued is flushed within the idle time-out)
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
  rt_.loop.io().cancel(timer_);
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
      guest_events = POLLIN;
      break;
    case State::head:
      // Not while a response is still queued: reading waits for the flush.
      guest_events = POLLIN;
      break;
    default:
      break;
  }
  if (guest_ && guest_->wants_read_event()) guest_events |= POLLIN;
  if (guest_ && guest_->wants_write_event()) guest_events |= POLLOUT;
  rt_.loop.modify(guest_fd_number_, guest_events);
  if (upstream_fd_number_ >= 0) {
    std::uint32_t up_events = 0;
    if (state_ == State::connect) up_events = POLLOUT;
    if (upstream_) {
      if (state_ == State::upstream_handshake) {
        up_events = upstream_->wants_read_event() ? std::uint32_t{POLLIN} : 0u;
        if (upstream_->wants_write_event()) up_events |= POLLOUT;
      } else {
        if (guest_->queued_bytes() < rt_.limits.max_buffered_bytes) up_events |= POLLIN;
        if (upstream_->wants_write_event()) up_events |= POLLOUT;
      }
    }
    rt_.loop.modify(upstream_fd_number_, up_events);
  }
}

void Connection::arm_timer(base::Millis timeout) {
  timeout_ = timeout;
  last_activity_ = rt_.loop.now();
  schedule_timer();
}

void Connection::set_deadline(Deadline what, base::Millis after) {
  deadline_what_ = what;
  deadline_ = rt_.loop.now() + after;
  schedule_timer();
}

void Connection::schedule_timer() {
  base::MonoTime due = last_activity_ + timeout_;
  if (deadline_what_ != Deadline::none && deadline_ < due) due = deadline_;
  // A timer due no later re-checks both clocks when it fires; a later one
  // (an idle time-out when a shorter one is armed) is moved up.
  if (timer_.scheduled() && timer_.due() <= due) return;
  rt_.loop.io().schedule(timer_, due);
}

void Connection::on_deadline() {
  Deadline what = deadline_what_;
  clear_deadline();
  auto& service = rt_.accounting.service();
  switch (what) {
    case Deadline::none:
      return;
    case Deadline::handshake:
      ++service.handshake_timeouts;
      rt_.events.emit("broker_timeout", {{"what", "handshake"}, {"sni", sni_}});
      close_now();
      return;
    case Deadline::head:
      ++service.head_timeouts;
      refuse(408, "head_timeout", "the request head did not arrive within [timeouts] http_head_ms");
      break;
    case Deadline::body:
      ++service.body_timeouts;
      refuse(408, "body_timeout", "the request body did not arrive within [timeouts] http_body_ms");
      break;
  }
  drive();  // flush the answer and close
}

void Connection::on_timer() {
  if (state_ == State::closed) return;
  const base::MonoTime now = rt_.loop.now();
  if (deadline_what_ != Deadline::none && now >= deadline_) {
    on_deadline();
    return;
  }
  if (now < last_activity_ + timeout_) {
    schedule_timer();
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
