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
//     exactly as many bytes as it was given, none of them a key occurrence;
//   - a chunked body after a complete head, decoded as the broker decodes
//     upstream responses (trailer fields allowed, bounded, dropped), gives
//     the same verdict, payload and forwarded bytes whole and in pieces,
//     and what the relay (response_relay.h, no key) would forward is a
//     chunked body with no trailer that decodes (trailers refused) to the
//     same payload. fuzz/response_relay_fuzz.cc asks the same of bodies
//     that hold the key.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/body_decoder.h"
#include "broker/key_scrubber.h"
#include "broker/response_head.h"
#include "broker/response_relay.h"

namespace {

[[noreturn]] void fail(const char* what) {
  __builtin_trap();
  (void)what;
}

struct Decoded {
  bool ok = true;
  bool done = false;
  std::string payload;
  std::string forwarded;  // what the relay writes for the guest
};

// Feeds `body` in pieces of `piece` bytes, as the broker does when bytes
// arrive: to a decoder with `limits`, and to the relay for what the guest gets.
Decoded decode_chunked(std::span<const std::uint8_t> body, std::size_t piece,
                       const abox::broker::BodyLimits& limits) {
  using namespace abox::broker;
  BodyDecoder decoder(BodyFraming::chunked, 0, limits);
  Decoded out;
  for (std::size_t at = 0; at < body.size() && !decoder.done(); at += piece) {
    auto in = body.subspan(at, std::min(piece, body.size() - at));
    while (!in.empty() && !decoder.done()) {
      auto step = decoder.feed(in);
      if (!step.ok()) {
        out.ok = false;
        return out;
      }
      if (step->consumed == 0) fail("no progress");
      out.payload.append(reinterpret_cast<const char*>(step->payload.data()), step->payload.size());
      in = in.subspan(step->consumed);
    }
  }
  out.done = decoder.done();
  ResponseRelay relay;
  relay.start({});
  relay.begin_body(ResponseFraming::chunked, 0);
  for (std::size_t at = 0; at < body.size() && !relay.body_done(); at += piece) {
    auto in = body.subspan(at, std::min(piece, body.size() - at));
    while (!in.empty() && !relay.body_done()) {
      auto used = relay.body(in, out.forwarded);
      if (!used.ok()) break;
      in = in.subspan(*used);
    }
  }
  return out;
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

    if (full.framing == ResponseFraming::chunked) {
      // As connection_upstream.cc decodes a provider's chunked body.
      const BodyLimits limits{1u << 20, 8, 256};
      auto body = input.subspan(full.head_bytes);
      Decoded body_whole = decode_chunked(body, body.size() + 1, limits);
      Decoded body_pieces = decode_chunked(body, piece, limits);
      if (body_whole.ok != body_pieces.ok || body_whole.done != body_pieces.done)
        fail("body verdict depends on the split");
      if (body_whole.ok && body_whole.payload != body_pieces.payload) fail("body bytes depend on the split");
      if (body_whole.ok && body_whole.done) {
        // What the guest gets (framed by the relay, chunk sizes its own)
        // decodes, trailers refused, to the payload, whatever the split.
        for (const Decoded* d : {&body_whole, &body_pieces}) {
          if (!d->forwarded.ends_with("\r\n0\r\n\r\n") && d->forwarded != "0\r\n\r\n")
            fail("forwarded body does not end with the last chunk alone");
          Decoded reread = decode_chunked(abox::base::as_bytes(d->forwarded), d->forwarded.size() + 1,
                                          BodyLimits{1u << 20, 0, 0});
          if (!reread.ok || !reread.done) fail("forwarded body carries a trailer or does not end");
          if (reread.payload != body_whole.payload) fail("forwarded body decodes to another payload");
        }
      }
    }
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
