// BrokerHandoff: the line abox-net writes first on each connection it hands
// to the broker, so the broker knows whose flow it is and where the guest
// meant to go. The guest's own bytes (its TLS ClientHello onward) follow the
// line unchanged; the broker answers nothing before TLS.
//
//   ABOX/1 <instance> <name> <port> <address>\n
//
// One space between fields, nothing else on the line, at most
// kMaxHandoffLine bytes including the newline. instance: [A-Za-z0-9._-],
// 1-64 bytes. name: a canonical DNS name (lower case letters, digits, '-',
// '_', '.'; no empty label, no trailing dot, at most 253 bytes). port:
// 1-65535 in decimal without leading zeros. address: the guest's original
// destination as text ([0-9a-f.:], 2-45 bytes; the broker parses it as an
// IP address). "/1" is the version: a reader refuses any other.
//
// The writer is abox-net (trusted), but the parser is strict anyway: the
// socket is the broker's only door and a local process could knock on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::base {

inline constexpr std::size_t kMaxHandoffLine = 512;
inline constexpr std::size_t kMaxHandoffInstance = 64;

struct BrokerHandoff {
  std::string instance;
  std::string name;
  std::uint16_t port = 0;
  std::string address;
};

enum class HandoffError : std::uint8_t {
  incomplete,  // no newline yet, and fewer than kMaxHandoffLine bytes: read more
  too_long,    // no newline within kMaxHandoffLine bytes
  bad_magic,   // does not start with "ABOX/"
  bad_version,
  bad_instance,
  bad_name,
  bad_port,
  bad_address,
  bad_syntax,  // wrong number of fields, stray bytes, a CR
};
std::string_view describe(HandoffError e);

struct ParsedHandoff {
  BrokerHandoff handoff;
  std::size_t consumed = 0;  // the line's length including '\n'; the guest's bytes start here
};

// Parses the line at the start of `bytes`. Never reads past the first
// newline or past kMaxHandoffLine bytes.
Result<ParsedHandoff, HandoffError> parse_handoff(std::span<const std::uint8_t> bytes);

// Whether `s` may name an instance in the line ([A-Za-z0-9._-], 1-64 bytes).
bool valid_handoff_instance(std::string_view s);

// The line for `h`, or an error if a field would not parse back (so the
// writer can never send what the reader refuses).
Result<std::string, HandoffError> encode_handoff(const BrokerHandoff& h);

}  // namespace abox::base
