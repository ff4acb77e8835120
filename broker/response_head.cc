#include "broker/response_head.h"

#include <optional>

#include "base/byte_reader.h"
#include "base/decimal.h"

namespace abox::broker {

namespace {

bool is_tchar(std::uint8_t c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view as_text(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Reads one line (without its CRLF) from the reader. nullopt: need more
// bytes. An error: a bare LF, a CR not followed by LF, or a control byte.
base::Result<std::optional<std::string_view>, ResponseError> next_line(base::ByteReader& r) {
  std::size_t len = 0;
  while (true) {
    auto c = r.peek(len);
    if (!c) return std::optional<std::string_view>{};
    if (*c == '\n') return base::Err{ResponseError::line_ending};
    if (*c == '\r') {
      auto lf = r.peek(len + 1);
      if (!lf) return std::optional<std::string_view>{};
      if (*lf != '\n') return base::Err{ResponseError::line_ending};
      auto line = r.bytes(len);
      if (!line || !r.skip(2)) return base::Err{ResponseError::line_ending};
      return std::optional<std::string_view>{as_text(*line)};
    }
    if ((*c < 0x20 && *c != '\t') || *c == 0x7F) return base::Err{ResponseError::control_byte};
    ++len;
  }
}

// At most 18 digits: a length no body reaches, and far from 2^64.
bool parse_digits(std::string_view s, std::uint64_t& out) {
  if (s.size() > 18) return false;
  auto v = base::parse_decimal<std::uint64_t>(s);
  if (!v) return false;
  out = *v;
  return true;
}

base::Result<void, ResponseError> parse_status_line(std::string_view line, ResponseHead& head) {
  // "HTTP/1.x DDD reason" (the reason may be empty: "HTTP/1.1 200 ").
  if (line.size() < 12) return base::Err{ResponseError::status_line};
  std::string_view version = line.substr(0, 8);
  if (version == "HTTP/1.1") {
    head.http10 = false;
  } else if (version == "HTTP/1.0") {
    head.http10 = true;
  } else {
    return base::Err{ResponseError::status_line};
  }
  if (line[8] != ' ') return base::Err{ResponseError::status_line};
  auto status = base::parse_decimal_in<unsigned>(line.substr(9, 3), 100, 599);
  if (!status) return base::Err{ResponseError::status_line};
  if (line.size() > 12 && line[12] != ' ') return base::Err{ResponseError::status_line};
  head.status = static_cast<int>(*status);
  return {};
}

}  // namespace

std::string_view to_string(ResponseError e) {
  switch (e) {
    case ResponseError::head_too_large:
      return "head_too_large";
    case ResponseError::too_many_fields:
      return "too_many_fields";
    case ResponseError::line_ending:
      return "line_ending";
    case ResponseError::control_byte:
      return "control_byte";
    case ResponseError::status_line:
      return "status_line";
    case ResponseError::field_syntax:
      return "field_syntax";
    case ResponseError::content_length:
      return "content_length";
    case ResponseError::transfer_encoding:
      return "transfer_encoding";
    case ResponseError::length_and_chunked:
      return "length_and_chunked";
  }
  return "unknown";
}

base::Result<ResponseHeadStatus, ResponseError> parse_response_head(std::span<const std::uint8_t> received,
                                                                    bool request_was_head,
                                                                    ResponseHead& head) {
  head = ResponseHead{};
  bool limited = received.size() > kMaxResponseHeadBytes;
  base::ByteReader r(limited ? received.first(kMaxResponseHeadBytes) : received);
  auto need_more = [&]() -> base::Result<ResponseHeadStatus, ResponseError> {
    if (limited) return base::Err{ResponseError::head_too_large};
    return ResponseHeadStatus::need_more;
  };

  auto status_line = next_line(r);
  if (!status_line.ok()) return base::Err{status_line.error()};
  if (!*status_line) return need_more();
  if (auto s = parse_status_line(**status_line, head); !s.ok()) return base::Err{s.error()};

  bool have_length = false;
  bool chunked = false;  // Transfer-Encoding: chunked (any other is refused)
  std::size_t fields = 0;
  while (true) {
    auto line_or = next_line(r);
    if (!line_or.ok()) return base::Err{line_or.error()};
    if (!*line_or) return need_more();
    std::string_view line = **line_or;
    if (line.empty()) break;
    if (++fields > kMaxResponseFields) return base::Err{ResponseError::too_many_fields};
    std::size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return base::Err{ResponseError::field_syntax};
    std::string_view name = line.substr(0, colon);
    for (char c : name) {
      if (!is_tchar(static_cast<std::uint8_t>(c))) return base::Err{ResponseError::field_syntax};
    }
    std::string_view value = trim_ows(line.substr(colon + 1));
    if (iequal(name, "content-length")) {
      std::uint64_t v = 0;
      if (!parse_digits(value, v)) return base::Err{ResponseError::content_length};
      if (have_length && v != head.content_length) return base::Err{ResponseError::content_length};
      have_length = true;
      head.content_length = v;
    } else if (iequal(name, "transfer-encoding")) {
      // Exactly one "chunked": another transfer coding (the request's TE was
      // dropped, so none was offered) would be undone by the guest's client
      // after the broker scrubbed the still-coded bytes.
      if (chunked || !iequal(value, "chunked")) return base::Err{ResponseError::transfer_encoding};
      chunked = true;
    } else if (iequal(name, "content-encoding")) {
      if (!iequal(value, "identity")) head.content_coded = true;
    } else if (iequal(name, "upgrade")) {
      if (iequal(value, "websocket")) head.websocket = true;
    } else if (iequal(name, "sec-websocket-extensions")) {
      head.content_coded = true;  // e.g. permessage-deflate: the tunnel's payload compressed
    } else if (iequal(name, "retry-after")) {
      head.retry_after = std::string(value.substr(0, 64));
    } else if (iequal(name, "connection")) {
      // A token list; "close" anywhere in it.
      std::size_t pos = 0;
      while (pos <= value.size()) {
        std::size_t comma = value.find(',', pos);
        std::string_view token = trim_ows(
            value.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
        if (iequal(token, "close")) head.connection_close = true;
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
      }
    }
  }
  head.head_bytes = r.position();
  if (have_length && chunked) return base::Err{ResponseError::length_and_chunked};
  if (head.http10) head.connection_close = true;
  if (request_was_head || (head.status >= 100 && head.status < 200) || head.status == 204 ||
      head.status == 304) {
    head.framing = ResponseFraming::none;
  } else if (chunked) {
    head.framing = ResponseFraming::chunked;
  } else if (have_length) {
    head.framing = ResponseFraming::content_length;
  } else {
    head.framing = ResponseFraming::until_close;
    head.connection_close = true;
  }
  return ResponseHeadStatus::complete;
}

void write_guest_response_head(std::string_view raw, bool close, std::string& out) {
  // raw ends with the empty line; every line ends in CRLF (validated).
  std::size_t pos = 0;
  bool first = true;
  while (pos < raw.size()) {
    std::size_t end = raw.find("\r\n", pos);
    if (end == std::string_view::npos) end = raw.size();
    std::string_view line = raw.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) break;
    if (!first) {
      std::string_view name = line.substr(0, line.find(':'));
      // Trailer announces fields the broker never forwards (body_decoder.h).
      if (iequal(name, "connection") || iequal(name, "keep-alive") || iequal(name, "proxy-connection") ||
          iequal(name, "trailer"))
        continue;
    }
    first = false;
    out.append(line);
    out.append("\r\n");
  }
  if (close) out.append("Connection: close\r\n");
  out.append("\r\n");
}

}  // namespace abox::broker
