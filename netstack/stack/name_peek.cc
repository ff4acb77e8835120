// Name peek. How this works:
//
// peek_name() runs each time more of a held flow's first bytes arrive, on the
// whole prefix so far (bounded by `limit`, so each call is O(limit) and the
// caller keeps no parser state). It cuts the input to `limit` bytes, picks a
// protocol from the first byte, and walks the bytes front to back through a
// base::ByteReader. A check fails as soon as the bytes it needs are there;
// running out of bytes is need_more, and need_more with `limit` bytes in
// hand is too_large. That order is what makes the result monotone (see the
// header): a decision never depends on where the input ends.
//
// TLS: the record layer is read first. In the usual case the first record
// holds the whole ClientHello and it is parsed in place. Otherwise (a hello
// larger than one record, or a client that splits its records to dodge
// filters) the record payloads are copied, in order, into a stack buffer of
// kMaxPeekLimit bytes, enough because the payloads are a part of the input,
// which is at most that long. The hello is parsed only once all of it is
// there; the bytes after it are never read. Duplicate extensions are found
// with a 65536-bit set on the stack.
//
// HTTP: lines are scanned for CRLF, refusing a bare LF, a lone CR and
// control bytes as they come; the request line and then each header line is
// checked when its CRLF arrives, and Host is decided at the empty line, the
// only point where a second Host can no longer appear.
#include "netstack/stack/name_peek.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <iterator>
#include <optional>

#include "base/byte_reader.h"
#include "base/http1_request_head.h"
#include "base/http1_syntax.h"

namespace abox::netstack {

using base::ByteReader;
using policy::CanonicalName;
using Bytes = std::span<const std::uint8_t>;

namespace {

// TLS constants (RFC 8446 sections 4 and 5.1, RFC 6066 section 3).
constexpr std::uint8_t kContentHandshake = 22;
constexpr std::uint16_t kMinVersion = 0x0301;  // TLS 1.0
constexpr std::uint16_t kMaxVersion = 0x0304;  // TLS 1.3
constexpr std::size_t kRecordHeaderSize = 5;
constexpr std::size_t kMaxRecordLength = std::size_t{1} << 14;
constexpr std::uint8_t kClientHello = 1;
constexpr std::size_t kHandshakeHeaderSize = 4;
constexpr std::size_t kRandomSize = 32;
constexpr std::uint8_t kMaxSessionIdSize = 32;
constexpr std::uint16_t kExtServerName = 0;
constexpr std::uint8_t kNameTypeHostName = 0;

constexpr std::uint8_t kTlsFirstByte = kContentHandshake;

constexpr std::uint8_t kSP = ' ';
constexpr std::size_t kMaxPortDigits = 5;
constexpr std::uint32_t kMaxPort = 65535;

// ---- results ----------------------------------------------------------------

PeekResult with_status(PeekStatus s) {
  PeekResult r;
  r.status = s;
  return r;
}
PeekResult need_more() {
  return with_status(PeekStatus::need_more);
}
PeekResult malformed(PeekError e) {
  PeekResult r;
  r.status = PeekStatus::malformed;
  r.error = e;
  return r;
}
PeekResult named(PeekStatus s, const CanonicalName& name) {
  PeekResult r;
  r.status = s;
  r.name = name;
  return r;
}

// ---- small readers over untrusted bytes ----------------------------------

std::string_view as_text(Bytes b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

template <class Pred>
bool all_bytes(Bytes bytes, Pred pred) {
  ByteReader r(bytes);
  while (const auto c = r.u8()) {
    if (!pred(*c)) return false;
  }
  return true;
}

// The bytes before the first `delim`, leaving the cursor on it; nullopt (the
// cursor unmoved) if there is none.
std::optional<Bytes> take_until(ByteReader& r, std::uint8_t delim) {
  for (std::size_t i = 0;; ++i) {
    const auto c = r.peek(i);
    if (!c) return std::nullopt;
    if (*c == delim) return r.bytes(i);
  }
}

// WHATWG URL's "ends in a number": the last label is all digits, or "0x"
// and hex digits. Resolvers and URL parsers read such a host as an IPv4
// address ("127.1", "0x7f.1", "2130706433"), never as a name. `name` is
// canonical (lower case, no trailing dot).
bool ends_in_number(const CanonicalName& name) {
  const std::string_view text = name.view();
  const std::size_t dot = text.rfind('.');
  std::string_view last = dot == std::string_view::npos ? text : text.substr(dot + 1);
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (std::all_of(last.begin(), last.end(), is_digit)) return true;
  if (last.substr(0, 2) != "0x") return false;
  last.remove_prefix(2);
  return std::all_of(last.begin(), last.end(), [&](char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); });
}

// ---- TLS --------------------------------------------------------------------

// One bit per extension type, to refuse a type seen twice.
class ExtensionSet {
 public:
  // False if `type` was already in the set.
  bool insert(std::uint16_t type) {
    auto& word = words_[type / 64];
    const std::uint64_t bit = std::uint64_t{1} << (type % 64);
    if ((word & bit) != 0) return false;
    word |= bit;
    return true;
  }

