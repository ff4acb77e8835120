// Body decoder. How this works:
//
// A state machine over the framing, fed whatever bytes arrived. Framing
// bytes (chunk-size lines, CRLFs) are read one at a time through a
// ByteReader, so a piece may end anywhere, even inside "\r\n"; payload
// bytes are taken in one run, as much of the current chunk (or Content-Length)
// as this piece holds, and handed back as a view so the broker can forward
// them at once. Each call returns at most one payload run; the caller loops.
// The state is a few integers: nothing grows with the body.
//
// Limits: a chunk size of at most 16 hex digits (so it cannot overflow 64
// bits), chunk extensions of at most kMaxChunkExtensionBytes, and the sum of
// payload bytes at most max_body_bytes, checked when a chunk size is read
// (before its data is forwarded) and, for Content-Length, at construction.
// Trailer fields, where allowed, are counted as they start and their bytes
// as they are read, so a refusal comes at the first byte over a limit.
//
// Trailer bytes are never in the same step as other bytes: before a byte
// that starts a trailer field (or the first byte after one), a call that
// already consumed bytes of the other kind returns, so the caller can pass
// on whole steps or drop whole steps.
#include "base/http1_body.h"

#include <algorithm>
#include <string_view>

#include "base/byte_reader.h"

namespace abox::base::http1 {

namespace {

constexpr std::size_t kMaxChunkSizeDigits = 16;

int hex_value(std::uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

BodyDecoder::BodyDecoder(BodyFraming framing, std::uint64_t content_length, const BodyLimits& limits)
    : state_(State::done),
      max_body_bytes_(limits.max_body_bytes),
      max_trailer_fields_(limits.max_trailer_fields),
      max_trailer_bytes_(limits.max_trailer_bytes) {
  switch (framing) {
    case BodyFraming::none:
      state_ = State::done;
      break;
    case BodyFraming::content_length:
      if (content_length > max_body_bytes_) {
        state_ = State::failed;
        error_ = Error::body_too_large;
      } else {
        remaining_ = content_length;
        state_ = content_length == 0 ? State::done : State::length_body;
      }
      break;
    case BodyFraming::chunked:
      state_ = State::size_line;
      break;
  }
}

bool BodyDecoder::done() const {
  return state_ == State::done;
}

Result<BodyStep, Error> BodyDecoder::fail(Error e) {
  state_ = State::failed;
  error_ = e;
  return Err{e};
}

Result<BodyStep, Error> BodyDecoder::feed(std::span<const std::uint8_t> in) {
  ByteReader r(in);
  bool trailer_step = false;  // what this call's bytes are, once it has any
  for (;;) {
    if (state_ == State::failed) return Err{error_};
    if (state_ == State::done) return BodyStep{r.position(), {}, trailer_step};
    if (state_ == State::length_body || state_ == State::data) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, r.remaining()));
      if (n == 0) return BodyStep{r.position(), {}};
      auto payload = *r.bytes(n);  // n <= remaining()
      remaining_ -= n;
      payload_bytes_ += n;
      if (remaining_ == 0) state_ = state_ == State::length_body ? State::done : State::data_cr;
      return BodyStep{r.position(), payload, false};
    }
    const auto next = r.peek();
    if (!next) return BodyStep{r.position(), {}, trailer_step};
    // Trailer bytes: a field's, from its first byte through its CRLF.
    const bool trailer_byte = state_ == State::trailer_name || state_ == State::trailer_value ||
                              state_ == State::trailer_lf ||
                              (state_ == State::last_cr && *next != '\r' && max_trailer_fields_ != 0);
    if (r.position() == 0) {
      trailer_step = trailer_byte;
    } else if (trailer_byte != trailer_step) {
      return BodyStep{r.position(), {}, trailer_step};
    }
    const std::uint8_t c = *r.u8();  // peeked above
    if (trailer_byte && ++trailer_bytes_ > max_trailer_bytes_) return fail(Error::trailer_too_large);
    switch (state_) {
      case State::size_line: {
        int v = hex_value(c);
        if (v >= 0) {
          if (size_digits_ == kMaxChunkSizeDigits) return fail(Error::chunk_size);
          chunk_size_ = (chunk_size_ << 4) | static_cast<std::uint64_t>(v);
          ++size_digits_;
        } else if (size_digits_ == 0) {
          return fail(Error::chunk_size);
        } else if (c == ';') {
          state_ = State::extension;
        } else if (c == '\r') {
          state_ = State::size_lf;
        } else {
          return fail(Error::chunk_size);  // whitespace, a bare LF, junk
        }
        break;
      }
      case State::extension:
        if (c == '\r') {
          state_ = State::size_lf;
        } else if (is_control(c) || ++extension_bytes_ > kMaxChunkExtensionBytes) {
          return fail(Error::chunk_extension);  // a bare LF is a control byte too
        }
        break;
      case State::size_lf:
        if (c != '\n') return fail(Error::chunk_size);
        if (chunk_size_ > max_body_bytes_ - payload_bytes_) return fail(Error::body_too_large);
        remaining_ = chunk_size_;
        state_ = chunk_size_ == 0 ? State::last_cr : State::data;
        chunk_size_ = 0;
        size_digits_ = 0;
        extension_bytes_ = 0;
        break;
      case State::data_cr:
        if (c != '\r') return fail(Error::chunk_crlf);
        state_ = State::data_lf;
        break;
      case State::data_lf:
        if (c != '\n') return fail(Error::chunk_crlf);
        state_ = State::size_line;
        break;
      case State::last_cr:
        if (c == '\r') {
          state_ = State::last_lf;
          break;
        }
        // A trailer field starts here.
        if (max_trailer_fields_ == 0) return fail(Error::trailer);
        if (trailer_fields_ == max_trailer_fields_) return fail(Error::trailer_too_large);
        if (!is_tchar(c)) return fail(Error::trailer_syntax);  // obs-fold, a bare LF, junk
        ++trailer_fields_;
        state_ = State::trailer_name;
        break;
      case State::trailer_name:
        if (c == ':') {
          state_ = State::trailer_value;
        } else if (!is_tchar(c)) {
          return fail(Error::trailer_syntax);  // whitespace before the colon, a line with no colon
        }
        break;
      case State::trailer_value:
        if (c == '\r') {
          state_ = State::trailer_lf;
        } else if (is_control(c)) {
          return fail(Error::trailer_syntax);  // a bare LF is a control byte too
        }
        break;
      case State::trailer_lf:
        if (c != '\n') return fail(Error::trailer_syntax);
        state_ = State::last_cr;
        break;
      case State::last_lf:
        if (c != '\n') return fail(Error::chunk_crlf);
        state_ = State::done;
        break;
      case State::length_body:
      case State::data:
      case State::done:
      case State::failed:
        break;  // handled above
    }
  }
}

void append_chunk(std::span<const std::uint8_t> data, std::string& out) {
  if (data.empty()) return;
  static constexpr char kHex[] = "0123456789abcdef";
  char digits[16];
  std::size_t n = 0;
  for (std::size_t size = data.size(); size != 0; size >>= 4) digits[n++] = kHex[size & 0xF];
  while (n != 0) out.push_back(digits[--n]);
  out.append("\r\n");
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  out.append("\r\n");
}

void append_last_chunk(std::string& out) {
  out.append("0\r\n\r\n");
}

}  // namespace abox::base::http1
