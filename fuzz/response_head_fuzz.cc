// Fuzz target: broker/response_head and broker/key_scrubber, which see every
// byte a provider sends back before the guest does. The first input byte
// picks whether the request was HEAD and how the response is split; the rest
// is the response. Whatever the input: no crash, no hang, and
//   - the head parse is monotone: every prefix that decides decides the same
//     way, and a complete head's head_bytes lies inside the input and ends in
//     CRLF CRLF;
//   - the head rewritten for the guest (write_guest_response_head) parses
//     again to the same status and framing;
//   - the scrubber, fed the response in pieces of the chosen size, returns
//     exactly as many bytes as it was given, none of them a key occurrence.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/key_scrubber.h"
#include "broker/response_head.h"

namespace {

[[noreturn]] void fail(const char* what) {
  __builtin_trap();
  (void)what;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::broker;
  if (size < 1) return 0;
  const bool was_head = (data[0] & 1) != 0;
  const std::size_t piece = 1 + (data[0] >> 1);
  std::span<const std::uint8_t> input(data + 1, size - 1);

  ResponseHead full;
  auto whole = parse_response_head(input, was_head, full);
  if (whole.ok() && *whole == ResponseHeadStatus::complete) {
    if (full.head_bytes < 4 || full.head_bytes > input.size()) fail("head_bytes outside the input");
    if (input[full.head_bytes - 2] != '\r' || input[full.head_bytes - 1] != '\n')
      fail("head does not end in CRLF");
    if (full.status < 100 || full.status > 599) fail("status out of range");
    // The head the guest gets parses to the same status and framing.
    std::string text(reinterpret_cast<const char*>(input.data()), full.head_bytes);
    std::string guest;
    write_guest_response_head(text, (data[0] & 2) != 0, guest);
    ResponseHead again;
    auto r = parse_response_head(abox::base::as_bytes(guest), was_head, again);
    if (!r.ok() || *r != ResponseHeadStatus::complete) fail("guest head does not parse");
    if (again.status != full.status || again.framing != full.framing || again.head_bytes != guest.size())
      fail("guest head differs");
    if ((data[0] & 2) != 0 && !again.connection_close) fail("close not said");
  }
  // Monotone: sampled prefixes (each step of `piece` bytes, and the whole).
  bool decided = false;
  for (std::size_t n = 0; n <= input.size(); n += piece) {
    ResponseHead head;
    auto r = parse_response_head(input.first(n), was_head, head);
    bool decides = !r.ok() || *r == ResponseHeadStatus::complete;
    if (decided && !decides) fail("a longer prefix undecided");
    if (decides) {
      decided = true;
      if (r.ok() != whole.ok()) fail("prefix and whole disagree");
      if (r.ok() && head.head_bytes != full.head_bytes) fail("head_bytes differs");
      if (!r.ok() && !whole.ok() && r.error() != whole.error() &&
          r.error() != ResponseError::head_too_large && whole.error() != ResponseError::head_too_large)
        fail("errors differ");
    }
  }

  // The scrubber, with a key taken from the input itself (worst case).
  std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  std::string_view key = text.substr(0, std::min<std::size_t>(text.size(), 1 + (data[0] % 24)));
  KeyScrubber scrubber(key);
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += piece) scrubber.feed(text.substr(i, piece), out);
  scrubber.finish(out);
  if (out.size() != text.size()) fail("scrubber changed the length");
  if (!key.empty() && key.find('*') == std::string_view::npos && out.find(key) != std::string::npos)
    fail("a key occurrence survived");
  return 0;
}
