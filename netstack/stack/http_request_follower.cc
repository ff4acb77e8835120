// Request follower. How this works:
//
// A small state machine over the flow's bytes: head -> (body ->) head ...,
// with a detour through tls_hello after a request that asked to upgrade to
// TLS, and opaque once that upgrade's ClientHello has passed. Each feed()
// call does one step of it and says how far it read, so the caller can check
// a head's Host before it sends the bytes that end the head, and send
// everything before them as it comes.
//
// A head is read by the shared reader where it lies when it starts and ends
// in the same piece. Otherwise its bytes are copied into pending_ (never
// more than limit_), and the reader reads pending_ again when a piece could
// change its answer (it holds a control byte, LF and CR included, or the
// last piece ended in a CR; see may_decide()) or pending_ is full; the
// reader refuses a head that is not done within limit_ bytes. So the
// follower decides exactly where a reading of the whole flow would, however
// it is cut (the http_follower fuzz target checks this; an LF-only rule it
// found wanting let a NUL byte in a head pass unnoticed when no LF came
// after it). Since only an LF can end a head, and the last read of pending_
// said "not yet", the head ends inside the piece that made it complete:
// `consumed` is the head's length less what pending_ held.
#include "netstack/stack/http_request_follower.h"

#include <algorithm>
#include <limits>

