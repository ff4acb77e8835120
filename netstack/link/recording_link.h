// RecordingLink: a Link that passes every frame through to another Link and
// records it in a pcap file on the way (abox-net run --pcap). The stack does
// not know it is there; any link (tap, stream, packet) can be wrapped.
//
// What is recorded: every frame receive() delivers from the guest, and every
// frame send() hands over that the inner link took (send() succeeded: a
// frame it refused with EAGAIN or EMSGSIZE never reached the guest, so it is
// not in the file). So the file holds exactly frames_in + frames_out frames,
// until the writer's cap, with one exception: a stream link counts a frame
// in frames_out when it is written, not when it is queued, so its file also
// holds the frames still queued and, once the VMM is gone, those it never
// wrote (StreamLink::lost_unsent(), link_frames_lost_unsent in the stats).
// Frames are recorded in the order the stack sees them.
//
// The ring passes through too (link.h), so --pcap keeps the inner link's
// ring reads and writes. A ring read is recorded when finish_ring_receive()
// delivers its frame (and each frame receive_buffered() hands out after it,
// a stream link's). A ring write is recorded only when its result comes
// back and the inner link counted it in frames_out (finish_ring_send()): a
// write that fails (a full tap) never reached the guest, so it is not in
// the file, and the promise above holds (a tap is written on the ring; a
// stream link is not). The frame's pieces are gone by
// then, so ring_send_header() keeps a copy of each frame it lets through
// until its result comes: a FIFO of at most one entry per ring write in
// flight (io::RingWriter::kSlots, frames of at most a slot's size). The ring
// completes writes to one fd in the order they were posted (a tap write
// never waits: it is done when submitted), so the oldest copy is the one
// whose result came; its size is checked against frame_size, and should a
// result ever come out of order the first copy of that size is taken. The
// record's time is that of the result, when the frame crossed the link.
//
// The recorder is owned by the caller and must outlive the link. Recording
// never fails the data path: the writer counts its own losses.
//
// The inner link's offloads pass through (checksum offload, TSO/GSO, its
// receive size), so the stack behaves as without --pcap. Frames are recorded
// as they cross the link: with checksum offload a TCP/UDP checksum is still
// partial (tcpdump calls it incorrect, as in any capture taken where a NIC
// offloads checksums), and a TSO/GSO frame is one frame larger than the MTU.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "netstack/link/link.h"
#include "netstack/link/pcap_writer.h"

namespace abox::netstack {

class RecordingLink final : public Link {
 public:
  RecordingLink(Link& inner, PcapWriter& recorder) : inner_(inner), recorder_(recorder) {}

  int fd() const override { return inner_.fd(); }
  std::size_t mtu() const override { return inner_.mtu(); }
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) override;
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override;
  base::Result<void, int> send_frame(const OutFrame& frame) override;
  std::size_t max_receive_size() const override { return inner_.max_receive_size(); }
  // The ring (see the top of this file).
  std::span<const iovec> ring_receive_iovecs(std::span<std::uint8_t> buf) override;
  base::Result<std::size_t, int> finish_ring_receive(int res) override;
  base::Result<std::size_t, int> receive_buffered(std::span<std::uint8_t> buf) override;
  bool ring_send_supported() const override { return inner_.ring_send_supported(); }
  std::optional<std::size_t> ring_send_header(const OutFrame& frame,
                                              std::span<std::uint8_t, kRingSendHeaderMax> header) override;
  base::Result<void, int> finish_ring_send(int res, std::size_t frame_size) override;
  bool last_frame_checksum_trusted() const override { return inner_.last_frame_checksum_trusted(); }
  // An oversize frame's head passes through unrecorded: the frame never
  // reached the stack (it is in dropped_oversize, not frames_in).
  std::optional<OversizeHead> last_oversize_head() const override { return inner_.last_oversize_head(); }
  bool tx_checksum_offload() const override { return inner_.tx_checksum_offload(); }
  bool tx_tso() const override { return inner_.tx_tso(); }
  // Output a stream link held back is the inner link's to flush: without
  // these the loop would never watch POLLOUT for it behind --pcap.
  bool output_pending() const override { return inner_.output_pending(); }
  base::Result<void, int> flush() override { return inner_.flush(); }
  const LinkCounters& counters() const override { return inner_.counters(); }

  // Ring writes whose result has not come yet (their frames wait here).
  std::size_t ring_sends_pending() const { return ring_sent_.size(); }

 private:
  Link& inner_;
  PcapWriter& recorder_;
  std::vector<std::uint8_t> gathered_;               // a frame in pieces, made whole for the file
  std::span<std::uint8_t> ring_buf_;                 // where the ring read in flight puts its frame
  std::deque<std::vector<std::uint8_t>> ring_sent_;  // ring writes in flight, oldest first
  std::vector<std::vector<std::uint8_t>> spare_;     // their buffers, for reuse
};

}  // namespace abox::netstack
