#include "base/control_protocol.h"

#include "base/byte_reader.h"

namespace abox::base {

std::string versioned_control_line(std::string_view line) {
  std::string out(kControlProtocolName);
  out += std::to_string(kControlProtocolVersion);
  out += ' ';
  out += line;
  return out;
}

base::Result<std::string_view, ControlVersionError> control_request_line(std::string_view line) {
  if (!line.starts_with(kControlProtocolName)) return line;
  ByteReader r(as_bytes(line));
  (void)r.skip(kControlProtocolName.size());
  unsigned version = 0;
  std::size_t digits = 0;
  while (auto c = r.peek()) {
    if (*c < '0' || *c > '9') break;
    if (digits == 0 && *c == '0') break;  // no leading zero: one spelling per version
    if (++digits > 5) break;
    version = version * 10 + static_cast<unsigned>(*c - '0');
    (void)r.skip(1);
  }
  const auto space = r.u8();
  if (digits == 0 || digits > 5 || space != std::optional<std::uint8_t>(' ')) {
    return Err{ControlVersionError{ControlVersionError::Kind::kMalformed,
                                   "a malformed protocol version (expected " +
                                       std::string(kControlProtocolName) +
                                       std::to_string(kControlProtocolVersion) + " and a space)"}};
  }
  if (version != kControlProtocolVersion) {
    return Err{ControlVersionError{ControlVersionError::Kind::kUnsupported,
                                   "protocol " + std::string(kControlProtocolName) + std::to_string(version) +
                                       " is not spoken here (this side speaks " +
                                       std::string(kControlProtocolName) +
                                       std::to_string(kControlProtocolVersion) +
                                       "): abox and the part it asked are from different releases"}};
  }
  return line.substr(r.position());
}

}  // namespace abox::base
