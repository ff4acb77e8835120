// Tests for netstack/stack/name_peek. The TLS cases start from ClientHellos real
// clients sent (captured below) and from hellos built field by field, so each
// test states the shape it feeds the peek; the HTTP cases are written out as
// text. Throughout, the peek must say need_more on every proper prefix of an
// input it decides, and must decide the same whatever follows.

#include "netstack/stack/name_peek.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/support/alloc_counter.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::size_t kLimit = 4096;  // the policy's default peek_bytes

// ---- captured ClientHellos ---------------------------------------------------
//
// Each is the first flight of a client that connected to a local listener,
// exactly as it left the socket: one TLS record holding one ClientHello.

// Python 3 ssl (OpenSSL 3.0), default client context, ALPN h2 and http/1.1,
// server_hostname "api.github.com": TLS 1.3 with 12 extensions and padding (517 bytes).
constexpr std::uint8_t kPythonTls13Hello[] = {
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x9e, 0xbd, 0xa7, 0x90, 0x40, 0x51,
    0xdc, 0x68, 0x83, 0xa6, 0xb1, 0x7d, 0x66, 0xf7, 0x4d, 0xa7, 0x0d, 0xe9, 0xc0, 0x01, 0x3e, 0x5f, 0x2a,
    0x43, 0xd4, 0xbb, 0x7f, 0x73, 0xf3, 0x54, 0x05, 0xb8, 0x20, 0x13, 0x84, 0x34, 0x7f, 0x9e, 0x3b, 0x0d,
    0x74, 0xca, 0x25, 0x9a, 0x35, 0x74, 0x70, 0xd5, 0xc2, 0x4b, 0x31, 0x31, 0xd4, 0x59, 0x51, 0xba, 0xee,
    0x88, 0xb7, 0x36, 0x93, 0x47, 0x4f, 0x36, 0xa1, 0x00, 0x24, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0,
    0x2c, 0xc0, 0x30, 0xc0, 0x2b, 0xc0, 0x2f, 0xcc, 0xa9, 0xcc, 0xa8, 0xc0, 0x24, 0xc0, 0x28, 0xc0, 0x23,
    0xc0, 0x27, 0x00, 0x9f, 0x00, 0x9e, 0x00, 0x6b, 0x00, 0x67, 0x00, 0xff, 0x01, 0x00, 0x01, 0x8f, 0x00,
    0x00, 0x00, 0x13, 0x00, 0x11, 0x00, 0x00, 0x0e, 0x61, 0x70, 0x69, 0x2e, 0x67, 0x69, 0x74, 0x68, 0x75,
    0x62, 0x2e, 0x63, 0x6f, 0x6d, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16,
    0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01, 0x01,
    0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, 0x68,
    0x32, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00,
    0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08,
    0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06,
    0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x05,
    0x04, 0x03, 0x04, 0x03, 0x03, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24,
    0x00, 0x1d, 0x00, 0x20, 0xad, 0x82, 0x7b, 0x38, 0x9f, 0xa6, 0xbd, 0x21, 0x9b, 0x23, 0x9b, 0x29, 0x19,
    0x80, 0x18, 0xaf, 0x1e, 0x80, 0x08, 0xb2, 0xab, 0x8a, 0xf5, 0x15, 0x43, 0xb8, 0x22, 0x72, 0x2d, 0x7d,
    0x6f, 0x4e, 0x00, 0x15, 0x00, 0xcd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

// Python 3 ssl, maximum_version TLS 1.2, server_hostname "Example.COM"
// (sent as typed: the peek folds case) (182 bytes).
constexpr std::uint8_t kPythonTls12Hello[] = {
    0x16, 0x03, 0x01, 0x00, 0xb1, 0x01, 0x00, 0x00, 0xad, 0x03, 0x03, 0x15, 0x0c, 0x2d, 0x4d, 0x87, 0x46,
    0x1f, 0xdd, 0x3f, 0x13, 0x03, 0xa1, 0xf3, 0x51, 0x0a, 0xe1, 0x7b, 0x55, 0xe1, 0xfc, 0x65, 0x35, 0x1f,
    0x7a, 0x86, 0x84, 0x65, 0xbf, 0x96, 0x34, 0xec, 0xa4, 0x00, 0x00, 0x1e, 0xc0, 0x2c, 0xc0, 0x30, 0xc0,
    0x2b, 0xc0, 0x2f, 0xcc, 0xa9, 0xcc, 0xa8, 0xc0, 0x24, 0xc0, 0x28, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x9f,
    0x00, 0x9e, 0x00, 0x6b, 0x00, 0x67, 0x00, 0xff, 0x01, 0x00, 0x00, 0x66, 0x00, 0x00, 0x00, 0x10, 0x00,
    0x0e, 0x00, 0x00, 0x0b, 0x45, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x43, 0x4f, 0x4d, 0x00, 0x0b,
    0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x1d, 0x00, 0x17, 0x00,
    0x1e, 0x00, 0x19, 0x00, 0x18, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00,
    0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08,
    0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01,
    0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02,
};

// `openssl s_client -servername www.example.org -alpn h2,http/1.1
// -groups x25519:secp256r1:secp384r1` (OpenSSL 3.0.19) (325 bytes).
constexpr std::uint8_t kOpensslHello[] = {
    0x16, 0x03, 0x01, 0x01, 0x40, 0x01, 0x00, 0x01, 0x3c, 0x03, 0x03, 0x7d, 0x9a, 0x87, 0xad, 0xb4, 0xb4,
    0x30, 0x8e, 0xca, 0x55, 0x0f, 0xa4, 0x7b, 0x09, 0xeb, 0x73, 0x62, 0x36, 0x24, 0x46, 0x7d, 0x46, 0x8a,
    0x8d, 0x3c, 0x49, 0xae, 0xe2, 0x79, 0x97, 0x14, 0x8b, 0x20, 0x4a, 0x2a, 0xf9, 0x1e, 0x7d, 0x68, 0xcb,
    0x63, 0x42, 0x44, 0x13, 0xe3, 0x89, 0x4a, 0xaf, 0x48, 0xe0, 0x31, 0x67, 0xd7, 0xb7, 0x29, 0xea, 0x99,
    0x15, 0x4c, 0x1e, 0x9f, 0x04, 0x34, 0x0a, 0x65, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0,
    0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e,
    0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00,
    0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35,
    0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0xb5, 0x00, 0x00, 0x00, 0x14, 0x00, 0x12, 0x00, 0x00, 0x0f,
    0x77, 0x77, 0x77, 0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x6f, 0x72, 0x67, 0x00, 0x0b,
    0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x08, 0x00, 0x06, 0x00, 0x1d, 0x00, 0x17, 0x00,
    0x18, 0x00, 0x23, 0x00, 0x00, 0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, 0x68, 0x32, 0x08, 0x68, 0x74,
    0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00,
    0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a,
    0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03,
    0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03,
    0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24,
    0x00, 0x1d, 0x00, 0x20, 0xbb, 0x1e, 0x1a, 0xc8, 0xaa, 0x2d, 0x63, 0x21, 0x41, 0x58, 0xae, 0x8f, 0x19,
    0x64, 0x93, 0xc4, 0x6a, 0x33, 0x80, 0xc6, 0x26, 0xed, 0xe0, 0x52, 0x52, 0x07, 0xfd, 0x53, 0x7d, 0xf8,
    0xcb, 0x4e,
};

// ---- helpers ------------------------------------------------------------------

template <std::size_t N>
Bytes bytes_of(const std::uint8_t (&array)[N]) {
  return Bytes(array, array + N);
}
Bytes bytes_of(std::string_view text) {
  return Bytes(text.begin(), text.end());
}
Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PeekResult peek(const Bytes& b, std::size_t limit = kLimit) {
  return peek_name(b, limit);
}
PeekResult peek(std::string_view text, std::size_t limit = kLimit) {
  return peek(bytes_of(text), limit);
}

std::string show(const PeekResult& r) {
  std::string s(to_string(r.status));
  if (r.status == PeekStatus::malformed) s += std::string(" (") + std::string(describe(r.error)) + ")";
  if (!r.name.view().empty()) s += " name=" + r.name.str();
  return s;
}

bool same(const PeekResult& a, const PeekResult& b) {
  return a.status == b.status && a.error == b.error && a.name.view() == b.name.view();
}

// The full input decides `want`; every proper prefix says need_more (never a
// different decision, never malformed on mere truncation); and bytes added
// after it change nothing.
void expect_decides_at_end(const Bytes& input, const PeekResult& want, std::size_t limit = kLimit) {
  const PeekResult full = peek(input, limit);
  EXPECT_TRUE(same(full, want)) << "got " << show(full) << ", want " << show(want);
  for (std::size_t n = 0; n < input.size(); ++n) {
    const PeekResult r = peek_name(std::span(input).first(n), limit);
    if (r.status != PeekStatus::need_more) {
      ADD_FAILURE() << "prefix of " << n << " of " << input.size() << " bytes decided: " << show(r);
      return;
    }
  }
  const PeekResult more = peek(concat(input, bytes_of("\x17\x03\x03 trailing junk\r\n\r\n")), limit);
  EXPECT_TRUE(same(more, full)) << "with trailing bytes: " << show(more);
}

PeekResult result(PeekStatus s, std::string_view name = "") {
  PeekResult r;
  r.status = s;
  if (!name.empty()) r.name = *policy::CanonicalName::from(name);
  return r;
}
PeekResult sni(std::string_view name) {
  return result(PeekStatus::tls_sni, name);
}
PeekResult host(std::string_view name) {
  return result(PeekStatus::http_host, name);
}
PeekResult fault(PeekError e) {
  PeekResult r;
  r.status = PeekStatus::malformed;
  r.error = e;
  return r;
}

#define EXPECT_PEEK(input, want) EXPECT_TRUE(same(peek(input), want)) << show(peek(input))

// ---- building ClientHellos ----------------------------------------------------

void put8(Bytes& b, std::size_t v) {
  b.push_back(static_cast<std::uint8_t>(v));
}
void put16(Bytes& b, std::size_t v) {
  put8(b, v >> 8);
  put8(b, v);
}
void put24(Bytes& b, std::size_t v) {
  put8(b, v >> 16);
  put16(b, v);
}
void put_text(Bytes& b, std::string_view s) {
  b.insert(b.end(), s.begin(), s.end());
}

struct Extension {
  std::uint16_t type;
  Bytes data;
};

constexpr std::uint16_t kServerName = 0;
constexpr std::uint16_t kPadding = 0x0015;
constexpr std::uint16_t kSupportedVersions = 0x002b;
constexpr std::uint16_t kEch = 0xfe0d;
constexpr std::uint16_t kEsni = 0xffce;

// A server_name extension body with the given (name_type, name) entries.
Bytes server_name_list(std::initializer_list<std::pair<std::uint8_t, std::string_view>> entries) {
  Bytes list;
  for (const auto& [type, name] : entries) {
    put8(list, type);
    put16(list, name.size());
    put_text(list, name);
  }
  Bytes data;
  put16(data, list.size());
  return concat(data, list);
}
Extension sni_ext(std::string_view name) {
  return {kServerName, server_name_list({{0, name}})};
}
// An outer ECH extension as a GREASE-ing client sends it (RFC 9849 section
// 5): type outer, HPKE suite, config id, enc, payload.
Extension ech_ext() {
  Bytes d;
  put8(d, 0);        // outer
  put16(d, 0x0001);  // HKDF-SHA256
  put16(d, 0x0001);  // AES-128-GCM
  put8(d, 0x2a);     // config_id
  put16(d, 32);      // enc
  d.insert(d.end(), 32, 0x11);
  put16(d, 144);  // payload
  d.insert(d.end(), 144, 0x22);
  return {kEch, d};
}
Extension padding_ext(std::size_t n) {
  return {kPadding, Bytes(n, 0)};
}
Extension tls13_ext() {
  return {kSupportedVersions, {0x04, 0x03, 0x04, 0x03, 0x03}};
}

struct HelloShape {
  std::uint8_t handshake_type = 1;
  std::uint16_t version = 0x0303;
  std::size_t session_id = 32;
  std::size_t suites_bytes = 6;
  std::size_t compression_methods = 1;
  bool extensions_block = true;
};

// A whole ClientHello handshake message, header included.
Bytes hello_message(const std::vector<Extension>& extensions, const HelloShape& shape = {}) {
  Bytes body;
  put16(body, shape.version);
  body.insert(body.end(), 32, 0xab);  // random
  put8(body, shape.session_id);
  body.insert(body.end(), shape.session_id, 0xcd);
  put16(body, shape.suites_bytes);
  for (std::size_t i = 0; i < shape.suites_bytes; ++i) put8(body, i % 2 == 0 ? 0x13 : 1 + i / 2);
  put8(body, shape.compression_methods);
  body.insert(body.end(), shape.compression_methods, 0);
  if (shape.extensions_block) {
    Bytes block;
    for (const auto& e : extensions) {
      put16(block, e.type);
      put16(block, e.data.size());
      block.insert(block.end(), e.data.begin(), e.data.end());
    }
    put16(body, block.size());
    body = concat(body, block);
  }
  Bytes message;
  put8(message, shape.handshake_type);
  put24(message, body.size());
  return concat(message, body);
}

// Wraps a handshake message in TLS records of at most `fragment` bytes each.
Bytes in_records(const Bytes& message, std::size_t fragment = 16384, std::uint16_t version = 0x0301) {
  Bytes out;
  for (std::size_t at = 0; at < message.size(); at += fragment) {
    const std::size_t n = std::min(fragment, message.size() - at);
    put8(out, 22);
    put16(out, version);
    put16(out, n);
    out.insert(out.end(), message.begin() + static_cast<std::ptrdiff_t>(at),
               message.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  return out;
}
// Two records, the first holding message[0, cut).
Bytes split_records(const Bytes& message, std::size_t cut) {
  const Bytes first(message.begin(), message.begin() + static_cast<std::ptrdiff_t>(cut));
  const Bytes second(message.begin() + static_cast<std::ptrdiff_t>(cut), message.end());
  return concat(in_records(first), in_records(second));
}

Bytes hello(const std::vector<Extension>& extensions, const HelloShape& shape = {}) {
  return in_records(hello_message(extensions, shape));
}

// The handshake message inside a captured single-record hello.
template <std::size_t N>
Bytes message_of(const std::uint8_t (&captured)[N]) {
  return Bytes(captured + 5, captured + N);
}

// ---- TLS: real clients -----------------------------------------------------

TEST(NamePeekTls, PythonTls13HelloWithManyExtensions) {
  expect_decides_at_end(bytes_of(kPythonTls13Hello), sni("api.github.com"));
}

TEST(NamePeekTls, PythonTls12HelloNameIsFolded) {
  expect_decides_at_end(bytes_of(kPythonTls12Hello), sni("example.com"));
}

TEST(NamePeekTls, OpensslSClientHello) {
  expect_decides_at_end(bytes_of(kOpensslHello), sni("www.example.org"));
}

TEST(NamePeekTls, RealHelloSplitAcrossTwoRecordsAtEveryOffset) {
  const Bytes message = message_of(kPythonTls13Hello);
  for (std::size_t cut = 1; cut < message.size(); ++cut) {
    const Bytes input = split_records(message, cut);
    const PeekResult r = peek(input);
    EXPECT_TRUE(same(r, sni("api.github.com"))) << "cut at " << cut << ": " << show(r);
  }
  // Every prefix of a split with the handshake header itself cut in two.
  expect_decides_at_end(split_records(message, 2), sni("api.github.com"));
  expect_decides_at_end(split_records(message, 300), sni("api.github.com"));
}

TEST(NamePeekTls, RealHelloInOneByteRecords) {
  const Bytes input = in_records(message_of(kOpensslHello), 1);
  ASSERT_EQ(input.size(), 6 * message_of(kOpensslHello).size());
  expect_decides_at_end(input, sni("www.example.org"), kMaxPeekLimit);
  // The message alone fits 1024 bytes; with a record header per byte it does not.
  EXPECT_EQ(peek(input, 1024).status, PeekStatus::too_large);
}

TEST(NamePeekTls, RecordVersionsTls10ToTls13) {
  const Bytes message = hello_message({sni_ext("a.example")});
  for (std::uint16_t v = 0x0301; v <= 0x0304; ++v) {
    EXPECT_PEEK(in_records(message, 16384, v), sni("a.example")) << v;
  }
  EXPECT_PEEK(in_records(message, 16384, 0x0300), fault(PeekError::tls_record_version));
  EXPECT_PEEK(in_records(message, 16384, 0x0305), fault(PeekError::tls_record_version));
}

// ---- TLS: built hellos -------------------------------------------------------

TEST(NamePeekTls, Tls13HelloWithExtensionsAroundSni) {
  const Bytes input =
      hello({tls13_ext(), {0x000a, {0x00, 0x02, 0x00, 0x1d}}, sni_ext("Pypi.ORG."), padding_ext(100)});
  expect_decides_at_end(input, sni("pypi.org"));
}

TEST(NamePeekTls, GreaseExtensionsAreFine) {
  expect_decides_at_end(hello({{0x0a0a, {}}, sni_ext("x.example"), {0x1a1a, {0}}}), sni("x.example"));
}

TEST(NamePeekTls, NoServerName) {
  expect_decides_at_end(hello({tls13_ext()}), result(PeekStatus::tls_without_sni));
  expect_decides_at_end(hello({}), result(PeekStatus::tls_without_sni));
  HelloShape no_block;
  no_block.extensions_block = false;  // TLS 1.0 .. 1.2 may leave the block out
  expect_decides_at_end(hello({}, no_block), result(PeekStatus::tls_without_sni));
}

TEST(NamePeekTls, ServerNameMustBeExactlyOneHostName) {
  expect_decides_at_end(hello({{kServerName, server_name_list({{0, "a.example"}, {0, "b.example"}})}}),
                        fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({{kServerName, server_name_list({{0, "a.example"}, {1, "b"}})}}),
              fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({{kServerName, server_name_list({{1, "a.example"}})}}), fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({{kServerName, server_name_list({{0, ""}})}}), fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({{kServerName, server_name_list({})}}), fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({{kServerName, {}}}), fault(PeekError::tls_sni_syntax));  // a server's empty echo
  Bytes long_list = server_name_list({{0, "a.example"}});
  long_list[1] += 1;  // the list claims a byte more than the extension holds
  EXPECT_PEEK(hello({{kServerName, long_list}}), fault(PeekError::tls_sni_syntax));
  Bytes long_name = server_name_list({{0, "a.example"}});
  long_name[4] += 1;  // the name runs past the list
  EXPECT_PEEK(hello({{kServerName, long_name}}), fault(PeekError::tls_sni_syntax));
}

TEST(NamePeekTls, DuplicateExtensions) {
  expect_decides_at_end(hello({sni_ext("a.example"), tls13_ext(), sni_ext("a.example")}),
                        fault(PeekError::tls_duplicate_extension));
  EXPECT_PEEK(hello({sni_ext("a.example"), tls13_ext(), tls13_ext()}),
              fault(PeekError::tls_duplicate_extension));
  EXPECT_PEEK(hello({{0xffff, {}}, {0xffff, {}}}), fault(PeekError::tls_duplicate_extension));
}

TEST(NamePeekTls, NamesWithoutCanonicalForm) {
  for (std::string_view bad : {"ex\xc3\xa4mple.com", "a b.example", "a..example", ".example", "*.example",
                               "a/b.example", "a.example..", "[::1]", "::1", "a.example:443"}) {
    EXPECT_PEEK(hello({sni_ext(bad)}), fault(PeekError::tls_sni_name)) << bad;
  }
  EXPECT_PEEK(hello({sni_ext(std::string(64, 'a') + ".example")}), fault(PeekError::tls_sni_name));
  EXPECT_PEEK(hello({sni_ext(std::string(250, 'a') + ".com")}), fault(PeekError::tls_sni_name));
}

TEST(NamePeekTls, IpLiteralsAreRefused) {
  for (std::string_view ip :
       {"1.2.3.4", "127.1", "2130706433", "0x7f.1", "0x7F.0.0.1", "a.example.0x", "a.123"}) {
    EXPECT_PEEK(hello({sni_ext(ip)}), fault(PeekError::tls_sni_ip_literal)) << ip;
  }
  // A numeric label that is not the last one is an ordinary name.
  EXPECT_PEEK(hello({sni_ext("123.example")}), sni("123.example"));
  EXPECT_PEEK(hello({sni_ext("1.2.3.4.example")}), sni("1.2.3.4.example"));
  EXPECT_PEEK(hello({sni_ext("a.0xg")}), sni("a.0xg"));
}

TEST(NamePeekTls, EncryptedClientHello) {
  expect_decides_at_end(hello({sni_ext("public.example"), tls13_ext(), ech_ext()}),
                        result(PeekStatus::tls_ech, "public.example"));
  expect_decides_at_end(hello({ech_ext(), tls13_ext()}), result(PeekStatus::tls_ech));
  EXPECT_PEEK(hello({sni_ext("public.example"), {kEsni, {1, 2, 3}}}),
              result(PeekStatus::tls_ech, "public.example"));
  // A bad server_name is malformed, ECH or not.
  EXPECT_PEEK(hello({ech_ext(), {kServerName, server_name_list({{0, "a.example"}, {0, "b.example"}})}}),
              fault(PeekError::tls_sni_syntax));
  EXPECT_PEEK(hello({ech_ext(), sni_ext("10.0.0.1")}), fault(PeekError::tls_sni_ip_literal));
  EXPECT_PEEK(hello({ech_ext(), ech_ext(), sni_ext("a.example")}), fault(PeekError::tls_duplicate_extension));
}

// Issue 15: a hello under a pre-final ECH code point (0xfe08..0xfe0c, 0xff02)
// was admitted on its outer SNI. Every code point of the table is refused,
// with the ECH payload of that draft or with anything at all in it.
TEST(NamePeekTls, EveryDeployedEncryptedHelloCodePointIsEch) {
  for (const auto& e : kEncryptedHelloExtensions) {
    Extension ext = ech_ext();
    ext.type = e.type;
    EXPECT_PEEK(hello({sni_ext("public.example"), tls13_ext(), ext}),
                result(PeekStatus::tls_ech, "public.example"))
        << std::hex << e.type << " " << e.source;
    EXPECT_PEEK(hello({{e.type, {}}}), result(PeekStatus::tls_ech)) << std::hex << e.type;
    EXPECT_FALSE(e.source.empty());
  }
  for (std::uint16_t type : {0xfe0d, 0xfe0c, 0xfe0b, 0xfe0a, 0xfe09, 0xfe08, 0xff02, 0xffce}) {
    EXPECT_PEEK(hello({{type, {7}}, sni_ext("public.example")}),
                result(PeekStatus::tls_ech, "public.example"))
        << std::hex << type;
  }
  // Their neighbours, and the inner-only markers, are ordinary extensions.
  for (std::uint16_t type : {0xfe07, 0xfe0e, 0xff01, 0xff03, 0xff04, 0xffcd, 0xffcf, 0xfd00, 0xda09}) {
    EXPECT_PEEK(hello({{type, {7}}, sni_ext("public.example")}), sni("public.example")) << std::hex << type;
  }
}

TEST(NamePeekTls, HelloLargerThanTheLimitIsTooLargeAtOnce) {
  // message = 4 + body; flow = 5 + message. Make the flow exactly kLimit.
  const Bytes base = hello_message({sni_ext("big.example"), padding_ext(0)});
  const Bytes fits =
      in_records(hello_message({sni_ext("big.example"), padding_ext(kLimit - 5 - base.size())}));
  ASSERT_EQ(fits.size(), kLimit);
  expect_decides_at_end(fits, sni("big.example"));

  const Bytes over =
      in_records(hello_message({sni_ext("big.example"), padding_ext(kLimit - 4 - base.size())}));
  ASSERT_EQ(over.size(), kLimit + 1);
  // Decided as soon as the handshake header says so: 5 + 4 bytes in.
  EXPECT_EQ(peek_name(std::span(over).first(8), kLimit).status, PeekStatus::need_more);
  EXPECT_EQ(peek_name(std::span(over).first(9), kLimit).status, PeekStatus::too_large);
  EXPECT_EQ(peek(over).status, PeekStatus::too_large);

  // A 20 KB hello (post-quantum key shares, many PSKs) over two records.
  const Bytes huge = in_records(hello_message({sni_ext("big.example"), padding_ext(20000)}));
  EXPECT_EQ(peek(huge).status, PeekStatus::too_large);
  expect_decides_at_end(huge, sni("big.example"), kMaxPeekLimit);
}

TEST(NamePeekTls, RecordHeadersCountTowardsTheLimit) {
  // The message alone would fit, but split into small records it does not:
  // undecided until `limit` bytes are in, then too_large.
  const Bytes base = hello_message({sni_ext("a.example"), padding_ext(0)});
  const Bytes message = hello_message({sni_ext("a.example"), padding_ext(kLimit - 5 - base.size())});
  const Bytes input = in_records(message, 512);
  ASSERT_GT(input.size(), kLimit);
  EXPECT_EQ(peek_name(std::span(input).first(kLimit - 1), kLimit).status, PeekStatus::need_more);
  EXPECT_EQ(peek_name(std::span(input).first(kLimit), kLimit).status, PeekStatus::too_large);
  EXPECT_EQ(peek(input).status, PeekStatus::too_large);
}

TEST(NamePeekTls, LimitAboveTheMaximumIsClamped) {
  const Bytes input = in_records(hello_message({sni_ext("a.example"), padding_ext(70000)}));
  EXPECT_EQ(peek(input, 1U << 20).status, PeekStatus::too_large);
}

TEST(NamePeekTls, GarbageAfterTheHandshakeByte) {
  EXPECT_PEEK(Bytes({0x16}), result(PeekStatus::need_more));
  EXPECT_PEEK(Bytes({0x16, 0x03}), result(PeekStatus::need_more));
  EXPECT_PEEK(Bytes({0x16, 0x00, 0x00}), fault(PeekError::tls_record_version));
  EXPECT_PEEK(Bytes({0x16, 'G', 'E', 'T', ' '}), fault(PeekError::tls_record_version));
  EXPECT_PEEK(Bytes({0x16, 0x03, 0x01, 0x00, 0x00}), fault(PeekError::tls_record_length));
  EXPECT_PEEK(Bytes({0x16, 0x03, 0x01, 0x40, 0x01}), fault(PeekError::tls_record_length));
  EXPECT_PEEK(Bytes({0x16, 0x03, 0x01, 0x40, 0x00}), result(PeekStatus::need_more));
  EXPECT_PEEK(Bytes({0x16, 0x03, 0x01, 0x00, 0x10, 0x02}), fault(PeekError::tls_not_client_hello));
  // A ServerHello-shaped message, and a second record that is not a handshake.
  HelloShape server_hello;
  server_hello.handshake_type = 2;
  EXPECT_PEEK(hello({}, server_hello), fault(PeekError::tls_not_client_hello));
  const Bytes message = hello_message({sni_ext("a.example")});
  Bytes bad_second = split_records(message, 10);
  bad_second[5 + 10] = 23;  // application data
  EXPECT_PEEK(bad_second, fault(PeekError::tls_record_type));
  Bytes bad_version = split_records(message, 10);
  bad_version[5 + 10 + 1] = 0x02;
  EXPECT_PEEK(bad_version, fault(PeekError::tls_record_version));
  // A handshake header split over records, whose type is wrong.
  Bytes split_type = split_records(message, 1);
  split_type[5] = 4;
  EXPECT_PEEK(split_type, fault(PeekError::tls_not_client_hello));
}

TEST(NamePeekTls, ClientHelloFieldsOutOfRange) {
  HelloShape s;
  s.version = 0x0300;  // SSL 3.0
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_version));
  s = {};
  s.version = 0x7f1c;
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_version));
  s = {};
  s.session_id = 33;
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_syntax));
  s = {};
  s.suites_bytes = 5;
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_syntax));
  s = {};
  s.suites_bytes = 0;
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_syntax));
  s = {};
  s.compression_methods = 0;
  EXPECT_PEEK(hello({sni_ext("a.example")}, s), fault(PeekError::tls_hello_syntax));

  const Bytes good = hello_message({sni_ext("a.example")});
  // The extensions block one byte longer, then one shorter, than the rest.
  const std::size_t block_at = 4 + 2 + 32 + 1 + 32 + 2 + 6 + 1 + 1;
  Bytes longer = good;
  longer[block_at + 1] += 1;
  EXPECT_PEEK(in_records(longer), fault(PeekError::tls_hello_syntax));
  Bytes shorter = good;
  shorter[block_at + 1] -= 1;
  EXPECT_PEEK(in_records(shorter), fault(PeekError::tls_hello_syntax));
  // An extension whose length runs past the block.
  Bytes overrun = good;
  overrun[block_at + 2 + 3] += 1;
  EXPECT_PEEK(in_records(overrun), fault(PeekError::tls_hello_syntax));
  // A message too short to hold the fixed fields.
  EXPECT_PEEK(in_records(Bytes({1, 0, 0, 3, 3, 3, 0})), fault(PeekError::tls_hello_syntax));
  EXPECT_PEEK(in_records(Bytes({1, 0, 0, 0})), fault(PeekError::tls_hello_syntax));
}

