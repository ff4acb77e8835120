#include "netstack/recording_link.h"

namespace abox::netstack {

base::Result<std::size_t, int> RecordingLink::receive(std::span<std::uint8_t> buf) {
  auto r = inner_.receive(buf);
  if (r.ok() && *r > 0) recorder_.record(buf.first(*r));
  return r;
}

base::Result<void, int> RecordingLink::send(std::span<const std::uint8_t> frame) {
  auto r = inner_.send(frame);
  if (r.ok()) recorder_.record(frame);
  return r;
}

}  // namespace abox::netstack
