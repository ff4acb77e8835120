// StreamLink and StreamListener (see stream_link.h for how they work).
#include "netstack/link/stream_link.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/byte_reader.h"
#include "io/unix_listener.h"

namespace abox::netstack {
namespace {

using base::Err;

// The same MTU range as a tap's (68..65521): 65521 + 14 is also the largest
// frame lwIP's u16 pbuf lengths hold.
constexpr std::size_t kMinMtu = 68;
constexpr std::size_t kMaxMtu = 65521;

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

// ---------------------------------------------------------------------------
// StreamLink.

StreamLink::StreamLink(base::UniqueFd fd, std::size_t mtu, std::size_t input_bytes)
    : fd_(std::move(fd)),
      mtu_(mtu),
      in_(std::max(input_bytes, kMinInputRecords * (mtu + kEthernetHeader + kLengthPrefix))) {}

base::Result<std::unique_ptr<StreamLink>, std::string> StreamLink::from_connected(base::UniqueFd&& fd_in,
                                                                                  std::size_t mtu,
                                                                                  std::size_t input_bytes) {
  base::UniqueFd fd = std::move(fd_in);
  if (!fd) return Err{std::string("stream socket is not open")};
  if (mtu < kMinMtu || mtu > kMaxMtu) {
    return Err{"MTU " + std::to_string(mtu) + " is outside " + std::to_string(kMinMtu) + ".." +
               std::to_string(kMaxMtu)};
  }
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl | O_NONBLOCK) != 0) {
    return Err{"cannot make the stream socket non-blocking: " + errno_text(errno)};
  }
  return std::unique_ptr<StreamLink>(new StreamLink(std::move(fd), mtu, input_bytes));
}

void StreamLink::make_room() {
  if (in_head_ == in_tail_) {
    in_head_ = in_tail_ = 0;
  } else if (in_.size() - in_tail_ < max_frame_size() + kLengthPrefix) {
    // Not room for a whole frame behind what is left: move the rest (less
    // than one frame) to the front.
    std::memmove(in_.data(), in_.data() + in_head_, in_tail_ - in_head_);
    in_tail_ -= in_head_;
    in_head_ = 0;
  }
}

base::Result<std::size_t, int> StreamLink::fill() {
  if (dead_ != 0) return Err{dead_};
  make_room();
  for (;;) {
    ++read_calls_;
    const ssize_t n = ::read(fd_.get(), in_.data() + in_tail_, in_.size() - in_tail_);
    if (n > 0) {
      in_tail_ += static_cast<std::size_t>(n);
      return static_cast<std::size_t>(n);
    }
    if (n == 0) {  // the peer closed its end: what was whole has been handed out
      die(ECONNRESET);
      return Err{dead_};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return std::size_t{0};
    die(errno);
    return Err{dead_};
  }
}

// Parses only the length prefixes, through a ByteReader over the buffered
// bytes; the frame's own bytes are the netstack's to parse.
std::size_t StreamLink::next_frame(std::span<std::uint8_t> buf) {
  oversize_head_.reset();
  for (;;) {
    if (skipping_ > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(skipping_, in_tail_ - in_head_));
      in_head_ += n;
      skipping_ -= n;
      if (skipping_ > 0) return 0;
    }
    base::ByteReader reader(std::span<const std::uint8_t>(in_).subspan(in_head_, in_tail_ - in_head_));
    const auto length = reader.u32be();
    if (!length) return 0;
    if (*length == 0) {
      ++dropped_zero_length_;
      in_head_ += kLengthPrefix;
      continue;
    }
    if (*length > max_frame_size() || *length > buf.size() || *length < kEthernetHeader) {
      if (*length < kEthernetHeader) {
        ++dropped_runt_;
      } else {
        ++counters_.dropped_oversize;
      }
      in_head_ += kLengthPrefix;
      skipping_ = *length;
      // Over the MTU (not merely over a short buf): its head, when the
      // buffer holds it already, and the skip goes on at the next call.
      if (*length > max_frame_size() && keep_oversize_head(buf, *length)) return 0;
      continue;
    }
    const auto frame = reader.bytes(*length);
    if (!frame) return 0;  // the rest of it has not arrived
    std::copy(frame->begin(), frame->end(), buf.begin());
    in_head_ += kLengthPrefix + frame->size();
    ++counters_.frames_in;
    counters_.bytes_in += frame->size();
    return frame->size();
  }
}

// The head of a frame over the MTU whose length prefix was just taken:
// copied into buf as a frame is, but only when what was read already holds
// all of it (min(length, kOversizeHeadBytes, buf) bytes); a head cut by the
// end of what arrived is not kept (link.h: the link never waits for it).
bool StreamLink::keep_oversize_head(std::span<std::uint8_t> buf, std::uint64_t length) {
  const auto wanted =
      static_cast<std::size_t>(std::min<std::uint64_t>(length, std::min(kOversizeHeadBytes, buf.size())));
  base::ByteReader reader(std::span<const std::uint8_t>(in_).subspan(in_head_, in_tail_ - in_head_));
  const auto head = reader.bytes(wanted);
  if (!head) return false;
  std::copy(head->begin(), head->end(), buf.begin());
  oversize_head_ = OversizeHead{buf.first(wanted), static_cast<std::size_t>(length)};
  return true;
}

base::Result<std::size_t, int> StreamLink::receive(std::span<std::uint8_t> buf) {
  for (;;) {
    if (const std::size_t n = next_frame(buf); n != 0 || oversize_head_) return n;
    auto r = fill();
    if (!r.ok()) return Err{r.error()};
    if (*r == 0) return std::size_t{0};
  }
}

