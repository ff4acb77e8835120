#include "broker/websocket_relay.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"
#include "tests/support/websocket_client.h"

namespace abox::broker {
namespace {

constexpr std::string_view kKey = "sk-live-ABCDEF1234567890abcdef";

std::string masked(std::string text) {
  for (std::size_t p = text.find(kKey); p != std::string::npos; p = text.find(kKey, p + kKey.size()))
    text.replace(p, kKey.size(), std::string(kKey.size(), '*'));
  return text;
}

std::string frame(bool fin, std::uint8_t opcode, std::string_view payload) {
  std::string out;
  append_websocket_frame(fin, opcode, payload, out);
  return out;
}

struct Relayed {
  std::string out;
  bool ok = true;
  std::uint64_t scrubbed = 0;
};

// Relays `wire` in reads ending at each of `reads`.
Relayed relay_frames(std::string_view wire, std::vector<std::size_t> reads = {}) {
  WebSocketRelay relay;
  relay.start(kKey);
  Relayed r;
  reads.push_back(wire.size());
  std::size_t from = 0;
  for (std::size_t cut : reads) {
    if (cut < from) continue;
    auto used = relay.feed(base::as_bytes(wire.substr(from, cut - from)), r.out);
    if (!used.ok()) {
      r.ok = false;
      return r;
    }
    EXPECT_EQ(*used, cut - from);
    from = cut;
  }
  r.scrubbed = relay.scrubbed();
  return r;
}

const std::string kMessage = "{\"echo\":\"x-api-key: " + std::string(kKey) + "\"}";

TEST(WebSocketRelay, KeyFragmentedAtEveryOffsetIsMaskedInTheMessage) {
  const std::size_t key_at = kMessage.find(kKey);
  for (std::size_t k = 1; k < kKey.size(); ++k) {
    const std::size_t cut = key_at + k;
    // Two fragments, a ping between them (control frames may come there).
    std::string wire = frame(false, 0x1, std::string_view(kMessage).substr(0, cut)) + frame(true, 0x9, "p") +
                       frame(true, 0x0, std::string_view(kMessage).substr(cut));
    ASSERT_EQ(wire.find(kKey), std::string::npos);  // only the joined message holds it
    for (std::size_t read = 0; read <= wire.size(); read += (read < 40 ? 1 : 7)) {
      Relayed r = relay_frames(wire, {read});
      ASSERT_TRUE(r.ok) << k << " " << read;
      auto client = testing::decode_websocket_frames(r.out);
      ASSERT_TRUE(client.has_value()) << k;
      ASSERT_EQ(client->messages.size(), 1u) << k << " " << read;
      EXPECT_EQ(client->messages[0].first, 0x1);
      EXPECT_EQ(client->messages[0].second, masked(kMessage)) << k << " " << read;
      EXPECT_FALSE(client->message_open);
      ASSERT_EQ(client->controls.size(), 1u);
      EXPECT_EQ(client->controls[0].second, "p");
      EXPECT_EQ(r.scrubbed, 1u);
    }
  }
}

TEST(WebSocketRelay, OneByteFragmentsInOneByteReads) {
  const std::string message = kMessage + " and " + std::string(kKey);
  std::string wire;
  for (std::size_t i = 0; i < message.size(); ++i)
    wire += frame(i + 1 == message.size(), i == 0 ? 0x2 : 0x0, std::string_view(message).substr(i, 1));
  std::vector<std::size_t> every_byte;
  for (std::size_t i = 1; i < wire.size(); ++i) every_byte.push_back(i);
  Relayed r = relay_frames(wire, every_byte);
  ASSERT_TRUE(r.ok);
  auto client = testing::decode_websocket_frames(r.out);
  ASSERT_TRUE(client.has_value());
  ASSERT_EQ(client->messages.size(), 1u);
  EXPECT_EQ(client->messages[0].first, 0x2);
  EXPECT_EQ(client->messages[0].second, masked(message));
  EXPECT_EQ(r.scrubbed, 2u);
}

TEST(WebSocketRelay, AControlFramesPayloadIsScrubbedWhole) {
  std::string reason =
      "\x03\xe8"
      "bad key " +
      std::string(kKey);
  Relayed r = relay_frames(frame(true, 0x8, reason), {3, 10});
  ASSERT_TRUE(r.ok);
  auto client = testing::decode_websocket_frames(r.out);
  ASSERT_TRUE(client.has_value());
  ASSERT_EQ(client->controls.size(), 1u);
  EXPECT_EQ(client->controls[0].first, 0x8);
  EXPECT_EQ(client->controls[0].second, masked(reason));
}

TEST(WebSocketRelay, AWholeFrameOrAFragmentGoesOutAtOnce) {
  WebSocketRelay relay;
  relay.start(kKey);
  std::string out;
  ASSERT_TRUE(relay.feed(base::as_bytes(frame(true, 0x1, "{\"delta\":\"hi\"}")), out).ok());
  EXPECT_EQ(out, frame(true, 0x1, "{\"delta\":\"hi\"}"));
  out.clear();
  // A fragment is not held for the next one (only a possible start of the key is).
  ASSERT_TRUE(relay.feed(base::as_bytes(frame(false, 0x1, "part one; sk-li")), out).ok());
  EXPECT_EQ(out, frame(false, 0x1, "part one; "));
  out.clear();
  ASSERT_TRUE(relay.feed(base::as_bytes(frame(true, 0x0, "ne")), out).ok());
  EXPECT_EQ(out, frame(true, 0x0, "sk-line"));
}

TEST(WebSocketRelay, LongLengthsAreReadAndWrittenMinimally) {
  std::string big(70000, 'a');
  big.replace(65530, kKey.size(), kKey);  // across the 16-bit boundary
  std::string wire = frame(true, 0x2, big);
  ASSERT_EQ(static_cast<unsigned char>(wire[1]), 127);
  Relayed r = relay_frames(wire, {5, 65536});
  ASSERT_TRUE(r.ok);
  auto client = testing::decode_websocket_frames(r.out);
  ASSERT_TRUE(client.has_value());
  ASSERT_EQ(client->messages.size(), 1u);
  EXPECT_EQ(client->messages[0].second, masked(big));
  // A 16-bit length written in the 64-bit form is read too.
  std::string wide = std::string("\x82\x7f\0\0\0\0\0\0\0\x03", 10) + "abc";
  r = relay_frames(wide);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.out, frame(true, 0x2, "abc"));
}

TEST(WebSocketRelay, FramesNoServerMaySendAreRefused) {
  struct Case {
    std::string wire;
    WebSocketError error;
  };
  const std::vector<Case> cases = {
      {std::string("\xc1\x01x", 3),
       WebSocketError::reserved_bits},  // RSV1: permessage-deflate nobody agreed to
      {std::string("\x81\x81"
                   "abcd"
                   "x",
                   7),
       WebSocketError::masked},
      {std::string("\x83\x00", 2), WebSocketError::opcode},
      {std::string("\x8b\x00", 2), WebSocketError::opcode},
      {std::string("\x09\x00", 2), WebSocketError::control_frame},  // a fragmented ping
      {"\x89\x7e\x00\x7e" + std::string(126, 'p'), WebSocketError::control_frame},
      {std::string("\x82\x7f\x80\0\0\0\0\0\0\x01", 10), WebSocketError::length},
      {std::string("\x80\x01x", 3), WebSocketError::continuation},
      {std::string("\x01\x01x\x81\x01y", 6), WebSocketError::message_in_message},
  };
  for (const auto& c : cases) {
    WebSocketRelay relay;
    relay.start(kKey);
    std::string out;
    auto used = relay.feed(base::as_bytes(c.wire), out);
    ASSERT_FALSE(used.ok()) << to_string(c.error);
    EXPECT_EQ(used.error(), c.error);
    // It keeps failing, and what it wrote before still reads.
    EXPECT_FALSE(relay.feed(base::as_bytes(frame(true, 0x1, "ok")), out).ok());
    EXPECT_TRUE(testing::decode_websocket_frames(out).has_value());
  }
}

}  // namespace
}  // namespace abox::broker