TEST(NamePeekTls, EveryBuiltHelloNeedsMoreUntilComplete) {
  const std::vector<Bytes> inputs = {
      hello({sni_ext("a.example")}),
      hello({tls13_ext(), sni_ext("b.example"), ech_ext()}),
      split_records(hello_message({sni_ext("c.example"), padding_ext(40)}), 3),
      in_records(hello_message({sni_ext("d.example"), padding_ext(40)}), 17),
  };
  for (const Bytes& input : inputs) {
    const PeekResult full = peek(input);
    ASSERT_TRUE(decided(full.status));
    expect_decides_at_end(input, full);
  }
}

TEST(NamePeekTls, SslV2HelloIsNoName) {
  // An SSLv2-compatible CLIENT-HELLO: a two-byte header with the top bit set.
  EXPECT_PEEK(Bytes({0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15}), result(PeekStatus::no_name));
}

// ---- HTTP --------------------------------------------------------------------

TEST(NamePeekHttp, GetWithHost) {
  expect_decides_at_end(bytes_of("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), host("example.com"));
  expect_decides_at_end(bytes_of("POST /api/v1?q=1 HTTP/1.0\r\nUser-Agent: x\r\nHost: Api.Example.COM\r\n"
                                 "Content-Length: 3\r\n\r\n"),
                        host("api.example.com"));
}

TEST(NamePeekHttp, CurlRequest) {
  // What curl 7.88 sent for http://registry.npmjs.org:47919/left-pad.
  expect_decides_at_end(bytes_of("GET /left-pad HTTP/1.1\r\nHost: registry.npmjs.org:47919\r\n"
                                 "User-Agent: curl/7.88.1\r\nAccept: application/json\r\n\r\n"),
                        host("registry.npmjs.org"));
}

TEST(NamePeekHttp, HostWithPort) {
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: example.com:80\r\n\r\n", host("example.com"));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: example.com:65535\r\n\r\n", host("example.com"));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: example.com:00080\r\n\r\n", host("example.com"));
  for (std::string_view bad : {"example.com:", "example.com:0", "example.com:65536", "example.com:123456",
                               "example.com:8o", "example.com:80:80", "example.com: 80", ":80"}) {
    EXPECT_PEEK("GET / HTTP/1.1\r\nHost: " + std::string(bad) + "\r\n\r\n", fault(PeekError::http_host_value))
        << bad;
  }
}

TEST(NamePeekHttp, HostHeaderNameIsCaseInsensitive) {
  for (std::string_view name : {"host", "HOST", "hOsT"}) {
    EXPECT_PEEK("GET / HTTP/1.1\r\n" + std::string(name) + ": Example.com\r\n\r\n", host("example.com"))
        << name;
  }
  // Not Host: a longer or shorter name.
  EXPECT_PEEK("GET / HTTP/1.1\r\nHosts: a.example\r\nX-Host: b.example\r\nHos: c\r\n\r\n",
              fault(PeekError::http_missing_host));
}

TEST(NamePeekHttp, HostValueWhitespaceIsTrimmed) {
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost:example.com\r\n\r\n", host("example.com"));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: \t example.com \t\r\n\r\n", host("example.com"));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n", fault(PeekError::http_host_value));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: \r\n\r\n", fault(PeekError::http_host_value));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost:\r\n\r\n", fault(PeekError::http_host_value));
}

