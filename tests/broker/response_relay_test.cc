#include "broker/response_relay.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"
#include "tests/support/chunked_client.h"

namespace abox::broker {
namespace {

constexpr std::string_view kKey = "sk-live-ABCDEF1234567890abcdef";

// The reference: every occurrence a left-to-right search finds, masked.
std::string masked(std::string text) {
  for (std::size_t p = text.find(kKey); p != std::string::npos; p = text.find(kKey, p + kKey.size()))
    text.replace(p, kKey.size(), std::string(kKey.size(), '*'));
  return text;
}

// "x-api-key: KEY" echoed in a JSON body, as a reflecting provider would.
std::string echo_payload() {
  return "{\"echo\":\"x-api-key: " + std::string(kKey) + "\"}\n";
}

// The payload as chunks ending at each of `cuts` (offsets into it), each
// size line carrying `extension` (e.g. ";a=b"), then `trailer` fields.
std::string chunked(std::string_view payload, std::vector<std::size_t> cuts, std::string_view extension = "",
                    std::string_view trailer = "") {
  cuts.push_back(payload.size());
  std::string wire;
  std::size_t from = 0;
  for (std::size_t cut : cuts) {
    if (cut <= from) continue;
    char size[32];
    std::snprintf(size, sizeof size, "%zx", cut - from);
    wire.append(size)
        .append(extension)
        .append("\r\n")
        .append(payload.substr(from, cut - from))
        .append("\r\n");
    from = cut;
  }
  wire.append("0").append(extension).append("\r\n").append(trailer).append("\r\n");
  return wire;
}

struct Relayed {
  std::string out;
  bool ok = true;
  bool done = false;
  std::size_t used = 0;
  std::uint64_t scrubbed = 0;
};

// Relays `wire` as the body of a response framed `framing`, handed over in
// reads that end at each of `reads` (offsets into the wire), then the end of
// the provider's stream.
Relayed relay_body(ResponseFraming framing, std::string_view wire, std::vector<std::size_t> reads = {},
                   std::uint64_t content_length = 0) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(framing, content_length);
  Relayed r;
  reads.push_back(wire.size());
  std::size_t from = 0;
  for (std::size_t cut : reads) {
    if (cut < from || relay.body_done()) continue;
    auto in = base::as_bytes(wire.substr(from, cut - from));
    while (!in.empty() && !relay.body_done()) {
      auto used = relay.body(in, r.out);
      if (!used.ok()) {
        r.ok = false;
        return r;
      }
      r.used += *used;
      if (*used == 0) break;
      in = in.subspan(*used);
    }
    from = cut;
  }
  r.done = relay.body_done();
  relay.end_of_stream(r.out);
  r.scrubbed = relay.scrubbed();
  return r;
}

// What a client decodes from the relay's chunked output: the masked payload,
// all of it, and nothing of the provider's framing.
void expect_client_reads_masked(const Relayed& r, std::string_view payload, const std::string& what) {
  ASSERT_TRUE(r.ok) << what;
  ASSERT_TRUE(r.done) << what;
  auto body = testing::decode_chunked_body(r.out);
  ASSERT_TRUE(body.has_value()) << what << ": " << r.out;
  EXPECT_TRUE(body->ended) << what;
  EXPECT_EQ(body->body_bytes, r.out.size()) << what;
  EXPECT_EQ(body->payload, masked(std::string(payload))) << what;
  EXPECT_EQ(body->payload.find(kKey), std::string::npos) << what;
  EXPECT_EQ(body->extensions, 0u) << what;
  EXPECT_TRUE(body->trailer.empty()) << what;
}

TEST(ResponseRelay, ChunkBoundaryAtEveryOffsetOfTheKey) {
  const std::string payload = echo_payload();
  const std::size_t key_at = payload.find(kKey);
  for (std::size_t k = 1; k < kKey.size(); ++k) {
    std::string wire = chunked(payload, {key_at + k});
    // The framed bytes never hold the key: only decoding shows it.
    ASSERT_EQ(wire.find(kKey), std::string::npos);
    Relayed r = relay_body(ResponseFraming::chunked, wire);
    expect_client_reads_masked(r, payload, "cut at key+" + std::to_string(k));
    EXPECT_EQ(r.scrubbed, 1u) << k;
  }
}

TEST(ResponseRelay, ChunkBoundaryPlusAReadSplitAtEveryOffset) {
  const std::string payload = echo_payload();
  const std::size_t key_at = payload.find(kKey);
  for (std::size_t k = 1; k < kKey.size(); ++k) {
    std::string wire = chunked(payload, {key_at + k});
    for (std::size_t read = 1; read < wire.size(); ++read) {
      Relayed r = relay_body(ResponseFraming::chunked, wire, {read});
      expect_client_reads_masked(r, payload,
                                 "cut at key+" + std::to_string(k) + ", read at " + std::to_string(read));
    }
  }
}

TEST(ResponseRelay, ChunkExtensionsAtEveryOffsetOfTheKey) {
  const std::string payload = echo_payload();
  const std::size_t key_at = payload.find(kKey);
  for (std::size_t k = 1; k < kKey.size(); ++k) {
    std::string wire = chunked(payload, {key_at + k / 2, key_at + k}, ";name=\"quoted;value\"");
    for (std::size_t read : {std::size_t{1}, key_at, key_at + k, wire.size() - 3}) {
      Relayed r = relay_body(ResponseFraming::chunked, wire, {read});
      expect_client_reads_masked(r, payload, "extensions, cut at key+" + std::to_string(k));
    }
  }
}

TEST(ResponseRelay, OneByteChunksWithExtensionsAndTrailers) {
  const std::string payload = echo_payload() + "again " + std::string(kKey) + std::string(kKey);
  std::vector<std::size_t> every_byte;
  for (std::size_t i = 1; i < payload.size(); ++i) every_byte.push_back(i);
  for (std::string_view ext : {"", ";x", ";k=v;k2=\"v2\""}) {
    for (std::string_view trailer : {"", "X-Key: sk-live-ABCDEF1234567890abcdef\r\nX-Sum: 1\r\n"}) {
      std::string wire = chunked(payload, every_byte, ext, trailer);
      std::vector<std::size_t> one_byte_reads;
      for (std::size_t i = 1; i < wire.size(); ++i) one_byte_reads.push_back(i);
      for (const auto& reads : {std::vector<std::size_t>{}, one_byte_reads}) {
        Relayed r = relay_body(ResponseFraming::chunked, wire, reads);
        expect_client_reads_masked(r, payload, "one-byte chunks, extension '" + std::string(ext) + "'");
        EXPECT_EQ(r.scrubbed, 3u);
        EXPECT_EQ(r.out.find("X-Key"), std::string::npos);
      }
    }
  }
}

TEST(ResponseRelay, ContentLengthKeySplitByReadsAtEveryOffset) {
  const std::string payload = echo_payload();
  for (std::size_t read = 0; read <= payload.size(); ++read) {
    Relayed r = relay_body(ResponseFraming::content_length, payload, {read}, payload.size());
    ASSERT_TRUE(r.ok && r.done) << read;
    EXPECT_EQ(r.out, masked(payload)) << read;  // same length: Content-Length stays right
    EXPECT_EQ(r.used, payload.size()) << read;
  }
}

TEST(ResponseRelay, UntilCloseLetsTheHeldTailOutAtTheEnd) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(ResponseFraming::until_close, 0);
  std::string out;
  std::string_view tail = "no key here, only its start: sk-live-ABC";
  ASSERT_TRUE(relay.body(base::as_bytes(tail), out).ok());
  EXPECT_EQ(out, "no key here, only its start: ");  // held: it could still become the key
  EXPECT_FALSE(relay.body_done());
  relay.end_of_stream(out);
  EXPECT_EQ(out, tail);
  // Split at every offset, the key is caught.
  const std::string payload = echo_payload();
  for (std::size_t read = 0; read <= payload.size(); ++read) {
    Relayed r = relay_body(ResponseFraming::until_close, payload, {read});
    EXPECT_EQ(r.out, masked(payload)) << read;
  }
}

