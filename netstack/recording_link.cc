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

// The pieces go to the inner link as they are; only the copy for the file
// is made whole.
base::Result<void, int> RecordingLink::send_frame(const OutFrame& frame) {
  const std::uint64_t before = inner_.counters().frames_out;
  auto r = inner_.send_frame(frame);
  if (r.ok() && inner_.counters().frames_out != before) {
    if (frame.pieces.size() == 1) {
      recorder_.record(frame.pieces[0]);
    } else {
      gathered_.clear();
      for (const auto& p : frame.pieces) gathered_.insert(gathered_.end(), p.begin(), p.end());
      recorder_.record(gathered_);
    }
  }
  return r;
}

}  // namespace abox::netstack
