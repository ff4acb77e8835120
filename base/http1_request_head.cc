// Request head reader. How this works:
//
// read_request_head() runs each time more of a request's bytes arrive, on the
// whole prefix so far cut to max_head_bytes (so each call is O(limit) and the
// caller keeps no parser state). A base::ByteReader walks the prefix line by
// line: next_line() refuses a bare LF, a lone CR and control bytes as it
// meets them, and returns a line only once its CRLF is there. The request
// line, then each header line, is checked when it is complete; the head is
// decided at the empty line (missing Host can only be known there). Running
// out of bytes is need_more, and need_more with max_head_bytes in hand is
// head_too_large. Checks happen in stream order, which makes the result
// monotone (see the header).
//
// Nothing is copied: the method, target, header names and values are views
// into the caller's buffer, and the fields go into the caller's span.
#include "base/http1_request_head.h"

#include <algorithm>

namespace abox::base::http1 {

namespace {

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// Checks a strict origin-form target ("/..."); sets `path` to the part before "?".
Error check_strict_origin_form(std::string_view target, std::string_view& path) {
  if (target.size() >= 2 && target[1] == '/')
    return Error::target_syntax;  // "//host/..." reads as a network path
  std::size_t query = target.size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    const char c = target[i];
    if (c == '%') {
      if (i + 2 >= target.size() || !is_hex(target[i + 1]) || !is_hex(target[i + 2])) {
        return Error::target_syntax;
      }
      if (i < query) {
        const char hi = target[i + 1];
        const char lo = lower(target[i + 2]);
        // %2e ".", %2f "/", %5c "\": a server may decode them into a path
        // other than the one the prefix check saw.
        if ((hi == '2' && (lo == 'e' || lo == 'f')) || (hi == '5' && lo == 'c')) {
          return Error::path_encoded_separator;
        }
      }
      i += 2;
      continue;
    }
    if (static_cast<unsigned char>(c) >= 0x80 || !is_target_char(c)) return Error::target_syntax;
    if (c == '?' && query == target.size()) query = i;
  }
  path = target.substr(0, query);
  // Dot segments: "/." or "/.." followed by "/" or the end of the path, or
  // by ";" (servers that strip path parameters read "/..;x/" as "/../").
  std::string_view rest = path;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    const std::size_t end = rest.find('/');
    std::string_view segment = rest.substr(0, end);
    segment = segment.substr(0, segment.find(';'));
    if (segment == "." || segment == "..") return Error::path_dot_segment;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return Error::none;
}

// A visible origin-form target: "/" then visible ASCII (no SP: the request
// line split on it already).
Error check_visible_origin_form(std::string_view target, std::string_view& path) {
  for (const char c : target) {
    const auto b = static_cast<unsigned char>(c);
    if (b <= 0x20 || b >= 0x7F) return Error::target_syntax;
  }
  path = target.substr(0, target.find('?'));
  return Error::none;
}

Error parse_request_line(std::string_view line, const RequestRules& rules, RequestHead& out) {
  const std::size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return Error::request_line;
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return Error::request_line;
  if (line.find(' ', sp2 + 1) != std::string_view::npos) return Error::request_line;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || target.empty()) return Error::request_line;
  if (!is_token(method)) return Error::method;
  if (!version.starts_with("HTTP/")) return Error::request_line;
  if (version == "HTTP/1.1") {
    out.minor_version = 1;
  } else if (version == "HTTP/1.0" && rules.http_1_0) {
    out.minor_version = 0;
  } else {
    return Error::version;
  }
  // Methods are case-sensitive, but a server might not be: refuse these in
  // any spelling.
  if (iequals(method, "CONNECT")) return Error::connect_method;
  if (!rules.trace && iequals(method, "TRACE")) return Error::trace_method;
  out.method = method;
  out.target = target;
  if (target == "*") {
    if (method != "OPTIONS") return Error::asterisk_form;
    out.path = target;
    return Error::none;
  }
  if (target.front() != '/') {
    if (target.find("://") != std::string_view::npos) return Error::absolute_form;
    if (target.find(':') != std::string_view::npos) return Error::authority_form;
    return Error::target_syntax;
  }
  return rules.target == TargetRules::strict ? check_strict_origin_form(target, out.path)
                                             : check_visible_origin_form(target, out.path);
}

}  // namespace

Result<HeadStatus, Error> read_request_head(std::span<const std::uint8_t> received, const RequestRules& rules,
                                            RequestHead& head, std::span<HeaderField> fields) {
  head = RequestHead{};
  const std::size_t max_fields =
      fields.empty() ? rules.max_fields : std::min(rules.max_fields, fields.size());
  const bool truncated = received.size() >= rules.max_head_bytes;
  ByteReader r(received.first(std::min(received.size(), rules.max_head_bytes)));
  auto need_more = [&]() -> Result<HeadStatus, Error> {
    if (truncated) return Err{Error::head_too_large};
    return HeadStatus::need_more;
  };

  Line line = next_line(r);
  if (line.status == LineStatus::need_more) return need_more();
  if (line.status == LineStatus::error) return Err{line.error};
  if (const Error e = parse_request_line(as_text(line.text), rules, head); e != Error::none) return Err{e};

  std::size_t hosts = 0;
  bool has_length = false;
  bool chunked = false;
  for (;;) {
    line = next_line(r);
    if (line.status == LineStatus::need_more) return need_more();
    if (line.status == LineStatus::error) return Err{line.error};
    if (line.text.empty()) break;
    HeaderField field;
    if (const Error e = parse_field(as_text(line.text), field); e != Error::none) return Err{e};
    if (head.field_count == max_fields) return Err{Error::too_many_fields};
    if (iequals(field.name, "host")) {
      if (++hosts > 1) return Err{Error::duplicate_host};
      head.host = field.value;
    } else if (iequals(field.name, "content-length")) {
      if (has_length) return Err{Error::duplicate_content_length};
      if (chunked) return Err{Error::length_and_chunked};
      auto n = parse_content_length(field.value);
      if (!n) return Err{n.error()};
      has_length = true;
      head.content_length = *n;
    } else if (iequals(field.name, "transfer-encoding")) {
      if (chunked || head.minor_version == 0 || !iequals(field.value, "chunked")) {
        return Err{Error::transfer_encoding};
      }
      if (has_length) return Err{Error::length_and_chunked};
      chunked = true;
    } else if (iequals(field.name, "upgrade")) {
      if (head.upgrade_fields++ == 0) head.upgrade = field.value;
      head.wants_upgrade = true;
    } else if (iequals(field.name, "connection")) {
      if (lists_token(field.value, "upgrade")) head.wants_upgrade = true;
    }
    if (!fields.empty()) fields[head.field_count] = field;
    ++head.field_count;
  }
  if (hosts == 0) return Err{Error::missing_host};
  head.framing = chunked      ? BodyFraming::chunked
                 : has_length ? BodyFraming::content_length
                              : BodyFraming::none;
  head.head_bytes = r.position();
  return HeadStatus::complete;
}

}  // namespace abox::base::http1