 private:
  std::array<std::uint64_t, 65536 / 64> words_{};
};

bool is_encrypted_hello(std::uint16_t type) {
  return std::any_of(std::begin(kEncryptedHelloExtensions), std::end(kEncryptedHelloExtensions),
                     [&](const EncryptedHelloExtension& e) { return e.type == type; });
}

// server_name (RFC 6066 section 3): a list that must hold exactly one entry,
// a host_name, with a canonical, non-numeric name.
PeekError read_server_name(Bytes data, CanonicalName& out) {
  ByteReader r(data);
  const auto list_length = r.u16be();
  if (!list_length || *list_length != r.remaining() || *list_length == 0) return PeekError::tls_sni_syntax;
  const auto type = r.u8();
  if (!type || *type != kNameTypeHostName) return PeekError::tls_sni_syntax;
  const auto name_length = r.u16be();
  if (!name_length || *name_length == 0) return PeekError::tls_sni_syntax;
  const auto name = r.bytes(*name_length);
  if (!name || !r.empty()) return PeekError::tls_sni_syntax;  // short, or a second entry
  auto canonical = CanonicalName::from(as_text(*name));
  if (!canonical) return PeekError::tls_sni_name;
  if (ends_in_number(*canonical)) return PeekError::tls_sni_ip_literal;
  out = *canonical;
  return PeekError::none;
}

// A whole ClientHello handshake message, header included (RFC 8446 section
// 4.1.2; RFC 5246 section 7.4.1.2 for the optional extensions block).
PeekResult parse_client_hello(Bytes message) {
  ByteReader r(message);
  if (!r.skip(kHandshakeHeaderSize)) return malformed(PeekError::tls_hello_syntax);
  const auto version = r.u16be();
  if (!version) return malformed(PeekError::tls_hello_syntax);
  if (*version < kMinVersion || *version > kMaxVersion) return malformed(PeekError::tls_hello_version);
  if (!r.skip(kRandomSize)) return malformed(PeekError::tls_hello_syntax);
  const auto session_id_length = r.u8();
  if (!session_id_length || *session_id_length > kMaxSessionIdSize || !r.skip(*session_id_length)) {
    return malformed(PeekError::tls_hello_syntax);
  }
  const auto suites_length = r.u16be();
  if (!suites_length || *suites_length < 2 || *suites_length % 2 != 0 || !r.skip(*suites_length)) {
    return malformed(PeekError::tls_hello_syntax);
  }
  const auto compression_length = r.u8();
  if (!compression_length || *compression_length < 1 || !r.skip(*compression_length)) {
    return malformed(PeekError::tls_hello_syntax);
  }
  if (r.empty()) return with_status(PeekStatus::tls_without_sni);  // no extensions block

  const auto extensions_length = r.u16be();
  if (!extensions_length || *extensions_length != r.remaining())
    return malformed(PeekError::tls_hello_syntax);
  ExtensionSet seen;
  CanonicalName sni;
  bool has_sni = false;
  bool encrypted = false;
  while (!r.empty()) {
    const auto type = r.u16be();
    const auto length = r.u16be();
    if (!type || !length) return malformed(PeekError::tls_hello_syntax);
    const auto data = r.bytes(*length);
    if (!data) return malformed(PeekError::tls_hello_syntax);
    if (!seen.insert(*type)) return malformed(PeekError::tls_duplicate_extension);
    if (*type == kExtServerName) {
      const PeekError e = read_server_name(*data, sni);
      if (e != PeekError::none) return malformed(e);
      has_sni = true;
    } else if (is_encrypted_hello(*type)) {
      encrypted = true;
    }
  }
  if (encrypted) return has_sni ? named(PeekStatus::tls_ech, sni) : with_status(PeekStatus::tls_ech);
  if (has_sni) return named(PeekStatus::tls_sni, sni);
  return with_status(PeekStatus::tls_without_sni);
}

// Reads one record header: its payload length, or nullopt with `stop` set.
std::optional<std::size_t> read_record_header(ByteReader& r, PeekResult& stop) {
  stop = need_more();
  const auto type = r.u8();
  if (!type) return std::nullopt;
  if (*type != kContentHandshake) {
    stop = malformed(PeekError::tls_record_type);
    return std::nullopt;
  }
  const auto version = r.u16be();
  if (!version) return std::nullopt;
  if (*version < kMinVersion || *version > kMaxVersion) {
    stop = malformed(PeekError::tls_record_version);
    return std::nullopt;
  }
  const auto length = r.u16be();
  if (!length) return std::nullopt;
  if (*length == 0 || *length > kMaxRecordLength) {
    stop = malformed(PeekError::tls_record_length);
    return std::nullopt;
  }
  return *length;
}

// Reads the handshake header at the start of the gathered payload: the whole
// message's size once all four bytes are there, or nullopt with `stop` set.
// A message that cannot fit in `limit` bytes of flow (one record header at
// least, then the message) is too_large at once.
std::optional<std::size_t> read_handshake_header(Bytes payload, std::size_t limit, PeekResult& stop) {
  stop = need_more();
  ByteReader r(payload);
  const auto type = r.u8();
  if (!type) return std::nullopt;
  if (*type != kClientHello) {
    stop = malformed(PeekError::tls_not_client_hello);
    return std::nullopt;
  }
  const auto high = r.u8();
  const auto low = r.u16be();
  if (!high || !low) return std::nullopt;
  const std::size_t size = kHandshakeHeaderSize + ((std::size_t{*high} << 16) | *low);
  if (kRecordHeaderSize + size > limit) {
    stop = with_status(PeekStatus::too_large);
    return std::nullopt;
  }
  return size;
}

// The general case: the ClientHello (or its header) spans records. Gathers
// the payloads into a buffer, then parses. Reads `window` from the start
// again, so it decides exactly as the single-record path would have.
PeekResult peek_tls_records(Bytes window, std::size_t limit) {
  // Only the first `have` bytes are ever read; no need to clear the rest.
  std::array<std::uint8_t, kMaxPeekLimit> buffer;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::size_t have = 0;
  std::optional<std::size_t> message_size;
  ByteReader r(window);
  for (;;) {
    PeekResult stop;
    const auto length = read_record_header(r, stop);
    if (!length) return stop;
    const Bytes fragment = *r.bytes(std::min(*length, r.remaining()));
    // Fits: the payloads are a part of `window`, at most kMaxPeekLimit long.
    std::copy(fragment.begin(), fragment.end(), std::span(buffer).subspan(have).begin());
    have += fragment.size();
    const Bytes gathered = std::span(buffer).first(have);
    if (!message_size) {
      message_size = read_handshake_header(gathered, limit, stop);
      if (!message_size && stop.status != PeekStatus::need_more) return stop;
    }
    if (message_size && have >= *message_size) return parse_client_hello(gathered.first(*message_size));
    if (fragment.size() < *length) return need_more();  // the record itself is still arriving
  }
}

PeekResult peek_tls(Bytes window, std::size_t limit) {
  ByteReader r(window);
  PeekResult stop;
  const auto length = read_record_header(r, stop);
  if (!length) return stop;
  const Bytes fragment = *r.bytes(std::min(*length, r.remaining()));
  const auto message_size = read_handshake_header(fragment, limit, stop);
  if (!message_size) {
    const bool header_spans_records = stop.status == PeekStatus::need_more && fragment.size() == *length;
    return header_spans_records ? peek_tls_records(window, limit) : stop;
  }
  if (*message_size > *length) return peek_tls_records(window, limit);
  // The usual case: the first record holds the whole ClientHello.
  if (fragment.size() < *message_size) return need_more();
  return parse_client_hello(fragment.first(*message_size));
}

// ---- HTTP/1 -------------------------------------------------------------------

bool is_upper(std::uint8_t c) {
  return c >= 'A' && c <= 'Z';
}
bool is_digit(std::uint8_t c) {
  return c >= '0' && c <= '9';
}
// What may start a request on the wire: an upper-case method such as GET,
// M-SEARCH or VERSION-CONTROL, then a space.
bool is_method_byte(std::uint8_t c) {
  return is_upper(c) || c == '-' || c == '_';
}

PeekError from_http1(base::http1::Error e) {
  using base::http1::Error;
  switch (e) {
    case Error::line_ending:
      return PeekError::http_line_ending;
    case Error::control_byte:
      return PeekError::http_control_byte;
    case Error::version:
      return PeekError::http_version;
    case Error::connect_method:
      return PeekError::http_connect;
    case Error::absolute_form:
    case Error::authority_form:
    case Error::asterisk_form:
    case Error::target_syntax:
    case Error::path_dot_segment:
    case Error::path_encoded_separator:
      return PeekError::http_request_target;
    case Error::obs_fold:
      return PeekError::http_obs_fold;
    case Error::field_syntax:
      return PeekError::http_header_syntax;
    case Error::too_many_fields:
      return PeekError::http_too_many_fields;
    case Error::missing_host:
      return PeekError::http_missing_host;
    case Error::duplicate_host:
      return PeekError::http_duplicate_host;
    case Error::content_length_value:
    case Error::duplicate_content_length:
    case Error::transfer_encoding:
    case Error::length_and_chunked:
      return PeekError::http_framing;
    case Error::none:
    case Error::head_too_large:  // the caller's too_large, never passed here
    case Error::request_line:
    case Error::method:
    case Error::trace_method:
    case Error::body_too_large:
    case Error::chunk_size:
    case Error::chunk_extension:
    case Error::chunk_crlf:
    case Error::trailer:
    case Error::trailer_syntax:
    case Error::trailer_too_large:
      break;
  }
  return PeekError::http_request_line;
}

PeekResult peek_http(Bytes window, std::size_t limit) {
  ByteReader r(window);
  // The method decides whether this is HTTP at all: "SSH-2.0-..." is not.
  for (std::size_t i = 0;; ++i) {
    const auto c = r.peek(i);
    if (!c) return need_more();
    if (*c == kSP) break;
    if (!is_method_byte(*c)) return with_status(PeekStatus::no_name);
  }
  // The HTTP/2 preface starts like a request line, but it is not HTTP/1.
  const base::http1::Line first = base::http1::next_line(r);
  if (first.status == base::http1::LineStatus::line && base::http1::as_text(first.text) == "PRI * HTTP/2.0") {
    return with_status(PeekStatus::no_name);
  }
  base::http1::RequestHead head;
  const auto read = base::http1::read_request_head(window, http_request_rules(limit), head);
  if (!read) {
    if (read.error() == base::http1::Error::head_too_large) return with_status(PeekStatus::too_large);
    return malformed(from_http1(read.error()));
  }
  if (*read == base::http1::HeadStatus::need_more) return need_more();
  CanonicalName host;
  const PeekError e = read_http_host(head.host, host);
  if (e != PeekError::none) return malformed(e);
  return named(PeekStatus::http_host, host);
}

PeekResult classify(Bytes window, std::size_t limit) {
  ByteReader r(window);
  const auto first = r.peek();
  if (!first) return need_more();
  if (*first == kTlsFirstByte) return peek_tls(window, limit);
  if (is_upper(*first)) return peek_http(window, limit);
  return with_status(PeekStatus::no_name);
}

}  // namespace

base::http1::RequestRules http_request_rules(std::size_t limit) {
  base::http1::RequestRules rules;
  rules.max_head_bytes = std::min(limit, kMaxPeekLimit);
  rules.max_fields = kMaxRequestFields;
  rules.http_1_0 = true;
  rules.trace = true;
  rules.target = base::http1::TargetRules::visible;
  return rules;
}

PeekError read_http_host(std::string_view value, CanonicalName& out) {
  ByteReader r(base::as_bytes(value));
  if (r.peek() == std::uint8_t{'['}) return PeekError::http_host_ip_literal;
  auto host = take_until(r, ':');
  if (host) {
    static_cast<void>(r.skip(1));  // the ':' take_until stopped on
    const Bytes port = r.rest();
    if (port.empty() || port.size() > kMaxPortDigits || !all_bytes(port, is_digit)) {
      return PeekError::http_host_value;
    }
    const std::string_view digits = as_text(port);
    std::uint32_t number = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
    if (ec != std::errc{} || end != digits.data() + digits.size() || number == 0 || number > kMaxPort)
      return PeekError::http_host_value;
  } else {
    host = r.rest();
  }
  auto canonical = CanonicalName::from(as_text(*host));
  if (!canonical) return PeekError::http_host_value;
  if (ends_in_number(*canonical)) return PeekError::http_host_ip_literal;
  out = *canonical;
  return PeekError::none;
}

PeekResult peek_name(std::span<const std::uint8_t> first_bytes, std::size_t limit) {
  limit = std::min(limit, kMaxPeekLimit);
  ByteReader all(first_bytes);
  const Bytes window = *all.bytes(std::min(limit, all.size()));
  PeekResult result = classify(window, limit);
  if (result.status == PeekStatus::need_more && window.size() >= limit)
    return with_status(PeekStatus::too_large);
  return result;
}

std::string_view to_string(PeekStatus s) {
  switch (s) {
    case PeekStatus::need_more:
      return "need_more";
    case PeekStatus::tls_sni:
      return "tls_sni";
    case PeekStatus::tls_ech:
      return "tls_ech";
    case PeekStatus::tls_without_sni:
      return "tls_without_sni";
    case PeekStatus::http_host:
      return "http_host";
    case PeekStatus::no_name:
      return "no_name";
    case PeekStatus::malformed:
      return "malformed";
    case PeekStatus::too_large:
      return "too_large";
  }
  return "invalid";  // only through a cast from an out-of-range integer
}

std::string_view describe(PeekError e) {
  switch (e) {
    case PeekError::none:
      return "no error";
    case PeekError::tls_record_type:
      return "a record before the end of the ClientHello is not a handshake record";
    case PeekError::tls_record_version:
      return "a TLS record's version is not 0x0301..0x0304";
    case PeekError::tls_record_length:
      return "a TLS record is empty or longer than 16384 bytes";
    case PeekError::tls_not_client_hello:
      return "the first handshake message is not a ClientHello";
    case PeekError::tls_hello_version:
      return "the ClientHello's legacy_version is not 0x0301..0x0304";
    case PeekError::tls_hello_syntax:
      return "a ClientHello field is out of range or overruns the message";
    case PeekError::tls_duplicate_extension:
      return "a ClientHello extension type appears twice";
    case PeekError::tls_sni_syntax:
      return "server_name does not hold exactly one host_name";
    case PeekError::tls_sni_name:
      return "the SNI host_name has no canonical form";
    case PeekError::tls_sni_ip_literal:
      return "the SNI host_name is an IP address";
    case PeekError::http_request_line:
      return "the request line is not METHOD SP target SP version";
    case PeekError::http_line_ending:
      return "a line ends in a bare LF, or a CR is not followed by LF";
    case PeekError::http_control_byte:
      return "the request head holds a control byte";
    case PeekError::http_version:
      return "the HTTP version is not HTTP/1.x";
    case PeekError::http_connect:
      return "a CONNECT request";
    case PeekError::http_request_target:
      return "the request-target is not origin-form (a proxy request, or junk)";
    case PeekError::http_obs_fold:
      return "a header line starts with whitespace (obs-fold)";
    case PeekError::http_header_syntax:
      return "a header line is not token \":\" value";
    case PeekError::http_too_many_fields:
      return "the request has more header fields than abox-net reads";
    case PeekError::http_framing:
      return "the request's Content-Length or Transfer-Encoding is invalid, or it has both";
    case PeekError::http_missing_host:
      return "the request has no Host header";
    case PeekError::http_duplicate_host:
      return "the request has more than one Host header";
    case PeekError::http_host_value:
      return "the Host value is not a canonical name with an optional port";
    case PeekError::http_host_ip_literal:
      return "the Host is an IP address";
  }
  return "the first bytes are invalid";  // only through a cast from an out-of-range integer
}

}  // namespace abox::netstack