TEST(NamePeekHttp, HostValuesWithoutCanonicalForm) {
  for (std::string_view bad : {"user@example.com", "ex%61mple.com", "example.com/", "ex\xc3\xa4mple.com",
                               "a..example", "*.example.com"}) {
    EXPECT_PEEK("GET / HTTP/1.1\r\nHost: " + std::string(bad) + "\r\n\r\n", fault(PeekError::http_host_value))
        << bad;
  }
}

TEST(NamePeekHttp, HostIpLiterals) {
  for (std::string_view ip : {"10.0.0.1", "10.0.0.1:80", "[::1]", "[::1]:8080", "[fe80::1%25eth0]", "127.1",
                              "0x7f000001", "169.254.169.254"}) {
    EXPECT_PEEK("GET / HTTP/1.1\r\nHost: " + std::string(ip) + "\r\n\r\n",
                fault(PeekError::http_host_ip_literal))
        << ip;
  }
}

TEST(NamePeekHttp, MissingHost) {
  expect_decides_at_end(bytes_of("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
                        fault(PeekError::http_missing_host));
  EXPECT_PEEK("GET / HTTP/1.0\r\n\r\n", fault(PeekError::http_missing_host));
}

TEST(NamePeekHttp, TwoHosts) {
  expect_decides_at_end(bytes_of("GET / HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n"),
                        fault(PeekError::http_duplicate_host));
  // Decided at the second Host, even before the header section ends.
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nHOST: a.example\r\n",
              fault(PeekError::http_duplicate_host));
}

