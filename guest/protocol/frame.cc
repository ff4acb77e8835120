#include "guest/protocol/frame.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/byte_reader.h"

namespace abox::guest {
namespace {

void put_be(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * (bytes - 1 - i)));
}

}  // namespace

std::string_view frame_error_name(FrameError e) {
  switch (e) {
    case FrameError::kLengthTooSmall:
      return "frame_length_too_small";
    case FrameError::kLengthTooLarge:
      return "frame_length_too_large";
    case FrameError::kBadSequence:
      return "frame_bad_sequence";
    case FrameError::kBadMac:
      return "frame_bad_mac";
  }
  return "frame_error";
}

base::Sha256Digest frame_mac(const ChannelKey& key, Direction direction, std::uint32_t length,
                             std::uint8_t type, std::uint64_t seq, std::span<const std::uint8_t> payload) {
  std::array<std::uint8_t, 1 + 4 + 1 + 8> head{};
  head[0] = static_cast<std::uint8_t>(direction);
  put_be(head.data() + 1, length, 4);
  head[5] = type;
  put_be(head.data() + 6, seq, 8);
  return base::hmac_sha256(key, {head, payload});
}

void FrameWriter::append(std::vector<std::uint8_t>& out, std::uint8_t type,
                         std::span<const std::uint8_t> payload) {
  if (payload.size() > kMaxPayload) {
    std::fprintf(stderr, "abox: control frame payload of %zu bytes\n", payload.size());
    std::abort();
  }
  auto length = static_cast<std::uint32_t>(1 + 8 + payload.size() + kMacBytes);
  std::size_t at = out.size();
  out.resize(at + kHeaderBytes);
  put_be(out.data() + at, length, 4);
  out[at + 4] = type;
  put_be(out.data() + at + 5, seq_, 8);
  out.insert(out.end(), payload.begin(), payload.end());
  if (key_) {
    auto mac = frame_mac(*key_, direction_, length, type, seq_, payload);
    out.insert(out.end(), mac.begin(), mac.end());
  } else {
    out.insert(out.end(), kMacBytes, 0);
  }
  ++seq_;
}

std::span<std::uint8_t> FrameReader::space() {
  // Move a partial frame to the front when little room is left behind it,
  // so a frame of kMaxFrameBytes always fits and reads stay large.
  if (start_ > 0 && buffer_.size() - end_ < 4096) {
    std::memmove(buffer_.data(), buffer_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  return std::span(buffer_).subspan(end_);
}

void FrameReader::commit(std::size_t n) {
  end_ += std::min(n, buffer_.size() - end_);
}

base::Result<std::optional<Frame>, FrameError> FrameReader::next() {
  if (broken_) return base::Err{*broken_};
  if (start_ == end_) {
    start_ = end_ = 0;  // nothing buffered: reuse the whole buffer
    return std::optional<Frame>{};
  }
  base::ByteReader r(std::span<const std::uint8_t>(buffer_).subspan(start_, end_ - start_));
  auto length = r.u32be();
  if (!length) return std::optional<Frame>{};
  if (*length < 1 + 8 + kMacBytes) {
    broken_ = FrameError::kLengthTooSmall;
    return base::Err{*broken_};
  }
  if (*length > kMaxFrameBytes - 4) {
    broken_ = FrameError::kLengthTooLarge;
    return base::Err{*broken_};
  }
  if (r.remaining() < *length) return std::optional<Frame>{};
  auto type = r.u8();
  auto seq_hi = r.u32be();
  auto seq_lo = r.u32be();
  auto payload = r.bytes(*length - 1 - 8 - kMacBytes);
  auto mac = r.bytes(kMacBytes);
  if (!type || !seq_hi || !seq_lo || !payload || !mac)
    return std::optional<Frame>{};  // cannot happen: length checked
  start_ += 4 + *length;
  std::uint64_t seq = (std::uint64_t{*seq_hi} << 32) | *seq_lo;

  bool mac_ok = false;
  if (key_) {
    auto want = frame_mac(*key_, direction_, *length, *type, seq, *payload);
    mac_ok = base::equal_in_constant_time(want, *mac);
  } else {
    static constexpr std::array<std::uint8_t, kMacBytes> kZeros{};
    mac_ok = base::equal_in_constant_time(kZeros, *mac);
  }
  if (!mac_ok) return base::Err{FrameError::kBadMac};
  if (seq != expected_seq_) return base::Err{FrameError::kBadSequence};
  ++expected_seq_;
  return std::optional<Frame>{Frame{*type, seq, *payload}};
}

}  // namespace abox::guest
