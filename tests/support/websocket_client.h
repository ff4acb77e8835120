// How a WebSocket client reads a server's frames, for tests that check what
// a guest decodes from the broker's tunnel: written apart from
// broker/websocket_relay.h. Fragments are joined into messages (RFC 6455
// 5.4), control frames are kept in order with their payloads, a masked
// frame is unmasked. decode_websocket_frames() returns nullopt for bytes no
// client could read (a continuation outside a message, a frame cut short is
// only "not yet").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace abox::testing {

struct ClientWebSocketRead {
  std::vector<std::pair<int, std::string>> messages;  // opcode of the first frame, joined payload
  std::vector<std::pair<int, std::string>> controls;  // opcode, payload
  std::size_t frames = 0;
  bool message_open = false;  // a message began and has not ended yet
};

inline std::optional<ClientWebSocketRead> decode_websocket_frames(std::string_view in) {
  ClientWebSocketRead out;
  std::string partial;
  int partial_opcode = 0;
  std::size_t at = 0;
  while (in.size() - at >= 2) {
    auto b0 = static_cast<unsigned char>(in[at]);
    auto b1 = static_cast<unsigned char>(in[at + 1]);
    std::size_t h = 2;
    std::uint64_t n = b1 & 0x7F;
    if (n == 126) {
      if (in.size() - at < 4) break;
      n = (std::uint64_t{static_cast<unsigned char>(in[at + 2])} << 8) |
          static_cast<unsigned char>(in[at + 3]);
      h = 4;
    } else if (n == 127) {
      if (in.size() - at < 10) break;
      n = 0;
      for (std::size_t i = 2; i < 10; ++i) n = (n << 8) | static_cast<unsigned char>(in[at + i]);
      h = 10;
    }
    const bool masked = (b1 & 0x80) != 0;
    std::string mask;
    if (masked) {
      if (in.size() - at < h + 4) break;
      mask = std::string(in.substr(at + h, 4));
      h += 4;
    }
    if (in.size() - at - h < n) break;
    std::string payload(in.substr(at + h, n));
    for (std::size_t i = 0; masked && i < payload.size(); ++i)
      payload[i] = static_cast<char>(payload[i] ^ mask[i % 4]);
    at += h + n;
    ++out.frames;
    const int opcode = b0 & 0x0F;
    const bool fin = (b0 & 0x80) != 0;
    if (opcode >= 8) {
      out.controls.emplace_back(opcode, payload);
      continue;
    }
    if (opcode == 0) {
      if (!out.message_open) return std::nullopt;
    } else {
      if (out.message_open) return std::nullopt;
      partial_opcode = opcode;
      out.message_open = true;
    }
    partial += payload;
    if (fin) {
      out.messages.emplace_back(partial_opcode, partial);
      partial.clear();
      out.message_open = false;
    }
  }
  return out;
}

}  // namespace abox::testing