TEST(NamePeekHttp, ObsFold) {
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\r\nX-A: b\r\n c\r\n\r\n", fault(PeekError::http_obs_fold));
  // The Host value is read at the end of the head, so the fold is found first.
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost:\r\n\ta.example\r\n\r\n", fault(PeekError::http_obs_fold));
  // Whitespace before the first header line (RFC 9112 section 2.2).
  EXPECT_PEEK("GET / HTTP/1.1\r\n Host: a.example\r\n\r\n", fault(PeekError::http_obs_fold));
}

TEST(NamePeekHttp, BareLfAndLoneCr) {
  EXPECT_PEEK("GET / HTTP/1.1\nHost: a.example\n\n", fault(PeekError::http_line_ending));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\n\r\n", fault(PeekError::http_line_ending));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\r\n\n", fault(PeekError::http_line_ending));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", fault(PeekError::http_line_ending));
  // The bare LF is refused as soon as it arrives, before any CRLF.
  EXPECT_PEEK("GET / HTTP/1.1\n", fault(PeekError::http_line_ending));
  // A CR at the very end may still be followed by its LF.
  EXPECT_PEEK("GET / HTTP/1.1\r", result(PeekStatus::need_more));
}

TEST(NamePeekHttp, ControlBytes) {
  using namespace std::string_literals;
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\r\nX: a\0b\r\n\r\n"s, fault(PeekError::http_control_byte));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost: a.example\x7f\r\n\r\n", fault(PeekError::http_control_byte));
  EXPECT_PEEK("GET /\x1b HTTP/1.1\r\n", fault(PeekError::http_control_byte));
  // HTAB and obs-text are allowed in values.
  EXPECT_PEEK("GET / HTTP/1.1\r\nX:\ta\t\xff\r\nHost: a.example\r\n\r\n", host("a.example"));
}