TEST(ResponseRelay, TunnelAfterA101IsScrubbedAsAStream) {
  ResponseRelay relay;
  relay.start(kKey);
  std::string out;
  relay.head("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", out);
  relay.begin_body(ResponseFraming::until_close, 0);
  std::string stream = "key=" + std::string(kKey) + "\nline two\n";
  for (char c : stream) ASSERT_TRUE(relay.body(base::as_bytes(std::string_view(&c, 1)), out).ok());
  relay.end_of_stream(out);
  EXPECT_EQ(out.find(kKey), std::string::npos);
  EXPECT_NE(out.find("key=" + std::string(kKey.size(), '*') + "\nline two\n"), std::string::npos) << out;
}

TEST(ResponseRelay, HeadIsScrubbedWholeAndOnItsOwn) {
  ResponseRelay relay;
  relay.start(kKey);
  std::string out;
  std::string head =
      "HTTP/1.1 200 OK\r\nx-echo-x-api-key: " + std::string(kKey) + "\r\nContent-Length: 3\r\n\r\n";
  relay.head(head, out);
  EXPECT_EQ(out, masked(head));
  EXPECT_EQ(relay.scrubbed(), 1u);
}

TEST(ResponseRelay, AStreamedEventIsNeverHeldBack) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(ResponseFraming::chunked, 0);
  std::string out;
  std::string_view event = "1a\r\nevent: message\ndata: one\n\n\r\n";
  auto used = relay.body(base::as_bytes(event), out);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, event.size());
  EXPECT_EQ(out, "1a\r\nevent: message\ndata: one\n\n\r\n");  // at once, one chunk
}

TEST(ResponseRelay, BytesAfterTheBodyAreLeftForTheCaller) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(ResponseFraming::chunked, 0);
  std::string out;
  std::string wire = chunked("hello", {}) + "HTTP/1.1 200 OK\r\n";
  auto used = relay.body(base::as_bytes(wire), out);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, wire.size() - std::string_view("HTTP/1.1 200 OK\r\n").size());
  EXPECT_TRUE(relay.body_done());
  EXPECT_EQ(out, "5\r\nhello\r\n0\r\n\r\n");
}

TEST(ResponseRelay, BrokenFramingIsAnErrorAndWhatCameBeforeStillDecodes) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(ResponseFraming::chunked, 0);
  std::string out;
  std::string wire = "5\r\nhello\r\n5\r\nworldXX";  // no CRLF after the data
  auto used = relay.body(base::as_bytes(wire), out);
  EXPECT_FALSE(used.ok());
  auto body = testing::decode_chunked_body(out);
  ASSERT_TRUE(body.has_value());
  EXPECT_FALSE(body->ended);  // no fake end
  EXPECT_EQ(body->payload, "helloworld");
  relay.end_of_stream(out);  // a cut chunked body: nothing more
  EXPECT_EQ(testing::decode_chunked_body(out)->payload, "helloworld");
}

TEST(ResponseRelay, NoBodyIsDoneAtOnce) {
  ResponseRelay relay;
  relay.start(kKey);
  relay.begin_body(ResponseFraming::none, 0);
  EXPECT_TRUE(relay.body_done());
  relay.begin_body(ResponseFraming::content_length, 0);
  EXPECT_TRUE(relay.body_done());
}

}  // namespace
}  // namespace abox::broker
