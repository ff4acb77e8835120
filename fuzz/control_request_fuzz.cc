// Fuzz target: the control protocol's requests (broker/control_socket.h
// parse_control_request(), and base/control_protocol.h's version check that
// abox-net's stats socket shares), from a local client: what `abox policy
// apply` and `abox broker reload` send, or anything else a process of the
// operator's writes to the socket. Whatever the input: no crash, no read
// past it; a request taken is a known one ("stats" with nothing after it,
// "reload" with or without a SOURCE), its line has no control byte and no
// version, its views lie inside the input, its body is within the bound; a
// refusal is status 1 or 3 with a one-line message.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/control_protocol.h"
#include "broker/control_socket.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
bool inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using abox::broker::BrokerControlSocket;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto request = BrokerControlSocket::parse_control_request(bytes);
  if (request.ok()) {
    const std::string_view line = request->line;
    check(inside(line, bytes) && inside(request->body, bytes));
    check(request->body.size() <= BrokerControlSocket::kMaxPolicyBytes);
    check(line.size() <= BrokerControlSocket::kMaxRequestLine);
    for (const char c : line) check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    check(!line.starts_with(abox::base::kControlProtocolName));
    check(line == "stats" || line == "reload" || (line.starts_with("reload ") && line.size() > 7));
    if (line == "stats") check(request->body.empty());
  } else {
    check(request.error().status == 1 || request.error().status == 3);
    check(!request.error().message.empty() && request.error().message.find('\n') == std::string::npos);
  }
  // The version check alone, on the input as one line.
  auto unversioned = abox::base::control_request_line(bytes);
  if (unversioned.ok()) {
    check(inside(*unversioned, bytes));
    check(!bytes.starts_with(abox::base::kControlProtocolName) ||
          bytes.starts_with(abox::base::versioned_control_line("")));
  }
  return 0;
}