TEST(NamePeekHttp, ProxyRequests) {
  expect_decides_at_end(bytes_of("GET http://allowed.example/ HTTP/1.1\r\n"),
                        fault(PeekError::http_request_target));
  EXPECT_PEEK("GET http://evil.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
              fault(PeekError::http_request_target));
  EXPECT_PEEK("GET evil.example:80 HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
              fault(PeekError::http_request_target));
  expect_decides_at_end(bytes_of("CONNECT evil.example:443 HTTP/1.1\r\n"), fault(PeekError::http_connect));
  EXPECT_PEEK("CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n",
              fault(PeekError::http_connect));
}

TEST(NamePeekHttp, AsteriskFormOnlyForOptions) {
  EXPECT_PEEK("OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", host("a.example"));
  EXPECT_PEEK("GET * HTTP/1.1\r\nHost: a.example\r\n\r\n", fault(PeekError::http_request_target));
  EXPECT_PEEK("M-SEARCH * HTTP/1.1\r\nHost: a.example\r\n\r\n", fault(PeekError::http_request_target));
}

TEST(NamePeekHttp, RequestLineShape) {
  EXPECT_PEEK("GET  / HTTP/1.1\r\n", fault(PeekError::http_request_line));
  EXPECT_PEEK("GET /\r\n", fault(PeekError::http_request_line));            // HTTP/0.9
  EXPECT_PEEK("GET / HTTP/1.1 \r\n", fault(PeekError::http_request_line));  // a third space
  EXPECT_PEEK("GET / HTTP/2.0\r\n", fault(PeekError::http_version));
  EXPECT_PEEK("GET / http/1.1\r\n", fault(PeekError::http_request_line));  // not "HTTP/"
  EXPECT_PEEK("GET / HTTP/1.2\r\n", fault(PeekError::http_version));       // only 1.0 and 1.1 exist
  EXPECT_PEEK("GET / HTTP/1.\r\n", fault(PeekError::http_version));
  EXPECT_PEEK("GET / HTTP/1.10\r\n", fault(PeekError::http_version));
  EXPECT_PEEK("GET /\t HTTP/1.1\r\n", fault(PeekError::http_request_target));
  EXPECT_PEEK("GET /\xc3\xa4 HTTP/1.1\r\n", fault(PeekError::http_request_target));
  EXPECT_PEEK("VERSION-CONTROL /a HTTP/1.1\r\nHost: a.example\r\n\r\n", host("a.example"));
}

