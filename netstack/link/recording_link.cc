#include "netstack/link/recording_link.h"

#include <algorithm>
#include <utility>

namespace abox::netstack {

base::Result<std::size_t, int> RecordingLink::receive(std::span<std::uint8_t> buf) {
  auto r = inner_.receive(buf);
  if (r.ok() && *r > 0) recorder_.record(buf.first(*r));
  return r;
}

// Success means the inner link took the frame (link.h): a tap wrote it, a
// stream link queued it.
base::Result<void, int> RecordingLink::send(std::span<const std::uint8_t> frame) {
  auto r = inner_.send(frame);
  if (r.ok()) recorder_.record(frame);
  return r;
}

// The pieces go to the inner link as they are; only the copy for the file
// is made whole.
base::Result<void, int> RecordingLink::send_frame(const OutFrame& frame) {
  auto r = inner_.send_frame(frame);
  if (r.ok()) {
    if (frame.pieces.size() == 1) {
      recorder_.record(frame.pieces[0]);
    } else {
      gather_frame(frame, gathered_);
      recorder_.record(gathered_);
    }
  }
  return r;
}

std::span<const iovec> RecordingLink::ring_receive_iovecs(std::span<std::uint8_t> buf) {
  ring_buf_ = buf;
  return inner_.ring_receive_iovecs(buf);
}

base::Result<std::size_t, int> RecordingLink::finish_ring_receive(int res) {
  auto r = inner_.finish_ring_receive(res);
  if (r.ok() && *r > 0 && *r <= ring_buf_.size()) recorder_.record(ring_buf_.first(*r));
  return r;
}

base::Result<std::size_t, int> RecordingLink::receive_buffered(std::span<std::uint8_t> buf) {
  auto r = inner_.receive_buffered(buf);
  if (r.ok() && *r > 0) recorder_.record(buf.first(*r));
  return r;
}

std::optional<std::size_t> RecordingLink::ring_send_header(
    const OutFrame& frame, std::span<std::uint8_t, kRingSendHeaderMax> header) {
  auto size = inner_.ring_send_header(frame, header);
  if (!size) return size;  // dropped and counted by the inner link: not in the file
  std::vector<std::uint8_t> copy;
  if (!spare_.empty()) {
    copy = std::move(spare_.back());
    spare_.pop_back();
  }
  gather_frame(frame, copy);
  ring_sent_.push_back(std::move(copy));
  return size;
}

base::Result<void, int> RecordingLink::finish_ring_send(int res, std::size_t frame_size) {
  const std::uint64_t before = inner_.counters().frames_out;
  auto r = inner_.finish_ring_send(res, frame_size);
  const bool delivered = inner_.counters().frames_out != before;
  auto it = ring_sent_.begin();
  if (it != ring_sent_.end() && it->size() != frame_size) {
    it = std::find_if(ring_sent_.begin(), ring_sent_.end(),
                      [&](const std::vector<std::uint8_t>& f) { return f.size() == frame_size; });
  }
  if (it == ring_sent_.end()) return r;  // not one of ours (never happens with the stack's ring writer)
  if (delivered) recorder_.record(*it);
  spare_.push_back(std::move(*it));
  ring_sent_.erase(it);
  return r;
}

}  // namespace abox::netstack