// The read goes into the input buffer, behind what is left of a frame torn
// across reads; make_room() leaves room for at least one whole frame.
std::span<const iovec> StreamLink::ring_receive_iovecs(std::span<std::uint8_t> buf) {
  ring_buf_ = buf;
  make_room();
  ring_iov_ = {in_.data() + in_tail_, in_.size() - in_tail_};
  return {&ring_iov_, 1};
}

base::Result<std::size_t, int> StreamLink::finish_ring_receive(int res) {
  if (res > 0 && dead_ == 0) {
    in_tail_ += std::min(static_cast<std::size_t>(res), in_.size() - in_tail_);
  } else if (res == 0) {
    die(ECONNRESET);  // the peer closed its end; a frame it tore is lost
  } else if (res < 0 && res != -EAGAIN && res != -EINTR) {
    die(-res);
  }
  return receive_buffered(ring_buf_);
}

base::Result<std::size_t, int> StreamLink::receive_buffered(std::span<std::uint8_t> buf) {
  if (const std::size_t n = next_frame(buf); n != 0) return n;
  if (dead_ != 0) return Err{dead_};
  return std::size_t{0};
}

void StreamLink::die(int err) {
  if (dead_ != 0) return;
  dead_ = err;
  // What is queued will never be written: counted as lost, not sent.
  lost_unsent_ += out_frames_.size();
  out_.clear();
  out_frames_.clear();
  front_written_ = 0;
  batch_start_ = 0;
  batched_frames_ = 0;
}

// One record: the length prefix, then the frame's pieces, copied into the
// queue (the pieces are lwIP's pbufs, freed or reused once send_frame()
// returns, so they cannot wait in an iovec). Whole or not at all.
base::Result<void, int> StreamLink::send_frame(const OutFrame& frame) {
  const std::size_t size = frame.size();
  if (size > max_frame_size()) {
    ++counters_.dropped_oversize;
    return Err{EMSGSIZE};
  }
  if (size < kEthernetHeader) {
    ++counters_.dropped_send;
    return Err{EMSGSIZE};
  }
  if (dead_ != 0) return Err{dead_};
  const std::size_t total = kLengthPrefix + size;
  if (out_.size() + total > kMaxQueued) {
    ++counters_.dropped_send;
    return Err{EAGAIN};
  }
  const auto length = static_cast<std::uint32_t>(size);
  const std::array<std::uint8_t, kLengthPrefix> prefix = {
      static_cast<std::uint8_t>(length >> 24), static_cast<std::uint8_t>(length >> 16),
      static_cast<std::uint8_t>(length >> 8), static_cast<std::uint8_t>(length)};
  out_.insert(out_.end(), prefix.begin(), prefix.end());
  for (const auto& piece : frame.pieces) out_.insert(out_.end(), piece.begin(), piece.end());
  out_frames_.push_back(length);
  // A full batch goes now: the turn may go on emitting, and the socket is
  // better fed early than handed 1 MiB at once.
  if (++batched_frames_ >= kBatchFrames || out_.size() - batch_start_ >= kBatchBytes) return flush();
  return {};
}

base::Result<void, int> StreamLink::send(std::span<const std::uint8_t> frame) {
  const std::array<std::span<const std::uint8_t>, 1> pieces = {frame};
  return send_frame(OutFrame{pieces});
}

// Counts the frames whose last byte the socket took: frames_out says what
// was written, not what was queued.
void StreamLink::count_written(std::size_t bytes) {
  while (bytes > 0 && !out_frames_.empty()) {
    const std::size_t record = kLengthPrefix + out_frames_.front() - front_written_;
    if (bytes < record) {
      front_written_ += bytes;
      return;
    }
    bytes -= record;
    ++counters_.frames_out;
    counters_.bytes_out += out_frames_.front();
    out_frames_.pop_front();
    front_written_ = 0;
  }
}

// Writes the queue out with as few system calls as the socket allows: one,
// unless it takes only part (then again, until EAGAIN).
base::Result<void, int> StreamLink::flush() {
  if (dead_ != 0) return Err{dead_};
  batched_frames_ = 0;
  std::size_t written = 0;
  while (written < out_.size()) {
    ++send_calls_;
    const ssize_t n =
        ::send(fd_.get(), out_.data() + written, out_.size() - written, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    const int err = errno;
    count_written(written);
    die(err);
    return Err{dead_};
  }
  count_written(written);
  out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(written));
  batch_start_ = out_.size();  // what is left waits for POLLOUT; new frames batch behind it
  return {};
}

// ---------------------------------------------------------------------------
// StreamListener.

StreamListener::StreamListener(base::UniqueFd fd, std::string path)
    : fd_(std::move(fd)), path_(std::move(path)) {}

StreamListener::~StreamListener() {
  if (fd_) ::unlink(path_.c_str());
}

base::Result<std::unique_ptr<StreamListener>, std::string> StreamListener::listen(const std::string& path) {
  // A stale socket file is replaced, a live one or another kind of file refused.
  auto fd = io::listen_unix(path, 1, "stream socket");
  if (!fd.ok()) return Err{std::move(fd).error()};
  return std::unique_ptr<StreamListener>(
      new StreamListener(std::move(fd).value(), path));  // removes the file
}

base::Result<std::unique_ptr<StreamLink>, std::string> StreamListener::accept(std::size_t mtu) {
  for (;;) {
    base::UniqueFd peer(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer) return StreamLink::from_connected(std::move(peer), mtu);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN) return std::unique_ptr<StreamLink>();
    return Err{"cannot accept on the stream socket " + path_ + ": " + errno_text(errno)};
  }
}

}  // namespace abox::netstack