// The shared reader's framing rules hold for the first request too: what
// the request follower could not follow is refused before anything leaves.
TEST(NamePeekHttp, BodyFramingIsStrict) {
  EXPECT_PEEK("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\n", host("a.example"));
  EXPECT_PEEK("POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n", host("a.example"));
  for (const char* bad : {
           "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5, 5\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: +5\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
           "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: identity\r\n\r\n",
           "POST / HTTP/1.0\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n",
       }) {
    EXPECT_PEEK(bad, fault(PeekError::http_framing)) << bad;
  }
}

TEST(NamePeekHttp, AtMostKMaxRequestFields) {
  std::string head = "GET / HTTP/1.1\r\nHost: a.example\r\n";
  for (std::size_t i = 1; i < kMaxRequestFields; ++i) head += "X: 1\r\n";
  EXPECT_PEEK(head + "\r\n", host("a.example"));
  EXPECT_PEEK(head + "X: 1\r\n\r\n", fault(PeekError::http_too_many_fields));
}

TEST(NamePeekHttp, HeaderLineShape) {
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", fault(PeekError::http_header_syntax));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHost a.example\r\n\r\n", fault(PeekError::http_header_syntax));
  EXPECT_PEEK("GET / HTTP/1.1\r\n: a.example\r\n\r\n", fault(PeekError::http_header_syntax));
  EXPECT_PEEK("GET / HTTP/1.1\r\nHo(st: a.example\r\n\r\n", fault(PeekError::http_header_syntax));
  EXPECT_PEEK("GET / HTTP/1.1\r\nX-\xc3\xa4: 1\r\nHost: a.example\r\n\r\n",
              fault(PeekError::http_header_syntax));
}

