#include "netstack/recording_link.h"

namespace abox::netstack {

base::Result<std::size_t, int> RecordingLink::receive(std::span<std::uint8_t> buf) {
  auto r = inner_.receive(buf);
  if (r.ok() && *r > 0) recorder_.record(buf.first(*r));
  return r;
}

base::Result<void, int> RecordingLink::send(std::span<const std::uint8_t> frame) {
  // A link may report success for a frame it dropped (a tap refusing an
  // oversize one): only a frame its frames_out counted went to the guest.
  const std::uint64_t before = inner_.counters().frames_out;
  auto r = inner_.send(frame);
  if (r.ok() && inner_.counters().frames_out != before) recorder_.record(frame);
  return r;
}

}  // namespace abox::netstack
