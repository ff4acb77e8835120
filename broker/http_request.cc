// Request head parser. How this works:
//
// parse_request_head() runs each time more of a request's bytes arrive, on
// the whole prefix so far cut to max_head_bytes (so each call is O(limit) and
// the caller keeps no parser state). A base::ByteReader walks the prefix line
// by line: next_line() refuses a bare LF, a lone CR and control bytes as it
// meets them, and returns a line only once its CRLF is there. The request
// line, then each header line, is checked when it is complete; the head is
// decided at the empty line (missing Host can only be known there). Running
// out of bytes is need_more, and need_more with max_head_bytes in hand is
// head_too_large. Checks happen in stream order, which makes the result
// monotone (see the header).
//
// Nothing is copied: the method, target, header names and values are views
// into the caller's buffer, and the header fields go into RequestHead's
// inline array.
#include "broker/http_request.h"

#include <algorithm>
#include <array>
#include <limits>

#include "base/byte_reader.h"

namespace abox::broker {

using base::ByteReader;
using Bytes = std::span<const std::uint8_t>;

namespace {

constexpr std::uint8_t kCR = '\r';
constexpr std::uint8_t kLF = '\n';
constexpr std::uint64_t kMaxContentLength = std::numeric_limits<std::int64_t>::max();

std::string_view as_text(Bytes b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// Byte classes, as compile-time tables: the parser's per-byte checks are
// one load each.
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
// RFC 3986: unreserved / sub-delims / ":" / "@" (pchar without pct-encoded),
// plus "/" and "?", which origin-form allows around its segments.
constexpr auto kTargetChar = byte_table([](unsigned c) {
  return is_alnum(c) || (c != 0 && kTargetPunctuation.find(static_cast<char>(c)) != std::string_view::npos);
});
// Bytes next_line() must look at: CR, LF, and control bytes other than HTAB.
constexpr auto kLineSpecial = byte_table([](unsigned c) { return (c < 0x20 && c != '\t') || c == 0x7F; });

bool is_tchar(char c) {
  return kTchar[static_cast<unsigned char>(c)];
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_target_char(char c) {
  return kTargetChar[static_cast<unsigned char>(c)];
}

bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

// ---- lines ------------------------------------------------------------------

enum class LineStatus : std::uint8_t { line, need_more, error };

struct Line {
  LineStatus status = LineStatus::need_more;
  Bytes text;  // without its CRLF
  HttpError error = HttpError::none;
};

// The next CRLF-terminated line at the reader's cursor; the cursor moves past
// the CRLF only when a whole line is returned. Checks every byte it passes:
// LF only after CR, CR only before LF, no control byte but HTAB.
Line next_line(ByteReader& r) {
  Line out;
  // A view of what is left, indexed below its size only; the cursor moves
  // through the reader.
  const Bytes rest = r.rest();
  for (std::size_t n = 0; n < rest.size(); ++n) {
    const std::uint8_t b = rest[n];
    if (!kLineSpecial[b]) continue;
    if (b == kCR) {
      if (n + 1 == rest.size()) return out;  // need_more
      if (rest[n + 1] != kLF) {
        out.status = LineStatus::error;
        out.error = HttpError::line_ending;
        return out;
      }
      out.status = LineStatus::line;
      out.text = *r.bytes(n);  // n + 2 <= remaining()
      (void)r.skip(2);
      return out;
    }
    out.status = LineStatus::error;
    out.error = b == kLF ? HttpError::line_ending : HttpError::control_byte;
    return out;
  }
  return out;  // need_more
}

// ---- request line -------------------------------------------------------------

// Checks an origin-form target ("/..."); sets `path` to the part before "?".
HttpError check_origin_form(std::string_view target, std::string_view& path) {
  if (target.size() >= 2 && target[1] == '/')
    return HttpError::target_syntax;  // "//host/..." reads as a network path
  std::size_t query = target.size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    char c = target[i];
    if (c == '%') {
      if (i + 2 >= target.size() || !is_hex(target[i + 1]) || !is_hex(target[i + 2])) {
        return HttpError::target_syntax;
      }
      if (i < query) {
        char hi = target[i + 1];
        char lo = lower(target[i + 2]);
        // %2e ".", %2f "/", %5c "\": a server may decode them into a path
        // other than the one the prefix check saw.
        if ((hi == '2' && (lo == 'e' || lo == 'f')) || (hi == '5' && lo == 'c')) {
          return HttpError::path_encoded_separator;
        }
      }
      i += 2;
      continue;
    }
    if (static_cast<unsigned char>(c) >= 0x80 || !is_target_char(c)) return HttpError::target_syntax;
    if (c == '?' && query == target.size()) query = i;
  }
  path = target.substr(0, query);
  // Dot segments: "/." or "/.." followed by "/" or the end of the path, or
  // by ";" (servers that strip path parameters read "/..;x/" as "/../").
  std::string_view rest = path;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    std::size_t end = rest.find('/');
    std::string_view segment = rest.substr(0, end);
    segment = segment.substr(0, segment.find(';'));
    if (segment == "." || segment == "..") return HttpError::path_dot_segment;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return HttpError::none;
}

struct RequestLine {
  std::string_view method, target, path;
};

HttpError parse_request_line(std::string_view line, RequestLine& out) {
  std::size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return HttpError::request_line;
  std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return HttpError::request_line;
  if (line.find(' ', sp2 + 1) != std::string_view::npos) return HttpError::request_line;
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || target.empty()) return HttpError::request_line;
  if (!is_token(method)) return HttpError::method;
  if (!version.starts_with("HTTP/")) return HttpError::request_line;
  if (version != "HTTP/1.1") return HttpError::version;
  // Methods are case-sensitive, but an upstream might not be: refuse these
  // in any spelling.
  if (iequals(method, "CONNECT")) return HttpError::connect_method;
  if (iequals(method, "TRACE")) return HttpError::trace_method;
  out.method = method;
  out.target = target;
  if (target == "*") {
    if (method != "OPTIONS") return HttpError::asterisk_form;
    out.path = target;
    return HttpError::none;
  }
  if (target.front() != '/') {
    if (target.find("://") != std::string_view::npos) return HttpError::absolute_form;
    if (target.find(':') != std::string_view::npos) return HttpError::authority_form;
    return HttpError::target_syntax;
  }
  return check_origin_form(target, out.path);
}

// ---- header fields -------------------------------------------------------------

HttpError parse_field(std::string_view line, HeaderField& out) {
  if (is_ows(line.front())) return HttpError::obs_fold;
  std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return HttpError::field_syntax;
  std::string_view name = line.substr(0, colon);
  if (!is_token(name)) return HttpError::field_syntax;  // includes whitespace before the colon
  std::string_view value = trim_ows(line.substr(colon + 1));
  // Non-ASCII bytes are allowed only in values (obs-text); control bytes were
  // refused by next_line().
  out.name = name;
  out.value = value;
  return HttpError::none;
}

base::Result<std::uint64_t, HttpError> parse_content_length(std::string_view v) {
  if (v.find(',') != std::string_view::npos) return base::Err{HttpError::duplicate_content_length};
  if (v.empty()) return base::Err{HttpError::content_length_value};
  std::uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return base::Err{HttpError::content_length_value};
    auto digit = static_cast<std::uint64_t>(c - '0');
    if (n > (kMaxContentLength - digit) / 10) return base::Err{HttpError::content_length_value};
    n = n * 10 + digit;
  }
  return n;
}

// Does a Connection value list the "upgrade" option?
bool lists_upgrade(std::string_view v) {
  while (!v.empty()) {
    std::size_t comma = v.find(',');
    if (iequals(trim_ows(v.substr(0, comma)), "upgrade")) return true;
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

struct RequestHeadBuilder {
  static base::Result<HeadStatus, HttpError> parse(Bytes received, const HeadLimits& limits,
                                                   RequestHead& head) {
    // Reset all but the field array, which is read only up to field_count_
    // (clearing its 4 KiB on every call would be a third of the parse).
    head.method_ = head.target_ = head.path_ = head.host_ = {};
    head.field_count_ = 0;
    head.framing_ = BodyFraming::none;
    head.content_length_ = 0;
    head.wants_upgrade_ = false;
    head.head_bytes_ = 0;
    const std::size_t max_fields = std::min(limits.max_fields, kMaxHeaderFields);
    const bool truncated = received.size() >= limits.max_head_bytes;
    ByteReader r(received.first(std::min(received.size(), limits.max_head_bytes)));
    auto need_more = [&]() -> base::Result<HeadStatus, HttpError> {
      if (truncated) return base::Err{HttpError::head_too_large};
      return HeadStatus::need_more;
    };

    Line line = next_line(r);
    if (line.status == LineStatus::need_more) return need_more();
    if (line.status == LineStatus::error) return base::Err{line.error};
    RequestLine request;
    if (auto e = parse_request_line(as_text(line.text), request); e != HttpError::none) return base::Err{e};
    head.method_ = request.method;
    head.target_ = request.target;
    head.path_ = request.path;

    std::size_t hosts = 0;
    bool has_length = false;
    bool chunked = false;
    for (;;) {
      line = next_line(r);
      if (line.status == LineStatus::need_more) return need_more();
      if (line.status == LineStatus::error) return base::Err{line.error};
      if (line.text.empty()) break;
      HeaderField field;
      if (auto e = parse_field(as_text(line.text), field); e != HttpError::none) return base::Err{e};
      if (head.field_count_ == max_fields) return base::Err{HttpError::too_many_fields};
      if (iequals(field.name, "host")) {
        if (++hosts > 1) return base::Err{HttpError::duplicate_host};
        head.host_ = field.value;
      } else if (iequals(field.name, "content-length")) {
        if (has_length) return base::Err{HttpError::duplicate_content_length};
        if (chunked) return base::Err{HttpError::length_and_chunked};
        auto n = parse_content_length(field.value);
        if (!n) return base::Err{n.error()};
        has_length = true;
        head.content_length_ = *n;
      } else if (iequals(field.name, "transfer-encoding")) {
        if (chunked || !iequals(field.value, "chunked")) return base::Err{HttpError::transfer_encoding};
        if (has_length) return base::Err{HttpError::length_and_chunked};
        chunked = true;
      } else if (iequals(field.name, "upgrade")) {
        head.wants_upgrade_ = true;
      } else if (iequals(field.name, "connection")) {
        if (lists_upgrade(field.value)) head.wants_upgrade_ = true;
      }
      head.fields_[head.field_count_++] = field;
    }
    if (hosts == 0) return base::Err{HttpError::missing_host};
    head.framing_ = chunked      ? BodyFraming::chunked
                    : has_length ? BodyFraming::content_length
                                 : BodyFraming::none;
    head.head_bytes_ = r.position();
    return HeadStatus::complete;
  }
};

HeadLimits HeadLimits::from(const policy::Limits& limits) {
  HeadLimits out;
  out.max_head_bytes = limits.http_head_bytes;
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

const HeaderField* RequestHead::find(std::string_view name) const {
  for (const auto& f : fields()) {
    if (iequals(f.name, name)) return &f;
  }
  return nullptr;
}

std::size_t RequestHead::count(std::string_view name) const {
  return static_cast<std::size_t>(std::count_if(fields().begin(), fields().end(),
                                                [&](const HeaderField& f) { return iequals(f.name, name); }));
}

base::Result<HeadStatus, HttpError> parse_request_head(Bytes received, const HeadLimits& limits,
                                                       RequestHead& head) {
  return RequestHeadBuilder::parse(received, limits, head);
}

std::string_view to_string(HttpError e) {
  switch (e) {
    case HttpError::none:
      return "none";
    case HttpError::head_too_large:
      return "head_too_large";
    case HttpError::too_many_fields:
      return "too_many_fields";
    case HttpError::line_ending:
      return "line_ending";
    case HttpError::control_byte:
      return "control_byte";
    case HttpError::request_line:
      return "request_line";
    case HttpError::method:
      return "method";
    case HttpError::version:
      return "version";
    case HttpError::connect_method:
      return "connect_method";
    case HttpError::trace_method:
      return "trace_method";
    case HttpError::absolute_form:
      return "absolute_form";
    case HttpError::authority_form:
      return "authority_form";
    case HttpError::asterisk_form:
      return "asterisk_form";
    case HttpError::target_syntax:
      return "target_syntax";
    case HttpError::path_dot_segment:
      return "path_dot_segment";
    case HttpError::path_encoded_separator:
      return "path_encoded_separator";
    case HttpError::obs_fold:
      return "obs_fold";
    case HttpError::field_syntax:
      return "field_syntax";
    case HttpError::missing_host:
      return "missing_host";
    case HttpError::duplicate_host:
      return "duplicate_host";
    case HttpError::content_length_value:
      return "content_length_value";
    case HttpError::duplicate_content_length:
      return "duplicate_content_length";
    case HttpError::transfer_encoding:
      return "transfer_encoding";
    case HttpError::length_and_chunked:
      return "length_and_chunked";
    case HttpError::body_too_large:
      return "body_too_large";
    case HttpError::chunk_size:
      return "chunk_size";
    case HttpError::chunk_extension:
      return "chunk_extension";
    case HttpError::chunk_crlf:
      return "chunk_crlf";
    case HttpError::trailer:
      return "trailer";
    case HttpError::trailer_syntax:
      return "trailer_syntax";
    case HttpError::trailer_too_large:
      return "trailer_too_large";
  }
  return "unknown";
}

std::string_view describe(HttpError e) {
  switch (e) {
    case HttpError::none:
      return "no error";
    case HttpError::head_too_large:
      return "the request head is larger than the policy's http_head_bytes";
    case HttpError::too_many_fields:
      return "the request has too many header fields";
    case HttpError::line_ending:
      return "a bare LF, or a CR not followed by LF";
    case HttpError::control_byte:
      return "a control byte other than HTAB in the head";
    case HttpError::request_line:
      return "the request line is not METHOD SP target SP version";
    case HttpError::method:
      return "the method is not a token";
    case HttpError::version:
      return "the version is not HTTP/1.1";
    case HttpError::connect_method:
      return "a CONNECT (proxy tunnel) request";
    case HttpError::trace_method:
      return "a TRACE request";
    case HttpError::absolute_form:
      return "an absolute-form target (a proxy request)";
    case HttpError::authority_form:
      return "an authority-form target (a proxy request)";
    case HttpError::asterisk_form:
      return "an asterisk-form target with a method other than OPTIONS";
    case HttpError::target_syntax:
      return "the target is not a valid origin-form path and query";
    case HttpError::path_dot_segment:
      return "a dot segment in the path";
    case HttpError::path_encoded_separator:
      return "an encoded '.', '/' or '\\' in the path";
    case HttpError::obs_fold:
      return "a header line starts with whitespace (line folding)";
    case HttpError::field_syntax:
      return "a header line is not token ':' value";
    case HttpError::missing_host:
      return "the request has no Host header";
    case HttpError::duplicate_host:
      return "the request has more than one Host header";
    case HttpError::content_length_value:
      return "Content-Length is not a decimal number in range";
    case HttpError::duplicate_content_length:
      return "Content-Length appears twice or holds a list";
    case HttpError::transfer_encoding:
      return "Transfer-Encoding is not exactly one \"chunked\"";
    case HttpError::length_and_chunked:
      return "both Content-Length and Transfer-Encoding";
    case HttpError::body_too_large:
      return "the body is larger than the policy's http_body_bytes";
    case HttpError::chunk_size:
      return "a chunk size is not 1 to 16 hex digits";
    case HttpError::chunk_extension:
      return "a chunk extension is too long or malformed";
    case HttpError::chunk_crlf:
      return "chunk data is not followed by CRLF";
    case HttpError::trailer:
      return "trailer fields after the last chunk";
    case HttpError::trailer_syntax:
      return "a trailer field is not token \":\" value CRLF";
    case HttpError::trailer_too_large:
      return "more trailer fields or bytes than allowed";
  }
  return "unknown error";
}

}  // namespace abox::broker