TEST(NamePeekHttp, NeedMoreOnPartialLines) {
  const std::string request = "GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nAccept: */*\r\n\r\n";
  expect_decides_at_end(bytes_of(request), host("www.example.com"));
  // A body after the head is not read.
  EXPECT_PEEK(request + "\x01\x02 anything\n", host("www.example.com"));
}

TEST(NamePeekHttp, HeadLargerThanTheLimit) {
  std::string request = "GET / HTTP/1.1\r\nCookie: ";
  request += std::string(kLimit, 'c');
  request += "\r\nHost: a.example\r\n\r\n";
  const Bytes input = bytes_of(request);
  EXPECT_EQ(peek_name(std::span(input).first(kLimit - 1), kLimit).status, PeekStatus::need_more);
  EXPECT_EQ(peek_name(std::span(input).first(kLimit), kLimit).status, PeekStatus::too_large);
  EXPECT_EQ(peek(input).status, PeekStatus::too_large);
  EXPECT_PEEK(input, result(PeekStatus::too_large));
  // The same request decides with a larger limit; and a head of exactly
  // `limit` bytes decides too.
  EXPECT_TRUE(same(peek(input, input.size()), host("a.example")));
  EXPECT_EQ(peek(input, input.size() - 1).status, PeekStatus::too_large);
}

