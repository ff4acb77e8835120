// RecordingLink: a Link that passes every frame through to another Link and
// records it in a pcap file on the way (abox-net run --pcap). The stack does
// not know it is there; any link (tap, stream, packet) can be wrapped.
//
// What is recorded: every frame receive() delivers from the guest, and every
// frame send() hands over that the inner link counted in frames_out (a frame
// it refused with EAGAIN, or dropped as oversize, never reached the guest,
// so it is not in the file). So the file holds exactly frames_in +
// frames_out frames, until the writer's cap. Frames are recorded in the
// order the stack sees them.
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
#include <vector>

#include "netstack/link.h"
#include "netstack/pcap_writer.h"

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
  bool last_frame_checksum_trusted() const override { return inner_.last_frame_checksum_trusted(); }
  bool tx_checksum_offload() const override { return inner_.tx_checksum_offload(); }
  bool tx_tso() const override { return inner_.tx_tso(); }
  // Output a stream link held back is the inner link's to flush: without
  // these the loop would never watch POLLOUT for it behind --pcap.
  bool output_pending() const override { return inner_.output_pending(); }
  base::Result<void, int> flush() override { return inner_.flush(); }
  const LinkCounters& counters() const override { return inner_.counters(); }

 private:
  Link& inner_;
  PcapWriter& recorder_;
  std::vector<std::uint8_t> gathered_;  // a frame in pieces, made whole for the file
};

}  // namespace abox::netstack
