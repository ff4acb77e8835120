// Fuzz target: broker/response_relay, which every byte of a provider's
// response body passes through on its way to the guest. The question it
// asks: can any chunking, extension, trailer or read split of a body that
// holds the key make a client decode the key from what the broker sends?
//
// Input: byte 0 picks the mode (bits 0-1), chunk extensions (bit 2), a
// trailer holding the key (bit 3) and the key (bits 4-7, from kKeys, some
// of which overlap themselves); byte 1 is the length of the payload recipe
// that follows; the rest are sizes, used in turn for chunks and reads.
// The recipe is bytes of the payload, except 0xFF (the whole key) and 0xFE
// (the next byte says how much of the key's start).
// Modes:
//   0 chunked: the payload framed as chunks of the given sizes;
//   1 raw: the recipe's bytes as they are, as a chunked body (mostly
//     malformed: the relay must refuse cleanly);
//   2 Content-Length, 3 until the close (also a byte-stream tunnel).
// With the trailer bit, modes 1 and 3 are a WebSocket tunnel instead (the
// broker's relay after a 101 "Upgrade: websocket"): 3 frames the payload as
// one text message in fragments of the given sizes, a ping between every
// two; 1 takes the recipe's bytes as frames as they are.
// Whatever the input: no crash, no hang, and
//   - each body() call uses at most its input and moves on;
//   - what the guest gets is valid chunked framing (chunked modes), ends
//     exactly when the provider's body ended, carries no extension and no
//     trailer, and decodes (tests/support/chunked_client.h: a client's
//     reading, independent of the broker's decoder) to the payload with
//     every key occurrence masked, the key nowhere in it;
//   - Content-Length and until-close bodies come out the same length;
//   - in raw mode, the verdict and the decoded bytes are the same whether
//     the input came whole or in pieces, and never hold the key;
//   - WebSocket: what the guest gets reads (tests/support/websocket_client.h)
//     as whole frames; the message joined from its fragments is the payload
//     with every key masked; control payloads hold no key either.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"
#include "broker/response_relay.h"
#include "tests/support/chunked_client.h"
#include "tests/support/websocket_client.h"

namespace {

[[noreturn]] void fail(const char* what) {
  __builtin_trap();
  (void)what;
}

constexpr std::string_view kKeys[] = {
    "sk-ant-api03-Zq0123456789abcdefXYZ",
    "aab",
    "abab",
    "k",
    "sk-sk-sk-sk",
    "0\r\n",
    "a\r\n\r\nb",
    "x",
    "sk-proj-0123456789",
    ";=\"",
    "aaaaaaaa",
    "abcabd",
    "ab",
    "1;",
    "zzzz",
    "sk-ant-a",
};

std::string masked(std::string text, std::string_view key) {
  for (std::size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + key.size()))
    text.replace(p, key.size(), std::string(key.size(), abox::broker::KeyScrubber::kMask));
  return text;
}

