// StreamLink: the guest link of a QEMU VM, over QEMU's `-netdev stream`
// socket (passt speaks the same protocol): each frame is a 4-byte big-endian
// length, then that many bytes of Ethernet frame. No other framing, no
// handshake.
//
// Setting up (StreamListener): abox-net creates a unix stream socket at a
// path (mode 0600), says "ready", and the VMM connects to it:
//   qemu ... -netdev stream,id=n0,server=off,addr.type=unix,addr.path=PATH
// Exactly one peer is accepted; the listener is closed and its file removed
// right after, so nobody else can connect. A path that exists is refused
// when a live socket is bound to it (checked without connecting to it),
// removed when it is a stale socket file, and refused when it is anything
// but a socket.
//
// Life of a frame from the guest: receive() reads the socket in large
// chunks into one input buffer (kReadChunk bytes unless the maker asks for
// another size) and hands out the frames in it,
// one per call, copied to the caller's buffer; a frame cut across reads
// stays in the buffer until its rest arrives. Read through the event loop's
// ring (GuestStack's way, link.h), the one read in flight goes into the
// same buffer (ring_receive_iovecs()), and finish_ring_receive() and then
// receive_buffered() hand out every whole frame it completed, with the same
// checks, without another system call. A length above mtu() + 14 or
// below 14 is never buffered: the link enters a skip state that discards
// that many bytes as they arrive (a 4 GiB length costs no memory) and counts
// the frame (dropped_oversize, dropped_runt()); a zero length is counted
// (dropped_zero_length()) and skipped. For a length above mtu() + 14 whose
// first bytes (Link::kOversizeHeadBytes, or the whole frame when shorter)
// are in the buffer already, those are copied out as a frame would be and
// the call returns 0 with last_oversize_head() set (link.h); a head cut by
// the end of a read is not kept. The skip goes on at the next call.
//
// Life of a frame to the guest: send_frame() (and send()) copies length +
// frame into one output queue, bounded to kMaxQueued bytes; a frame that
// does not fit is dropped and counted (dropped_send, with EAGAIN). It is
// counted in frames_out once the socket has taken all of it, so frames_out
// is what was written, not what was queued. Frames
// are not written one by one: flush() writes the whole queue with one send
// (GuestStack calls it at the end of every loop turn), and a batch of
// kBatchFrames frames or kBatchBytes bytes is flushed at once. The copy is
// the price of batching (the pieces are lwIP's pbufs and the stack's
// scratch buffer, freed or reused once the call returns), and it replaces
// the gather a frame in pieces needed before.
// What the socket does not take stays queued in order: output_pending()
// tells the loop to watch for POLLOUT, and the next flush() resumes it.
// Records are only ever appended whole, so frames are never torn or
// reordered.
//
// When the peer goes away (the VMM exits): receive() returns ECONNRESET once
// every whole frame it sent has been delivered; flush() (or a send() that
// flushes a full batch) returns the socket's errno (EPIPE, ECONNRESET). The
// link is dead from then on: every call returns that errno, and the frames
// still queued are counted in lost_unsent() (abox-net stats:
// link_frames_lost_unsent), never in frames_out.
// Writes use MSG_NOSIGNAL: a gone peer never raises SIGPIPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "netstack/link/link.h"

namespace abox::netstack {

class StreamLink final : public Link {
 public:
  static constexpr std::size_t kEthernetHeader = 14;
  static constexpr std::size_t kLengthPrefix = 4;
  // The input buffer's default size, about what each read() asks for: many
  // frames per system call.
  static constexpr std::size_t kReadChunk = 256 * 1024;
  // The input buffer never holds fewer than this many records of the largest
  // frame (length prefix included): make_room() then always leaves room for
  // a whole one behind the torn rest of another.
  static constexpr std::size_t kMinInputRecords = 4;
  // Frames or bytes queued since the last flush that make send_frame()
  // flush at once.
  static constexpr std::size_t kBatchFrames = 64;
  static constexpr std::size_t kBatchBytes = 256 * 1024;
  // The most output held back while the peer does not read.
  static constexpr std::size_t kMaxQueued = 1024 * 1024;

  // Wraps a connected stream socket (the accepted VMM, or one end of a
  // socketpair in tests) and makes it non-blocking. `mtu` is the IP MTU the
  // link enforces both ways (68..65521). `input_bytes`: the input buffer's
  // size, raised to kMinInputRecords records of the largest frame (the
  // framing fuzzer asks for the least, so that frames straddle refills
  // often and each input costs little memory).
  static base::Result<std::unique_ptr<StreamLink>, std::string> from_connected(
      base::UniqueFd&& fd, std::size_t mtu, std::size_t input_bytes = kReadChunk);

  StreamLink(const StreamLink&) = delete;
  StreamLink& operator=(const StreamLink&) = delete;
  ~StreamLink() override = default;