namespace abox::netstack {

namespace {

using Bytes = std::span<const std::uint8_t>;

constexpr std::uint8_t kTlsHandshakeRecord = 0x16;

FollowStep more(std::size_t consumed) {
  FollowStep s;
  s.kind = FollowStep::Kind::more;
  s.consumed = consumed;
  return s;
}

FollowStep refused(FollowError e) {
  FollowStep s;
  s.kind = FollowStep::Kind::refused;
  s.error = e;
  return s;
}

// Whether the reader could decide more once `piece` is appended to a head
// it last found unfinished: only a line that completes (an LF) or a byte it
// refuses as it meets it (a control byte: CR, LF, NUL ... DEL) can change
// its answer, and a CR it left waiting at the end (`after_cr`), which the
// piece's first byte settles.
bool may_decide(Bytes piece, bool after_cr) {
  if (after_cr) return true;
  return std::any_of(piece.begin(), piece.end(), [](std::uint8_t c) { return base::http1::is_control(c); });
}

// "TLS" or "TLS/" and a version of digits and dots (RFC 2817 section 3.1).
bool is_tls_protocol(std::string_view p) {
  if (p.size() < 3 || !base::http1::iequals(p.substr(0, 3), "tls")) return false;
  p.remove_prefix(3);
  if (p.empty()) return true;
  if (p.front() != '/' || p.size() == 1) return false;
  p.remove_prefix(1);
  return std::all_of(p.begin(), p.end(), [](char c) { return base::http1::is_digit(c) || c == '.'; });
}

// One Upgrade header, every protocol in it TLS.
bool upgrades_to_tls_only(const base::http1::RequestHead& head) {
  if (head.upgrade_fields != 1 || head.upgrade.empty()) return false;
  std::string_view list = head.upgrade;
  for (;;) {
    const std::size_t comma = list.find(',');
    if (!is_tls_protocol(base::http1::trim_ows(list.substr(0, comma)))) return false;
    if (comma == std::string_view::npos) return true;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

HttpRequestFollower::HttpRequestFollower(std::size_t limit)
    : limit_(std::min(limit, kMaxPeekLimit)),
      rules_(http_request_rules(limit_)),
      body_limits_{std::numeric_limits<std::uint64_t>::max(), kMaxRequestFields, limit_},
      body_(base::http1::BodyFraming::none, 0, body_limits_) {}

FollowStep HttpRequestFollower::refuse(FollowStep step) {
  step.kind = FollowStep::Kind::refused;
  step.consumed = 0;
  state_ = State::refused;
  refusal_ = step;
  return step;
}

FollowStep HttpRequestFollower::feed(Bytes in) {
  if (state_ == State::refused) return refusal_;
  if (in.empty()) return more(0);
  switch (state_) {
    case State::head:
      if (tls_may_follow_ && pending_.empty()) {
        tls_may_follow_ = false;
        if (in.front() == kTlsHandshakeRecord) {
          state_ = State::tls_hello;
          return read_tls_hello(in);
        }
      }
      return read_head(in);
    case State::body: {
      auto step = body_.feed(in);
      if (!step) {
        FollowStep s = refused(FollowError::body);
        s.http = step.error();
        return refuse(s);
      }
      if (body_.done()) state_ = State::head;
      return more(step->consumed);
    }
    case State::tls_hello:
      return read_tls_hello(in);
    case State::opaque:
      return more(in.size());
    case State::refused:
      break;
  }
  return refusal_;
}

FollowStep HttpRequestFollower::read_head(Bytes in) {
  base::http1::RequestHead head;
  if (pending_.empty()) {
    auto r = base::http1::read_request_head(in, rules_, head);
    if (!r) {
      FollowStep s = refused(FollowError::head);
      s.http = r.error();
      return refuse(s);
    }
    if (*r == base::http1::HeadStatus::complete) return finish_head(head, head.head_bytes);
    // Not done, and (the reader said so) shorter than limit_.
    pending_.assign(in.begin(), in.end());
    return more(in.size());
  }
  const std::size_t held = pending_.size();
  const bool after_cr = pending_.back() == '\r';
  const Bytes piece = in.first(std::min(in.size(), limit_ - held));
  pending_.insert(pending_.end(), piece.begin(), piece.end());
  if (!may_decide(piece, after_cr) && pending_.size() < limit_) return more(piece.size());
  auto r = base::http1::read_request_head(pending_, rules_, head);
  if (!r) {
    FollowStep s = refused(FollowError::head);
    s.http = r.error();
    return refuse(s);
  }
  if (*r == base::http1::HeadStatus::need_more) return more(piece.size());
  // The head ends in this piece (see the top of the file).
  FollowStep s = finish_head(head, head.head_bytes - held);
  pending_.clear();
  return s;
}

FollowStep HttpRequestFollower::finish_head(const base::http1::RequestHead& head, std::size_t consumed) {
  FollowStep s;
  const PeekError host_error = read_http_host(head.host, s.name);
  if (host_error != PeekError::none) {
    FollowStep r = refused(FollowError::host);
    r.peek.status = PeekStatus::malformed;
    r.peek.error = host_error;
    return refuse(r);
  }
  if (head.wants_upgrade) {
    if (!upgrades_to_tls_only(head)) return refuse(refused(FollowError::upgrade));
    tls_may_follow_ = true;
    upgrade_host_ = s.name;
  }
  body_ = base::http1::BodyDecoder(head.framing, head.content_length, body_limits_);
  state_ = body_.done() ? State::head : State::body;
  ++requests_;
  s.kind = FollowStep::Kind::request;
  s.consumed = consumed;
  return s;
}

FollowStep HttpRequestFollower::read_tls_hello(Bytes in) {
  const Bytes piece = in.first(std::min(in.size(), limit_ - pending_.size()));
  pending_.insert(pending_.end(), piece.begin(), piece.end());
  const PeekResult r = peek_name(pending_, limit_);
  if (r.status == PeekStatus::need_more) return more(piece.size());
  pending_.clear();
  if (r.status != PeekStatus::tls_sni || r.name.view() != upgrade_host_.view()) {
    FollowStep s = refused(FollowError::tls_upgrade);
    s.peek = r;
    return refuse(s);
  }
  state_ = State::opaque;
  pending_.shrink_to_fit();
  FollowStep s;
  s.kind = FollowStep::Kind::request;
  s.consumed = piece.size();
  s.name = r.name;
  return s;
}

std::string describe(const FollowStep& step) {
  std::string out;
  switch (step.error) {
    case FollowError::none:
      return "no error";
    case FollowError::head:
      out = "a request head is refused: ";
      out += step.http == base::http1::Error::head_too_large ? "it is longer than peek_bytes"
                                                             : base::http1::describe(step.http);
      return out;
    case FollowError::host:
      out = "a request's Host is refused: ";
      out += describe(step.peek.error);
      return out;
    case FollowError::body:
      out = "a request body's framing is refused: ";
      out += base::http1::describe(step.http);
      return out;
    case FollowError::upgrade:
      return "a request asks to upgrade to something other than TLS";
    case FollowError::tls_upgrade:
      out = "after an upgrade to TLS, not a ClientHello naming the upgraded host: ";
      out += to_string(step.peek.status);
      if (!step.peek.name.view().empty()) {
        out += " ";
        out += step.peek.name.view();
      }
      if (step.peek.error != PeekError::none) {
        out += " (";
        out += describe(step.peek.error);
        out += ")";
      }
      return out;
  }
  return "the flow cannot be followed";
}

}  // namespace abox::netstack
