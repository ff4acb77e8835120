// How an HTTP/1.1 client reads a chunked body, for tests that check what a
// guest decodes from the broker: written apart from broker/body_decoder.h
// (so a shared mistake cannot hide), and lenient where clients are (chunk
// extensions are skipped, trailer fields are read and kept, hex in any case).
// decode_chunked_body() returns nullopt for bytes no client could read as a
// chunked body (a bad size line, data not followed by CRLF); `ended` says
// whether the last chunk and the empty line after it arrived.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace abox::testing {

struct ClientChunkedBody {
  std::string payload;
  std::string trailer;         // trailer field lines as sent, CRLFs included
  std::size_t extensions = 0;  // chunk-size lines that carried one
  bool ended = false;          // "0" CRLF [trailer] CRLF arrived
  std::size_t body_bytes = 0;  // how many input bytes the body took (when ended)
};

inline std::optional<ClientChunkedBody> decode_chunked_body(std::string_view in) {
  ClientChunkedBody out;
  std::size_t at = 0;
  for (;;) {
    std::size_t eol = in.find("\r\n", at);
    if (eol == std::string_view::npos) return out;  // the size line has not all arrived
    std::string_view line = in.substr(at, eol - at);
    std::size_t semi = line.find(';');
    if (semi != std::string_view::npos) {
      ++out.extensions;
      line = line.substr(0, semi);
    }
    if (line.empty() || line.size() > 16) return std::nullopt;
    std::uint64_t size = 0;
    for (char c : line) {
      int v = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (v < 0) return std::nullopt;
      size = size * 16 + static_cast<std::uint64_t>(v);
    }
    at = eol + 2;
    if (size == 0) {
      for (;;) {  // trailer fields, then the empty line
        std::size_t end = in.find("\r\n", at);
        if (end == std::string_view::npos) return out;
        if (end == at) {
          out.ended = true;
          out.body_bytes = end + 2;
          return out;
        }
        out.trailer.append(in.substr(at, end + 2 - at));
        at = end + 2;
      }
    }
    if (in.size() - at < size) {  // a chunk still arriving: its data so far
      out.payload.append(in.substr(at));
      return out;
    }
    out.payload.append(in.substr(at, size));
    at += size;
    if (in.size() - at < 2) return out;
    if (in.substr(at, 2) != "\r\n") return std::nullopt;
    at += 2;
  }
}

}  // namespace abox::testing
