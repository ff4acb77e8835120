// WebSocket relay. How this works: a frame's header (2 to 14 bytes) is
// gathered into header_ through a ByteReader, byte by byte as it arrives;
// once whole it is checked and the payload is taken in runs. A data
// frame's run goes through the message's scrubber into run_, which becomes
// one frame for the guest at the end of the frame or of the call; a control
// frame's payload is gathered (at most 125 bytes) and written at its end.
#include "broker/websocket_relay.h"

#include "base/byte_reader.h"

namespace abox::broker {

namespace {

constexpr std::uint8_t kContinuation = 0x0;
constexpr std::uint8_t kText = 0x1;
constexpr std::uint8_t kBinary = 0x2;
constexpr std::uint8_t kClose = 0x8;
constexpr std::uint8_t kPing = 0x9;
constexpr std::uint8_t kPong = 0xA;
constexpr std::size_t kMaxControlPayload = 125;

std::string_view chars_of(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace

std::string_view to_string(WebSocketError e) {
  switch (e) {
    case WebSocketError::reserved_bits:
      return "reserved_bits";
    case WebSocketError::masked:
      return "masked";
    case WebSocketError::opcode:
      return "opcode";
    case WebSocketError::control_frame:
      return "control_frame";
    case WebSocketError::length:
      return "length";
    case WebSocketError::continuation:
      return "continuation";
    case WebSocketError::message_in_message:
      return "message_in_message";
  }
  return "unknown";
}

void append_websocket_frame(bool fin, std::uint8_t opcode, std::string_view payload, std::string& out) {
  out.push_back(static_cast<char>((fin ? 0x80 : 0x00) | opcode));
  const std::uint64_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(n));
  } else if (n <= 0xFFFF) {
    out.push_back(static_cast<char>(126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n & 0xFF));
  } else {
    out.push_back(static_cast<char>(127));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xFF));
  }
  out.append(payload);
}

void WebSocketRelay::start(std::string_view key) {
  data_scrubber_.reset(key);
  control_scrubber_.reset(key);
  header_have_ = 0;
  header_need_ = 2;
  in_payload_ = false;
  in_message_ = false;
  message_started_out_ = false;
  run_.clear();
  control_.clear();
  failed_ = false;
}

base::Result<std::size_t, WebSocketError> WebSocketRelay::fail(WebSocketError e) {
  failed_ = true;
  error_ = e;
  return base::Err{e};
}

base::Result<void, WebSocketError> WebSocketRelay::begin_frame() {
  const std::uint8_t b0 = header_[0];
  const std::uint8_t b1 = header_[1];
  fin_ = (b0 & 0x80) != 0;
  opcode_ = b0 & 0x0F;
  if ((b0 & 0x70) != 0) return base::Err{WebSocketError::reserved_bits};
  if ((b1 & 0x80) != 0) return base::Err{WebSocketError::masked};
  const std::uint8_t len7 = b1 & 0x7F;
  std::uint64_t length = len7;
  if (len7 == 126) {
    length = (std::uint64_t{header_[2]} << 8) | header_[3];
  } else if (len7 == 127) {
    if ((header_[2] & 0x80) != 0) return base::Err{WebSocketError::length};
    length = 0;
    for (std::size_t i = 2; i < 10; ++i) length = (length << 8) | header_[i];
  }
  switch (opcode_) {
    case kContinuation:
      if (!in_message_) return base::Err{WebSocketError::continuation};
      break;
    case kText:
    case kBinary:
      if (in_message_) return base::Err{WebSocketError::message_in_message};
      in_message_ = true;
      message_opcode_ = opcode_;
      message_started_out_ = false;
      break;
    case kClose:
    case kPing:
    case kPong:
      if (!fin_ || length > kMaxControlPayload) return base::Err{WebSocketError::control_frame};
      control_.clear();
      break;
    default:
      return base::Err{WebSocketError::opcode};
  }
  remaining_ = length;
  in_payload_ = true;
  return {};
}

void WebSocketRelay::emit_data(bool fin, std::string& out) {
  if (run_.empty() && !fin) return;
  append_websocket_frame(fin, message_started_out_ ? kContinuation : message_opcode_, run_, out);
  message_started_out_ = true;
  run_.clear();
}

void WebSocketRelay::end_frame(std::string& out) {
  in_payload_ = false;
  header_have_ = 0;
  header_need_ = 2;
  if (opcode_ >= kClose) {
    std::string scrubbed;
    control_scrubber_.feed(control_, scrubbed);
    control_scrubber_.finish(scrubbed);
    append_websocket_frame(true, opcode_, scrubbed, out);
    control_.clear();
    return;
  }
  if (fin_) {
    data_scrubber_.finish(run_);  // the message ends: what was held cannot be the key
    emit_data(true, out);
    in_message_ = false;
    message_started_out_ = false;
  }
}

base::Result<std::size_t, WebSocketError> WebSocketRelay::feed(std::span<const std::uint8_t> in,
                                                               std::string& out) {
  if (failed_) return base::Err{error_};
  base::ByteReader r(in);
  while (!r.empty()) {
    if (!in_payload_) {
      header_[header_have_++] = *r.u8();  // not empty
      if (header_have_ == 2) {
        const std::uint8_t len7 = header_[1] & 0x7F;
        header_need_ = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + ((header_[1] & 0x80) != 0 ? 4 : 0);
      }
      if (header_have_ < header_need_) continue;
      if (auto ok = begin_frame(); !ok.ok()) return fail(ok.error());
      if (remaining_ == 0) end_frame(out);
      continue;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, r.remaining()));
    auto payload = chars_of(*r.bytes(n));  // n <= remaining()
    remaining_ -= n;
    if (opcode_ >= kClose) {
      control_.append(payload);
    } else {
      data_scrubber_.feed(payload, run_);
    }
    if (remaining_ == 0) end_frame(out);
  }
  // What this read let out of the message so far goes now (a fragment is
  // not held back waiting for the next one).
  if (in_message_) emit_data(false, out);
  return in.size();
}

}  // namespace abox::broker