  // Link
  int fd() const override { return fd_.get(); }
  std::size_t mtu() const override { return mtu_; }
  // The next whole frame (see the top of this file). A frame longer than buf
  // is dropped and counted in dropped_oversize (pass max_frame_size()
  // bytes). 0 means nothing whole is waiting.
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) override;
  // Reading through the ring (link.h): one read into the input buffer,
  // then every whole frame it completed, with receive()'s checks.
  std::span<const iovec> ring_receive_iovecs(std::span<std::uint8_t> buf) override;
  base::Result<std::size_t, int> finish_ring_receive(int res) override;
  base::Result<std::size_t, int> receive_buffered(std::span<std::uint8_t> buf) override;
  std::optional<OversizeHead> last_oversize_head() const override { return oversize_head_; }
  // Queues the frame (see the top of this file). A frame longer than
  // max_frame_size() is dropped (dropped_oversize), one shorter than an
  // Ethernet header too (dropped_send): both return EMSGSIZE (the link is
  // fine). A frame the full queue cannot take is counted in dropped_send
  // and returns EAGAIN. Other errors: the link is dead (a batch flush found
  // the peer gone). frames_out counts a frame once the socket took its last
  // byte.
  base::Result<void, int> send_frame(const OutFrame& frame) override;
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override;
  bool output_pending() const override { return queued() > 0; }
  base::Result<void, int> flush() override;
  const LinkCounters& counters() const override { return counters_; }

  std::size_t max_frame_size() const { return mtu_ + kEthernetHeader; }
  // Frames from the peer shorter than an Ethernet header (but not empty).
  std::uint64_t dropped_runt() const { return dropped_runt_; }
  // Zero-length records from the peer.
  std::uint64_t dropped_zero_length() const { return dropped_zero_length_; }
  // The input buffer's size (see from_connected()).
  std::size_t input_bytes() const { return in_.size(); }
  // Bytes waiting in the output queue.
  std::size_t queued() const { return out_.size(); }
  // Frames waiting in the output queue (taken by send(), not yet counted in
  // frames_out), the one the socket took part of included.
  std::size_t queued_frames() const { return out_frames_.size(); }
  // Frames send() took (queued) that were never written: the link died
  // (the VMM went away) with them still queued.
  std::uint64_t lost_unsent() const { return lost_unsent_; }
  // System calls that wrote output (sendmsg, send), whatever they took.
  std::uint64_t send_calls() const { return send_calls_; }
  // read() system calls receive() made (ring reads are the stack's: not here),
  // those that found nothing (EAGAIN) included.
  std::uint64_t read_calls() const { return read_calls_; }

 private:
  StreamLink(base::UniqueFd fd, std::size_t mtu, std::size_t input_bytes);
  // Reads once into the input buffer. 0: nothing to read (EAGAIN).
  base::Result<std::size_t, int> fill();
  // Ends the link with err (once): what is queued is counted as lost.
  void die(int err);
  // Counts the frames completed by `bytes` more written from the queue.
  void count_written(std::size_t bytes);
  // Moves what is left to the front when a whole frame would not fit
  // behind it. Never while a ring read is in flight.
  void make_room();
  // The next whole frame already in the input buffer, copied into buf
  // (with every check of the top of this file); 0: none is whole.
  std::size_t next_frame(std::span<std::uint8_t> buf);
  // Copies the head of an oversize frame of `length` bytes (its prefix just
  // taken) into buf when the buffer holds it; sets oversize_head_.
  bool keep_oversize_head(std::span<std::uint8_t> buf, std::uint64_t length);

  base::UniqueFd fd_;
  std::size_t mtu_;
  // Input: bytes [in_head_, in_tail_) of in_ are read but not yet handed out.
  std::vector<std::uint8_t> in_;
  std::size_t in_head_ = 0;
  std::size_t in_tail_ = 0;
  // The ring read in flight: where it reads, and where its first frame goes.
  iovec ring_iov_{};
  std::span<std::uint8_t> ring_buf_;
  // Bytes of a refused frame still to discard as they arrive.
  std::uint64_t skipping_ = 0;
  std::optional<OversizeHead> oversize_head_;  // the last receive call's (link.h)
  // Output not written yet, at most kMaxQueued bytes: what the socket did
  // not take, then [batch_start_, end) queued since the last flush().
  std::vector<std::uint8_t> out_;
  std::size_t batch_start_ = 0;
  // The frame sizes of the records in out_, oldest first, and the bytes of
  // the oldest the socket already took.
  std::deque<std::uint32_t> out_frames_;
  std::size_t front_written_ = 0;
  std::size_t batched_frames_ = 0;
  int dead_ = 0;  // the errno that ended the link, once it has
  LinkCounters counters_;
  std::uint64_t dropped_runt_ = 0;
  std::uint64_t dropped_zero_length_ = 0;
  std::uint64_t send_calls_ = 0;
  std::uint64_t read_calls_ = 0;
  std::uint64_t lost_unsent_ = 0;
};

// The unix socket a VMM connects to. Owns the socket file: it is removed
// when the listener is destroyed (right after the one peer is accepted).
class StreamListener {
 public:
  // Creates a non-blocking listening unix stream socket at `path`, mode 0600
  // (see the top of this file for a path that exists). Errors name the path
  // and the errno text.
  static base::Result<std::unique_ptr<StreamListener>, std::string> listen(const std::string& path);

  StreamListener(const StreamListener&) = delete;
  StreamListener& operator=(const StreamListener&) = delete;
  ~StreamListener();

  // Poll for POLLIN: a peer is waiting.
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  // Accepts the waiting peer as a StreamLink. nullptr (no error) when no
  // peer is waiting yet.
  base::Result<std::unique_ptr<StreamLink>, std::string> accept(std::size_t mtu);

 private:
  StreamListener(base::UniqueFd fd, std::string path);

  base::UniqueFd fd_;
  std::string path_;
};

}  // namespace abox::netstack
