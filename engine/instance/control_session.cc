#include "engine/instance/control_session.h"

#include <boost/asio/error.hpp>
#include <boost/asio/write.hpp>

#include "base/byte_reader.h"

namespace abox::engine {

using guest::GuestMessage;
using guest::HostMessage;

ControlSession::ControlSession(boost::asio::local::stream_protocol::socket socket, Listener& listener)
    : socket_(std::move(socket)), listener_(listener) {}

ControlSession::~ControlSession() {
  *alive_ = false;
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void ControlSession::start() {
  open_ = true;
  read_more();
}

void ControlSession::close() {
  open_ = false;
  *alive_ = false;
  alive_ = std::make_shared<bool>(true);
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void ControlSession::read_more() {
  auto space = reader_.space();
  socket_.async_read_some(boost::asio::buffer(space.data(), space.size()),
                          [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
                            if (!*alive) return;
                            if (n > 0) reader_.commit(n);
                            handle_frames();
                            if (!*alive || !open_) return;
                            if (ec) {
                              open_ = false;
                              std::string reason;
                              if (ec != boost::asio::error::eof) reason = "control channel: " + ec.message();
                              if (reader_.buffered() > 0 && reason.empty())
                                reason = "control channel closed inside a frame";
                              listener_.on_closed(reason);
                              return;
                            }
                            read_more();
                          });
}

void ControlSession::handle_frames() {
  auto alive = alive_;
  for (;;) {
    auto f = reader_.next();
    if (!f.ok()) {
      auto e = f.error();
      if (e == guest::FrameError::kBadMac || e == guest::FrameError::kBadSequence) {
        ++forged_;
        listener_.on_forged_frame(guest::frame_error_name(e));
        if (!*alive || !open_) return;
        if (forged_ > static_cast<std::uint64_t>(kMaxForgedFrames)) {
          fail("control channel: more than " + std::to_string(kMaxForgedFrames) + " frames failed their MAC");
          return;
        }
        continue;
      }
      fail("control channel: " + std::string(guest::frame_error_name(e)));
      return;
    }
    if (!*f) return;
    if (!dispatch(**f)) return;
    if (!*alive || !open_) return;
  }
}

void ControlSession::fail(std::string reason) {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ignored;
  socket_.close(ignored);
  listener_.on_closed(reason);
}

ControlSession::SessionCredits* ControlSession::session_of(std::uint32_t session, std::uint8_t type) {
  auto it = sessions_.find(session);
  if (it != sessions_.end()) return &it->second;
  // A guest that names a session the host never opened, or one whose end
  // came already: dropped and counted; every other session goes on.
  ++unknown_session_frames_;
  listener_.on_unknown_session(guest::guest_message_name(type), session);
  return nullptr;
}

bool ControlSession::dispatch_session(const guest::Frame& frame) {
  auto name = guest::guest_message_name(frame.type);
  auto malformed = [&] {
    fail("control channel: a malformed " + std::string(name) + " message");
    return false;
  };
  auto out_of_order = [&] {
    fail("control channel: " + std::string(name) + " out of order");
    return false;
  };
  auto p = frame.payload;
  // Each message names its session first: which one, and whether the frame
  // is in its place, decide before anything else does.
  std::uint32_t id = 0;
  {
    base::ByteReader r(p);
    auto session = r.u32be();
    if (!session) return malformed();
    id = *session;
  }
  const bool main = id == guest::kMainSession;
  // No command session exists before setup: the guest that says otherwise
  // is out of order (as before version 3). The main command's messages come
  // only after go (and its end, once).
  if (phase_ == Phase::kAwaitHello || phase_ == Phase::kHelloReceived) return out_of_order();
  if (main && phase_ != Phase::kGoSent) return out_of_order();
  SessionCredits* s = session_of(id, frame.type);
  if (s == nullptr) return true;
  switch (static_cast<GuestMessage>(frame.type)) {
    case GuestMessage::kStarted: {
      auto m = guest::decode_started(p);
      if (!m) return malformed();
      if (s->started) return out_of_order();
      s->started = true;
      listener_.on_started(*m);
      return true;
    }
    case GuestMessage::kStartFailed: {
      auto m = guest::decode_start_failed(p);
      if (!m) return malformed();
      if (s->started) return out_of_order();
      if (main)
        phase_ = Phase::kExited;
      else
        sessions_.erase(id);
      listener_.on_start_failed(*m);
      return true;
    }
    case GuestMessage::kStdout:
    case GuestMessage::kStderr: {
      auto m = guest::decode_session_data(p);
      if (!m) return malformed();
      if (m->bytes.size() > s->output) {
        fail("control channel: the guest sent " + std::to_string(m->bytes.size()) + " bytes of output with " +
             std::to_string(s->output) + " bytes of credit (session " + std::to_string(id) + ")");
        return false;
      }
      s->output -= m->bytes.size();
      listener_.on_output(id, frame.type == static_cast<std::uint8_t>(GuestMessage::kStderr), m->bytes);
      return true;
    }
    case GuestMessage::kExited: {
      auto m = guest::decode_exited(p);
      if (!m) return malformed();
      if (!s->started) return out_of_order();
      if (main)
        phase_ = Phase::kExited;
      else
        sessions_.erase(id);
      listener_.on_exited(*m);
      return true;
    }
    case GuestMessage::kStdinCredit: {
      auto m = guest::decode_session_credit(p);
      if (!m) return malformed();
      // Credit only ever adds up to a bounded amount: a guest cannot make the
      // host buffer more stdin than it reads itself.
      s->stdin = std::min<std::uint64_t>(s->stdin + m->bytes, kMaxStdinCredit);
      listener_.on_stdin_credit(id, m->bytes);
      return true;
    }
    default:
      break;
  }
  return malformed();
}

bool ControlSession::dispatch(const guest::Frame& frame) {
  auto name = guest::guest_message_name(frame.type);
  auto malformed = [&] {
    fail("control channel: a malformed " + std::string(name) + " message");
    return false;
  };
  auto out_of_order = [&] {
    fail("control channel: " + std::string(name) + " out of order");
    return false;
  };
  auto p = frame.payload;
  switch (static_cast<GuestMessage>(frame.type)) {
    case GuestMessage::kHello: {
      if (phase_ != Phase::kAwaitHello) return out_of_order();
      auto m = guest::decode_hello(p);
      if (!m) return malformed();
      phase_ = Phase::kHelloReceived;
      listener_.on_hello(*m);
      return true;
    }
    case GuestMessage::kSelftestReport: {
      if (phase_ != Phase::kSetupSent || !probes_expected_ || report_received_) return out_of_order();
      auto m = guest::decode_selftest_report(p);
      if (!m) return malformed();
      report_received_ = true;
      listener_.on_selftest(*m);
      return true;
    }
    case GuestMessage::kStarted:
    case GuestMessage::kStartFailed:
    case GuestMessage::kStdout:
    case GuestMessage::kStderr:
    case GuestMessage::kExited:
    case GuestMessage::kStdinCredit:
      return dispatch_session(frame);
    case GuestMessage::kLog: {
      if (phase_ == Phase::kAwaitHello || phase_ == Phase::kHelloReceived) return out_of_order();
      auto m = guest::decode_log(p);
      if (!m) return malformed();
      listener_.on_guest_log(m->text);
      return true;
    }
    case GuestMessage::kCopyInDone: {
      if (!copy_in_open_ || !copy_in_ended_) return out_of_order();
      auto m = guest::decode_copy_result(p);
      if (!m) return malformed();
      copy_in_open_ = copy_in_ended_ = false;
      listener_.on_copy_in_done(*m);
      return true;
    }
    case GuestMessage::kCopyOutData: {
      if (!copy_out_open_) return out_of_order();
      if (p.size() > copy_credit_) {
        fail("control channel: the guest sent " + std::to_string(p.size()) + " bytes of a copy with " +
             std::to_string(copy_credit_) + " bytes of credit");
        return false;
      }
      copy_credit_ -= p.size();
      listener_.on_copy_out_data(p);
      return true;
    }
    case GuestMessage::kCopyOutDone: {
      if (!copy_out_open_) return out_of_order();
      auto m = guest::decode_copy_result(p);
      if (!m) return malformed();
      copy_out_open_ = false;
      copy_credit_ = 0;
      listener_.on_copy_out_done(*m);
      return true;
    }
  }
  fail("control channel: unknown message type " + std::to_string(frame.type));
  return false;
}

void ControlSession::send(HostMessage type, std::span<const std::uint8_t> payload) {
  if (!open_) return;
  std::vector<std::uint8_t> frame;
  frame.reserve(guest::kHeaderBytes + payload.size() + guest::kMacBytes);
  writer_.append(frame, static_cast<std::uint8_t>(type), payload);
  outbox_.push_back(std::move(frame));
  if (!writing_) write_more();
}

void ControlSession::write_more() {
  if (outbox_.empty() || !open_) {
    writing_ = false;
    if (outbox_.empty() && open_ && on_drain_) on_drain_();
    return;
  }
  writing_ = true;
  boost::asio::async_write(socket_, boost::asio::buffer(outbox_.front()),
                           [this, alive = alive_](const boost::system::error_code& ec, std::size_t) {
                             if (!*alive) return;
                             outbox_.pop_front();
                             if (ec) {
                               writing_ = false;
                               if (open_) fail("control channel: write: " + ec.message());
                               return;
                             }
                             write_more();
                           });
}

void ControlSession::send_setup(const guest::Setup& setup) {
  std::vector<std::uint8_t> payload;
  guest::encode(setup, payload);
  send(HostMessage::kSetup, payload);  // unkeyed: it carries the key
  writer_.set_key(setup.key);
  reader_.set_key(setup.key);
  sessions_[guest::kMainSession] = SessionCredits{setup.output_credit, 0, false};
  probes_expected_ = !setup.probes.empty();
  phase_ = Phase::kSetupSent;
}

void ControlSession::send_go() {
  send(HostMessage::kGo, {});
  phase_ = Phase::kGoSent;
}

bool ControlSession::open_exec(const guest::Exec& exec) {
  if (!open_ || exec.session == guest::kMainSession || exec.session <= highest_exec_) return false;
  std::vector<std::uint8_t> payload;
  guest::encode(exec, payload);
  if (payload.size() > guest::kMaxPayload) return false;
  highest_exec_ = exec.session;
  sessions_[exec.session] = SessionCredits{exec.output_credit, 0, false};
  send(HostMessage::kExec, payload);
  return true;
}

std::uint64_t ControlSession::stdin_credit(std::uint32_t session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? 0 : it->second.stdin;
}

std::uint64_t ControlSession::output_credit_left(std::uint32_t session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? 0 : it->second.output;
}

void ControlSession::send_stdin(std::uint32_t session, std::span<const std::uint8_t> bytes) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.stdin -= std::min<std::uint64_t>(it->second.stdin, bytes.size());
  std::vector<std::uint8_t> payload;
  guest::encode(guest::SessionData{session, bytes}, payload);
  send(HostMessage::kStdin, payload);
}

void ControlSession::send_stdin_eof(std::uint32_t session) {
  if (!session_open(session)) return;
  std::vector<std::uint8_t> payload;
  guest::encode(guest::SessionRef{session}, payload);
  send(HostMessage::kStdinEof, payload);
}

void ControlSession::grant_output(std::uint32_t session, std::uint32_t bytes) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.output += bytes;
  std::vector<std::uint8_t> payload;
  guest::encode(guest::SessionCredit{session, bytes}, payload);
  send(HostMessage::kOutputCredit, payload);
}

void ControlSession::send_signal(std::uint32_t session, int signo) {
  if (!session_open(session)) return;
  std::vector<std::uint8_t> payload;
  guest::encode(guest::Signal{session, static_cast<std::uint8_t>(signo)}, payload);
  send(HostMessage::kSignal, payload);
}

void ControlSession::send_poweroff() {
  send(HostMessage::kPoweroff, {});
}

void ControlSession::send_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols) {
  if (!session_open(session)) return;
  std::vector<std::uint8_t> payload;
  guest::encode(guest::Resize{session, {rows, cols}}, payload);
  send(HostMessage::kResize, payload);
}

