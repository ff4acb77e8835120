// The guest control channel's frames: what box-guest and the host's
// supervisor exchange over the virtio-serial port (docs/control-protocol.md).
//
// On the wire, each frame is
//   u32be length        of everything after this field (type + seq + payload + mac)
//   u8    type          a MessageType of the sender's direction
//   u64be seq           0, 1, 2, ... per direction; anything else is refused
//   payload             at most kMaxPayload bytes
//   mac[32]             HMAC-SHA256(key, direction || length || type || seq || payload)
//
// The key is the per-boot key the host sends in its first frame (Setup). Until
// both sides hold it (the guest's Hello, the host's Setup) the MAC field is
// all zeros and only those two types are accepted; after it, a frame whose
// MAC does not verify is refused. The direction byte ('G' guest to host, 'H'
// host to guest) keeps a frame of one direction from being played back in the
// other; the sequence number keeps one from being replayed or dropped.
//
// FrameReader reassembles frames from a byte stream in one fixed buffer of
// kMaxFrameBytes: whatever the peer sends, it holds no more than that.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/sha256.h"

namespace abox::guest {

// 2: a pty for the command (setup's tty and window size, resize), files in
// (copy_in) and out (copy_out) as tar streams.
// 3: command sessions: the main command is session 0 (setup, go), `exec`
// opens more beside it; every message of a command's life names its session
// (a u32 first in its payload); setup states the host's version.
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr std::size_t kMaxPayload = 64 * 1024;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kHeaderBytes = 4 + 1 + 8;
inline constexpr std::size_t kMaxFrameBytes = kHeaderBytes + kMaxPayload + kMacBytes;
inline constexpr std::size_t kKeyBytes = 32;

using ChannelKey = std::array<std::uint8_t, kKeyBytes>;

enum class Direction : std::uint8_t { kGuestToHost = 'G', kHostToGuest = 'H' };

struct Frame {
  std::uint8_t type = 0;
  std::uint64_t seq = 0;
  std::span<const std::uint8_t> payload;  // into the reader's buffer: valid until the next call
};

enum class FrameError {
  kLengthTooSmall,  // shorter than type + seq + mac
  kLengthTooLarge,  // over kMaxFrameBytes: the stream cannot be followed
  kBadSequence,     // not the next number: replayed, reordered or dropped
  kBadMac,          // the MAC does not verify (or is not zeros before keying)
};
std::string_view frame_error_name(FrameError e);

// Builds frames of one direction, numbering them.
class FrameWriter {
 public:
  explicit FrameWriter(Direction direction) : direction_(direction) {}
  void set_key(const ChannelKey& key) { key_ = key; }
  bool keyed() const { return key_.has_value(); }

  // Appends one frame to out. payload.size() <= kMaxPayload (a caller's bug otherwise: aborts).
  void append(std::vector<std::uint8_t>& out, std::uint8_t type, std::span<const std::uint8_t> payload);
  std::uint64_t next_seq() const { return seq_; }

 private:
  Direction direction_;
  std::optional<ChannelKey> key_;
  std::uint64_t seq_ = 0;
};

// Reassembles and checks the frames of one direction from a byte stream.
//
//   auto space = reader.space();  read into it;  reader.commit(n);
//   while (auto f = reader.next()) { if (!f.ok()) ...; if (!*f) break; use **f; }
//
// A kBadMac or kBadSequence frame is consumed (the stream stays in step) and
// the caller decides whether to go on; after kLengthTooSmall or
// kLengthTooLarge the stream cannot be followed and next() keeps failing.
class FrameReader {
 public:
  explicit FrameReader(Direction direction) : direction_(direction), buffer_(kMaxFrameBytes) {}
  void set_key(const ChannelKey& key) { key_ = key; }
  bool keyed() const { return key_.has_value(); }

  // Where the next bytes of the stream go (empty only when a whole frame is
  // buffered and next() has not taken it).
  std::span<std::uint8_t> space();
  void commit(std::size_t n);

  // The next whole frame, nullopt when more bytes are needed, or an error.
  base::Result<std::optional<Frame>, FrameError> next();

  std::size_t buffered() const { return end_ - start_; }

 private:
  Direction direction_;
  std::optional<ChannelKey> key_;
  std::vector<std::uint8_t> buffer_;
  std::size_t start_ = 0;  // first unconsumed byte
  std::size_t end_ = 0;    // one past the last received byte
  std::uint64_t expected_seq_ = 0;
  std::optional<FrameError> broken_;
};

// The MAC of one frame (exposed for tests and for the fuzz target's seeds).
base::Sha256Digest frame_mac(const ChannelKey& key, Direction direction, std::uint32_t length,
                             std::uint8_t type, std::uint64_t seq, std::span<const std::uint8_t> payload);

}  // namespace abox::guest