// Sizes from the tail of the input, in turn; 1 + byte, so never 0.
class Sizes {
 public:
  explicit Sizes(std::string_view bytes) : bytes_(bytes) {}
  std::size_t next(std::size_t fallback) {
    if (bytes_.empty()) return fallback;
    auto b = static_cast<std::uint8_t>(bytes_[at_++ % bytes_.size()]);
    return 1 + (b % 64 == 63 ? b * 4u : b % 64);  // mostly small, sometimes a few hundred
  }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

struct Outcome {
  std::string out;
  bool ok = true;
  bool done = false;
};

Outcome run_relay(abox::broker::ResponseFraming framing, std::uint64_t length, std::string_view key,
                  std::string_view wire, Sizes* reads) {
  using namespace abox::broker;
  ResponseRelay relay;
  relay.start(key);
  relay.begin_body(framing, length);
  Outcome o;
  std::size_t at = 0;
  while (at < wire.size() && !relay.body_done()) {
    std::size_t n = reads ? std::min(reads->next(wire.size()), wire.size() - at) : wire.size() - at;
    auto in = abox::base::as_bytes(wire.substr(at, n));
    while (!in.empty() && !relay.body_done()) {
      auto used = relay.body(in, o.out);
      if (!used.ok()) {
        o.ok = false;
        return o;
      }
      if (*used > in.size()) fail("used more than its input");
      if (*used == 0) fail("no progress");
      in = in.subspan(*used);
      at += *used;
    }
    if (!in.empty() && !relay.body_done()) fail("input left before the body ended");
    if (!in.empty()) break;  // bytes after the body: not its own
  }
  o.done = relay.body_done();
  relay.end_of_stream(o.out);
  return o;
}

Outcome run_tunnel(std::string_view key, std::string_view wire, Sizes* reads) {
  using namespace abox::broker;
  ResponseRelay relay;
  relay.start(key);
  relay.begin_tunnel(true);
  Outcome o;
  for (std::size_t at = 0; at < wire.size();) {
    std::size_t n = reads ? std::min(reads->next(wire.size()), wire.size() - at) : wire.size() - at;
    auto used = relay.tunnel(abox::base::as_bytes(wire.substr(at, n)), o.out);
    if (!used.ok()) {
      o.ok = false;
      break;
    }
    if (*used != n) fail("a tunnel read not used whole");
    at += n;
  }
  relay.end_of_stream(o.out);
  return o;
}

void check_websocket_read(const Outcome& o, std::string_view key) {
  auto client = abox::testing::decode_websocket_frames(o.out);
  if (!client) fail("the guest got bytes that are not WebSocket frames");
  for (const auto& [opcode, payload] : client->messages)
    if (payload.find(key) != std::string::npos) fail("the guest joins the key from fragments");
  for (const auto& [opcode, payload] : client->controls)
    if (payload.find(key) != std::string::npos) fail("the key in a control frame");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::broker;
  if (size < 2) return 0;
  const unsigned mode = data[0] & 3;
  const bool extensions = (data[0] & 4) != 0;
  const bool trailer = (data[0] & 8) != 0;
  const std::string_view key = kKeys[data[0] >> 4];
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  const std::size_t recipe_size = std::min<std::size_t>(data[1], rest.size());
  const std::string_view recipe = rest.substr(0, recipe_size);
  Sizes sizes(rest.substr(recipe_size));

  if (mode == 1 && trailer) {
    Outcome whole = run_tunnel(key, recipe, nullptr);
    Outcome pieces = run_tunnel(key, recipe, &sizes);
    if (whole.ok != pieces.ok) fail("WebSocket verdict depends on the split");
    check_websocket_read(whole, key);
    check_websocket_read(pieces, key);
    auto a = abox::testing::decode_websocket_frames(whole.out);
    auto b = abox::testing::decode_websocket_frames(pieces.out);
    if (a->messages != b->messages || a->controls != b->controls)
      fail("WebSocket messages depend on the split");
    return 0;
  }
  if (mode == 1) {
    Outcome whole = run_relay(ResponseFraming::chunked, 0, key, recipe, nullptr);
    Outcome pieces = run_relay(ResponseFraming::chunked, 0, key, recipe, &sizes);
    auto a = abox::testing::decode_chunked_body(whole.out);
    auto b = abox::testing::decode_chunked_body(pieces.out);
    if (!a || !b) fail("the guest got bytes that are not chunked framing");
    if (whole.ok != pieces.ok || whole.done != pieces.done) fail("verdict depends on the split");
    if (a->ended != whole.done || b->ended != pieces.done)
      fail("the guest's body ends when the provider's did not");
    if (a->payload != b->payload) fail("payload depends on the split");
    if (a->payload.find(key) != std::string::npos || b->payload.find(key) != std::string::npos)
      fail("the guest decodes the key");
    if (!a->trailer.empty() || a->extensions != 0 || !b->trailer.empty() || b->extensions != 0)
      fail("an extension or trailer reached the guest");
    return 0;
  }

  std::string payload;
  for (std::size_t i = 0; i < recipe.size(); ++i) {
    auto c = static_cast<std::uint8_t>(recipe[i]);
    if (c == 0xFF) {
      payload.append(key);
    } else if (c == 0xFE && i + 1 < recipe.size()) {
      payload.append(key.substr(0, static_cast<std::uint8_t>(recipe[++i]) % key.size()));
    } else {
      payload.push_back(static_cast<char>(c));
    }
  }
  const std::string expected = masked(payload, key);
  if (expected.find(key) != std::string::npos) fail("the reference left a key");  // keys hold no mask

  if (mode == 0) {
    std::string wire;
    const std::string_view ext = extensions ? ";sk-ant-a=\"0\\r\";x" : "";
    for (std::size_t at = 0; at < payload.size();) {
      std::size_t n = std::min(sizes.next(payload.size()), payload.size() - at);
      char line[24];
      int len = std::snprintf(line, sizeof line, "%zx", n);
      wire.append(line, static_cast<std::size_t>(len)).append(ext).append("\r\n");
      wire.append(payload, at, n).append("\r\n");
      at += n;
    }
    wire.append("0").append(ext).append("\r\n");
    if (trailer)
      wire.append("X-Key: ").append(key.find('\r') == std::string_view::npos ? key : "k").append("\r\n");
    wire.append("\r\n");
    Outcome o = run_relay(ResponseFraming::chunked, 0, key, wire, &sizes);
    if (!o.ok || !o.done) fail("a well-formed chunked body was refused");
    auto body = abox::testing::decode_chunked_body(o.out);
    if (!body || !body->ended || body->body_bytes != o.out.size())
      fail("the guest's body is not one chunked body");
    if (!body->trailer.empty() || body->extensions != 0) fail("an extension or trailer reached the guest");
    if (body->payload != expected) fail("the guest decodes something other than the masked payload");
    if (body->payload.find(key) != std::string::npos) fail("the guest decodes the key");
    return 0;
  }

  if (mode == 3 && trailer) {
    std::string wire;
    std::size_t fragments = 0;
    for (std::size_t at = 0; at < payload.size() || fragments == 0;) {
      std::size_t n = std::min(sizes.next(payload.size()), payload.size() - at);
      if (fragments != 0)
        append_websocket_frame(true, 0x9, key.substr(0, std::min<std::size_t>(key.size(), 125)), wire);
      append_websocket_frame(at + n == payload.size(), fragments == 0 ? 0x1 : 0x0,
                             std::string_view(payload).substr(at, n), wire);
      ++fragments;
      at += n;
    }
    Outcome o = run_tunnel(key, wire, &sizes);
    if (!o.ok) fail("well-formed WebSocket frames were refused");
    check_websocket_read(o, key);
    auto client = abox::testing::decode_websocket_frames(o.out);
    if (client->messages.size() != 1 || client->message_open) fail("not one whole message");
    if (client->messages[0].second != expected) fail("the message is not the masked payload");
    if (client->controls.size() != fragments - 1) fail("a ping lost or added");
    return 0;
  }

  const ResponseFraming framing = mode == 2 ? ResponseFraming::content_length : ResponseFraming::until_close;
  Outcome o = run_relay(framing, payload.size(), key, payload, &sizes);
  if (!o.ok || (mode == 2 && !o.done)) fail("a well-formed body was refused");
  if (o.out != expected) fail("the guest gets something other than the masked payload");
  return 0;
}