std::size_t ControlSession::queued_bytes() const {
  std::size_t n = 0;
  for (const auto& f : outbox_) n += f.size();
  return n;
}

void ControlSession::begin_copy_in(const std::string& path) {
  std::vector<std::uint8_t> payload;
  guest::encode(guest::CopyPath{path}, payload);
  send(HostMessage::kCopyIn, payload);
  copy_in_open_ = true;
  copy_in_ended_ = false;
}

void ControlSession::send_copy_data(std::span<const std::uint8_t> bytes) {
  send(HostMessage::kCopyData, bytes);
}

void ControlSession::end_copy_in() {
  send(HostMessage::kCopyEnd, {});
  copy_in_ended_ = true;
}

void ControlSession::begin_copy_out(const std::string& path, std::uint32_t credit) {
  std::vector<std::uint8_t> payload;
  guest::encode(guest::CopyPath{path}, payload);
  send(HostMessage::kCopyOut, payload);
  copy_out_open_ = true;
  grant_copy(credit);
}

void ControlSession::grant_copy(std::uint32_t bytes) {
  copy_credit_ += bytes;
  std::vector<std::uint8_t> payload;
  guest::encode(guest::Credit{bytes}, payload);
  send(HostMessage::kCopyCredit, payload);
}

}  // namespace abox::engine
