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
#pragma once

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
  const LinkCounters& counters() const override { return inner_.counters(); }

 private:
  Link& inner_;
  PcapWriter& recorder_;
};

}  // namespace abox::netstack