TEST(NamePeekHttp, Http2PrefaceIsNoName) {
  expect_decides_at_end(bytes_of("PRI * HTTP/2.0\r\n"), result(PeekStatus::no_name));
  EXPECT_PEEK("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", result(PeekStatus::no_name));
}

// ---- neither -------------------------------------------------------------------

TEST(NamePeekOther, NotAProtocolWeRead) {
  // "SSH-" could still be a method ("M-SEARCH"); the digit after it cannot.
  expect_decides_at_end(bytes_of("SSH-2"), result(PeekStatus::no_name));
  EXPECT_PEEK("SSH-2.0-OpenSSH_9.6\r\n", result(PeekStatus::no_name));
  EXPECT_PEEK("PING\r\n", result(PeekStatus::no_name));  // Redis inline command
  EXPECT_PEEK("get / HTTP/1.1\r\nHost: a.example\r\n\r\n", result(PeekStatus::no_name));
  EXPECT_PEEK(Bytes({0x00, 0x00, 0x00, 0x08, 0x04, 0xd2, 0x16, 0x2f}),
              result(PeekStatus::no_name));                                         // Postgres SSLRequest
  EXPECT_PEEK(Bytes({0x17, 0x03, 0x03, 0x00, 0x10}), result(PeekStatus::no_name));  // TLS application data
  EXPECT_PEEK(Bytes({0xff}), result(PeekStatus::no_name));
}

TEST(NamePeekOther, EmptyInputNeedsMore) {
  EXPECT_PEEK(Bytes{}, result(PeekStatus::need_more));
  EXPECT_PEEK("G", result(PeekStatus::need_more));
  EXPECT_PEEK("GET", result(PeekStatus::need_more));
  EXPECT_PEEK("GET ", result(PeekStatus::need_more));
}

TEST(NamePeekOther, TinyLimits) {
  EXPECT_EQ(peek(Bytes{}, 0).status, PeekStatus::too_large);
  EXPECT_EQ(peek("GET / HTTP/1.1\r\n", 0).status, PeekStatus::too_large);
  EXPECT_EQ(peek("GET / HTTP/1.1\r\n", 4).status, PeekStatus::too_large);
  EXPECT_EQ(peek("SSH-2.0", 5).status, PeekStatus::no_name);  // decided within the limit
  EXPECT_EQ(peek("SSH-2.0", 4).status, PeekStatus::too_large);
  EXPECT_EQ(peek(bytes_of(kOpensslHello), 9).status, PeekStatus::too_large);
}

TEST(NamePeekOther, HappyPathsDoNotAllocate) {
  const Bytes tls = bytes_of(kPythonTls13Hello);
  const Bytes tls_split = split_records(message_of(kPythonTls13Hello), 100);
  const Bytes tls_ech = hello({sni_ext("public.example"), ech_ext()});
  const Bytes http = bytes_of("GET / HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\n\r\n");
  const Bytes partial(http.begin(), http.begin() + 20);
  abox::testing::AllocationCounter counter;
  EXPECT_EQ(peek_name(tls, kLimit).status, PeekStatus::tls_sni);
  EXPECT_EQ(peek_name(tls_split, kLimit).status, PeekStatus::tls_sni);
  EXPECT_EQ(peek_name(tls_ech, kLimit).status, PeekStatus::tls_ech);
  EXPECT_EQ(peek_name(http, kLimit).status, PeekStatus::http_host);
  EXPECT_EQ(peek_name(partial, kLimit).status, PeekStatus::need_more);
  EXPECT_EQ(counter.count(), 0);
}

TEST(NamePeekOther, EveryStatusAndErrorHasText) {
  for (int s = 0; s <= static_cast<int>(PeekStatus::too_large); ++s) {
    EXPECT_NE(to_string(static_cast<PeekStatus>(s)), "invalid") << s;
  }
  for (int e = 0; e <= static_cast<int>(PeekError::http_host_ip_literal); ++e) {
    EXPECT_NE(describe(static_cast<PeekError>(e)), "the first bytes are invalid") << e;
  }
}

}  // namespace
}  // namespace abox::netstack
