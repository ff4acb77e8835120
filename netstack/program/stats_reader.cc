#include "netstack/program/stats_reader.h"

#include "base/byte_reader.h"

namespace abox::netstack {

namespace {

using Fields = std::vector<StatsField>;
using ParseResult = base::Result<Fields, std::string>;

ParseResult fail(const base::ByteReader& r, std::string_view what) {
  return base::Err{std::string(what) + " at byte " + std::to_string(r.position())};
}

void skip_space(base::ByteReader& r) {
  while (auto c = r.peek()) {
    if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') return;
    (void)r.skip(1);
  }
}

bool is_key_byte(std::uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

ParseResult parse_stats_json(std::span<const std::uint8_t> bytes) {
  base::ByteReader r(bytes);
  Fields fields;
  skip_space(r);
  if (r.u8() != std::optional<std::uint8_t>('{')) return fail(r, "expected '{'");
  skip_space(r);
  if (r.peek() == std::optional<std::uint8_t>('}')) {
    (void)r.skip(1);
  } else {
    for (;;) {
      if (fields.size() == kMaxStatsFields) return fail(r, "too many fields");
      if (r.u8() != std::optional<std::uint8_t>('"')) return fail(r, "expected a key");
      StatsField f;
      for (;;) {
        auto c = r.u8();
        if (!c) return fail(r, "unterminated key");
        if (*c == '"') break;
        if (!is_key_byte(*c)) return fail(r, "a key byte outside [A-Za-z0-9_]");
        if (f.name.size() == kMaxStatsKeyBytes) return fail(r, "key too long");
        f.name.push_back(static_cast<char>(*c));
      }
      if (f.name.empty()) return fail(r, "empty key");
      skip_space(r);
      if (r.u8() != std::optional<std::uint8_t>(':')) return fail(r, "expected ':'");
      skip_space(r);
      std::size_t digits = 0;
      for (auto c = r.peek(); c && *c >= '0' && *c <= '9'; c = r.peek()) {
        if (++digits > 20) return fail(r, "number longer than 20 digits");
        const std::uint64_t d = *c - '0';
        if (f.value > (UINT64_MAX - d) / 10) return fail(r, "number larger than 64 bits");
        f.value = f.value * 10 + d;
        (void)r.skip(1);
      }
      if (digits == 0) return fail(r, "expected an unsigned integer");
      fields.push_back(std::move(f));
      skip_space(r);
      auto sep = r.u8();
      if (sep == std::optional<std::uint8_t>('}')) break;
      if (sep != std::optional<std::uint8_t>(',')) return fail(r, "expected ',' or '}'");
      skip_space(r);
    }
  }
  skip_space(r);
  if (!r.empty()) return fail(r, "bytes after the object");
  return fields;
}

}  // namespace abox::netstack
