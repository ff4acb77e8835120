// HTTP/1 syntax rules. The per-byte checks are compile-time tables, so the
// line scan costs one load per byte; lines and fields are views into the
// caller's bytes, never copied.
#include "base/http1_syntax.h"

#include <algorithm>
#include <array>
#include <limits>

#include "base/decimal.h"

namespace abox::base::http1 {

namespace {

constexpr std::uint8_t kCR = '\r';
constexpr std::uint8_t kLF = '\n';
constexpr std::uint64_t kMaxContentLength = std::numeric_limits<std::int64_t>::max();

constexpr std::string_view kTcharPunctuation = "!#$%&'*+-.^_`|~";  // RFC 9110 section 5.6.2
constexpr std::string_view kTargetPunctuation = "-._~!$&'()*+,;=:@/?";

constexpr bool is_alnum(unsigned c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

template <class Pred>
constexpr std::array<bool, 256> byte_table(Pred pred) {
  std::array<bool, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = pred(c);
  return t;
}

constexpr auto kTchar = byte_table([](unsigned c) {
  return is_alnum(c) || (c != 0 && kTcharPunctuation.find(static_cast<char>(c)) != std::string_view::npos);
});
constexpr auto kTargetChar = byte_table([](unsigned c) {
  return is_alnum(c) || (c != 0 && kTargetPunctuation.find(static_cast<char>(c)) != std::string_view::npos);
});
// Bytes next_line() must look at: CR, LF, and control bytes other than HTAB.
constexpr auto kLineSpecial = byte_table([](unsigned c) { return (c < 0x20 && c != '\t') || c == 0x7F; });

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

bool is_tchar(std::uint8_t c) {
  return kTchar[c];
}

bool is_control(std::uint8_t c) {
  return kLineSpecial[c];
}

bool is_target_char(char c) {
  return kTargetChar[static_cast<unsigned char>(c)];
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool is_token(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<std::uint8_t>(c)); });
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

bool lists_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    if (iequals(trim_ows(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

Line next_line(ByteReader& r) {
  Line out;
  // A view of what is left, indexed below its size only; the cursor moves
  // through the reader.
  const std::span<const std::uint8_t> rest = r.rest();
  for (std::size_t n = 0; n < rest.size(); ++n) {
    const std::uint8_t b = rest[n];
    if (!kLineSpecial[b]) continue;
    if (b == kCR) {
      if (n + 1 == rest.size()) return out;  // need_more
      if (rest[n + 1] != kLF) {
        out.status = LineStatus::error;
        out.error = Error::line_ending;
        return out;
      }
      out.status = LineStatus::line;
      out.text = *r.bytes(n);  // n + 2 <= remaining()
      (void)r.skip(2);
      return out;
    }
    out.status = LineStatus::error;
    out.error = b == kLF ? Error::line_ending : Error::control_byte;
    return out;
  }
  return out;  // need_more
}

Error parse_field(std::string_view line, HeaderField& out) {
  if (line.empty() || is_ows(line.front())) return Error::obs_fold;
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Error::field_syntax;
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) return Error::field_syntax;  // includes whitespace before the colon
  // Non-ASCII bytes are allowed only in values (obs-text); control bytes were
  // refused by next_line().
  out.name = name;
  out.value = trim_ows(line.substr(colon + 1));
  return Error::none;
}

Result<std::uint64_t, Error> parse_content_length(std::string_view value) {
  if (value.find(',') != std::string_view::npos) return Err{Error::duplicate_content_length};
  if (value.empty()) return Err{Error::content_length_value};
  auto n = parse_decimal_in<std::uint64_t>(value, 0, kMaxContentLength);
  if (!n) return Err{Error::content_length_value};
  return *n;
}

std::string_view to_string(Error e) {
  switch (e) {
    case Error::none:
      return "none";
    case Error::head_too_large:
      return "head_too_large";
    case Error::too_many_fields:
      return "too_many_fields";
    case Error::line_ending:
      return "line_ending";
    case Error::control_byte:
      return "control_byte";
    case Error::request_line:
      return "request_line";
    case Error::method:
      return "method";
    case Error::version:
      return "version";
    case Error::connect_method:
      return "connect_method";
    case Error::trace_method:
      return "trace_method";
    case Error::absolute_form:
      return "absolute_form";
    case Error::authority_form:
      return "authority_form";
    case Error::asterisk_form:
      return "asterisk_form";
    case Error::target_syntax:
      return "target_syntax";
    case Error::path_dot_segment:
      return "path_dot_segment";
    case Error::path_encoded_separator:
      return "path_encoded_separator";
    case Error::obs_fold:
      return "obs_fold";
    case Error::field_syntax:
      return "field_syntax";
    case Error::missing_host:
      return "missing_host";
    case Error::duplicate_host:
      return "duplicate_host";
    case Error::content_length_value:
      return "content_length_value";
    case Error::duplicate_content_length:
      return "duplicate_content_length";
    case Error::transfer_encoding:
      return "transfer_encoding";
    case Error::length_and_chunked:
      return "length_and_chunked";
    case Error::body_too_large:
      return "body_too_large";
    case Error::chunk_size:
      return "chunk_size";
    case Error::chunk_extension:
      return "chunk_extension";
    case Error::chunk_crlf:
      return "chunk_crlf";
    case Error::trailer:
      return "trailer";
    case Error::trailer_syntax:
      return "trailer_syntax";
    case Error::trailer_too_large:
      return "trailer_too_large";
  }
  return "unknown";
}

std::string_view describe(Error e) {
  switch (e) {
    case Error::none:
      return "no error";
    case Error::head_too_large:
      return "the request head is larger than the policy's http_head_bytes";
    case Error::too_many_fields:
      return "the request has too many header fields";
    case Error::line_ending:
      return "a bare LF, or a CR not followed by LF";
    case Error::control_byte:
      return "a control byte other than HTAB in the head";
    case Error::request_line:
      return "the request line is not METHOD SP target SP version";
    case Error::method:
      return "the method is not a token";
    case Error::version:
      return "the version is not HTTP/1.1";
    case Error::connect_method:
      return "a CONNECT (proxy tunnel) request";
    case Error::trace_method:
      return "a TRACE request";
    case Error::absolute_form:
      return "an absolute-form target (a proxy request)";
    case Error::authority_form:
      return "an authority-form target (a proxy request)";
    case Error::asterisk_form:
      return "an asterisk-form target with a method other than OPTIONS";
    case Error::target_syntax:
      return "the target is not a valid origin-form path and query";
    case Error::path_dot_segment:
      return "a dot segment in the path";
    case Error::path_encoded_separator:
      return "an encoded '.', '/' or '\\' in the path";
    case Error::obs_fold:
      return "a header line starts with whitespace (line folding)";
    case Error::field_syntax:
      return "a header line is not token ':' value";
    case Error::missing_host:
      return "the request has no Host header";
    case Error::duplicate_host:
      return "the request has more than one Host header";
    case Error::content_length_value:
      return "Content-Length is not a decimal number in range";
    case Error::duplicate_content_length:
      return "Content-Length appears twice or holds a list";
    case Error::transfer_encoding:
      return "Transfer-Encoding is not exactly one \"chunked\"";
    case Error::length_and_chunked:
      return "both Content-Length and Transfer-Encoding";
    case Error::body_too_large:
      return "the body is larger than the policy's http_body_bytes";
    case Error::chunk_size:
      return "a chunk size is not 1 to 16 hex digits";
    case Error::chunk_extension:
      return "a chunk extension is too long or malformed";
    case Error::chunk_crlf:
      return "chunk data is not followed by CRLF";
    case Error::trailer:
      return "trailer fields after the last chunk";
    case Error::trailer_syntax:
      return "a trailer field is not token \":\" value CRLF";
    case Error::trailer_too_large:
      return "more trailer fields or bytes than allowed";
  }
  return "unknown error";
}

}  // namespace abox::base::http1
