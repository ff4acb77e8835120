// Tests for broker/http_request: the strict request head parser. Heads are
// written out as text. Every case is also fed byte by byte: a proper prefix
// must give need_more or the same decision, never another one (monotone), and
// bytes after a decided head must not change it.

#include "broker/http_request.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "tests/support/alloc_counter.h"

namespace abox::broker {
namespace {

using base::as_bytes;

const HeadLimits kLimits{};

base::Result<HeadStatus, HttpError> parse(std::string_view text, RequestHead& head,
                                          const HeadLimits& limits = kLimits) {
  return parse_request_head(as_bytes(text), limits, head);
}

// Parses `text`, which must be a complete head, and checks every prefix says
// need_more.
RequestHead complete(std::string_view text, const HeadLimits& limits = kLimits) {
  RequestHead head;
  for (std::size_t n = 0; n < text.size(); ++n) {
    auto r = parse(text.substr(0, n), head, limits);
    EXPECT_TRUE(r.ok() && *r == HeadStatus::need_more) << "prefix of " << n << " bytes decided early";
  }
  auto r = parse(text, head, limits);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : to_string(r.error()));
  if (r.ok()) {
    EXPECT_EQ(*r, HeadStatus::complete);
  }
  return head;
}

// `text` must be refused with `want`; its prefixes say need_more or `want`,
// and appending bytes changes nothing.
void refused(std::string_view text, HttpError want, const HeadLimits& limits = kLimits) {
  RequestHead head;
  for (std::size_t n = 0; n < text.size(); ++n) {
    auto r = parse(text.substr(0, n), head, limits);
    if (r.ok()) {
      EXPECT_EQ(*r, HeadStatus::need_more) << "prefix of " << n << " bytes completed";
    } else {
      EXPECT_EQ(r.error(), want) << "prefix of " << n << " bytes: " << to_string(r.error());
    }
  }
  auto r = parse(text, head, limits);
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  EXPECT_EQ(r.error(), want) << "got " << to_string(r.error()) << " for: " << text;
  std::string longer = std::string(text) + "X-More: 1\r\n\r\n";
  auto again = parse(longer, head, limits);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), want);
}

TEST(HttpRequest, ParsesATypicalModelApiRequest) {
  std::string text =
      "POST /v1/messages?beta=true HTTP/1.1\r\n"
      "Host: api.anthropic.com\r\n"
      "x-api-key:  abox-nonce-00 \t\r\n"
      "Content-Type: application/json\r\n"
      "Content-Length: 17\r\n"
      "\r\n";
  std::string with_body = text + "{\"model\":\"m\",\"x\"}";
  RequestHead head = complete(text);
  RequestHead again;
  ASSERT_TRUE(parse(with_body, again).ok());
  EXPECT_EQ(again.head_bytes(), text.size());
  EXPECT_EQ(head.method(), "POST");
  EXPECT_EQ(head.target(), "/v1/messages?beta=true");
  EXPECT_EQ(head.path(), "/v1/messages");
  EXPECT_EQ(head.host(), "api.anthropic.com");
  EXPECT_EQ(head.framing(), BodyFraming::content_length);
  EXPECT_EQ(head.content_length(), 17u);
  EXPECT_FALSE(head.wants_upgrade());
  ASSERT_EQ(head.fields().size(), 4u);
  EXPECT_EQ(head.fields()[1].name, "x-api-key");
  EXPECT_EQ(head.fields()[1].value, "abox-nonce-00");  // OWS trimmed both sides
  ASSERT_NE(head.find("X-API-KEY"), nullptr);
  EXPECT_EQ(head.count("content-type"), 1u);
  EXPECT_EQ(head.find("cookie"), nullptr);
}

TEST(HttpRequest, ViewsPointIntoTheCallersBuffer) {
  std::string text = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
  RequestHead head;
  ASSERT_TRUE(parse(text, head).ok());
  EXPECT_EQ(head.method().data(), text.data());
  EXPECT_EQ(head.host().data(), text.data() + text.find("h\r\n\r\n"));
}

TEST(HttpRequest, ParsingAllocatesNothing) {
  std::string text =
      "POST /v1/x HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\nA: 1\r\nB: 2\r\n\r\n";
  RequestHead head;
  testing::AllocationCounter allocations;
  auto r = parse(text, head);
  EXPECT_EQ(allocations.count(), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(head.framing(), BodyFraming::chunked);
}

TEST(HttpRequest, NoBodyWithoutFramingHeaders) {
  RequestHead head = complete("GET / HTTP/1.1\r\nHost: a.b\r\n\r\n");
  EXPECT_EQ(head.framing(), BodyFraming::none);
  EXPECT_EQ(head.content_length(), 0u);
}

TEST(HttpRequest, TransferEncodingChunkedInAnyCase) {
  EXPECT_EQ(complete("POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: Chunked \r\n\r\n").framing(),
            BodyFraming::chunked);
}

TEST(HttpRequest, AsteriskOnlyWithOptions) {
  EXPECT_EQ(complete("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").target(), "*");
  refused("GET * HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::asterisk_form);
}

TEST(HttpRequest, UpgradeIsNoted) {
  EXPECT_TRUE(complete("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n").wants_upgrade());
  EXPECT_TRUE(
      complete("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, UPGRADE\r\n\r\n").wants_upgrade());
  EXPECT_FALSE(
      complete("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgraded\r\n\r\n").wants_upgrade());
}

TEST(HttpRequest, ObsTextAllowedInValuesOnly) {
  EXPECT_EQ(complete("GET / HTTP/1.1\r\nHost: a\r\nX-Name: caf\xc3\xa9\r\n\r\n").fields()[1].value,
            "caf\xc3\xa9");
  refused("GET / HTTP/1.1\r\nHost: a\r\nX-N\xc3\xa9: 1\r\n\r\n", HttpError::field_syntax);
  refused("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
}

// ---- line endings and bytes -------------------------------------------------------

TEST(HttpRequest, BareLfRefused) {
  refused("GET / HTTP/1.1\nHost: a\r\n\r\n", HttpError::line_ending);
  refused("GET / HTTP/1.1\r\nHost: a\n\r\n", HttpError::line_ending);
  refused("GET / HTTP/1.1\r\nHost: a\r\n\n", HttpError::line_ending);
}

TEST(HttpRequest, LoneCrRefused) {
  refused("GET / HTTP/1.1\rHost: a\r\n\r\n", HttpError::line_ending);
  refused("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n", HttpError::line_ending);
}

TEST(HttpRequest, ControlBytesRefused) {
  refused(std::string_view("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", 29), HttpError::control_byte);
  refused("GET / HTTP/1.1\r\nX: \x7f\r\nHost: a\r\n\r\n", HttpError::control_byte);
  refused("GET / HTTP/1.1\r\nX: \x1b[31m\r\nHost: a\r\n\r\n", HttpError::control_byte);
  // HTAB is fine inside a value.
  EXPECT_EQ(complete("GET / HTTP/1.1\r\nHost: a\r\nX: 1\t2\r\n\r\n").fields()[1].value, "1\t2");
}

// ---- request line --------------------------------------------------------------

TEST(HttpRequest, RequestLineShape) {
  refused("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("GET /\r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("GET / FTP/1.1\r\nHost: a\r\n\r\n", HttpError::request_line);
  refused("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::method);
}

TEST(HttpRequest, OnlyHttp11) {
  refused("GET / HTTP/1.0\r\nHost: a\r\n\r\n", HttpError::version);
  refused("GET / HTTP/2.0\r\nHost: a\r\n\r\n", HttpError::version);
  refused("GET / HTTP/1.10\r\nHost: a\r\n\r\n", HttpError::version);
  refused("GET / http/1.1\r\nHost: a\r\n\r\n", HttpError::request_line);
}

TEST(HttpRequest, ConnectAndTraceRefusedInAnySpelling) {
  refused("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n", HttpError::connect_method);
  refused("connect / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::connect_method);
  refused("TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::trace_method);
  refused("Trace / HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::trace_method);
}

TEST(HttpRequest, ProxyFormsRefused) {
  refused("GET https://evil.example/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", HttpError::absolute_form);
  refused("GET http://api.example.com/v1/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
          HttpError::absolute_form);
  refused("GET evil.example:443 HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::authority_form);
  refused("GET evil HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET //evil.example/v1/ HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
}

TEST(HttpRequest, TargetBytes) {
  refused("GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET /a\\b HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET /a% HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET /a%4 HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  refused("GET /a<b> HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::target_syntax);
  EXPECT_EQ(complete("GET /a%20b?q=%2F..%2e&x=?y HTTP/1.1\r\nHost: a\r\n\r\n").path(), "/a%20b");
}

TEST(HttpRequest, DotSegmentsAndEncodedSeparatorsInThePath) {
  refused("GET /v1/../admin HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /v1/./x HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /v1/.. HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /. HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /v1/..?x HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  // Servers that strip path parameters (";...") read "..;x" as "..".
  refused("GET /v1/..;/admin HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /v1/.;jsessionid=1/x HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_dot_segment);
  refused("GET /v1/%2e%2e/admin HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_encoded_separator);
  refused("GET /v1%2Fadmin HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_encoded_separator);
  refused("GET /v1%5cadmin HTTP/1.1\r\nHost: a\r\n\r\n", HttpError::path_encoded_separator);
  // Dots inside a segment are names, not dot segments.
  EXPECT_EQ(complete("GET /v1/.well-known/..x/a.. HTTP/1.1\r\nHost: a\r\n\r\n").path(),
            "/v1/.well-known/..x/a..");
  EXPECT_EQ(complete("GET /v1/a;b=..;c HTTP/1.1\r\nHost: a\r\n\r\n").path(), "/v1/a;b=..;c");
}

// ---- header fields ----------------------------------------------------------------

TEST(HttpRequest, ObsFoldRefused) {
  refused("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", HttpError::obs_fold);
  refused("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n", HttpError::obs_fold);
  refused("GET / HTTP/1.1\r\n Host: a\r\n\r\n", HttpError::obs_fold);
}

TEST(HttpRequest, FieldSyntax) {
  refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n", HttpError::field_syntax);
  refused("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", HttpError::field_syntax);
  refused("GET / HTTP/1.1\r\nHost a\r\n\r\n", HttpError::field_syntax);
  refused("GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n", HttpError::field_syntax);
  refused("GET / HTTP/1.1\r\nX(y): a\r\nHost: a\r\n\r\n", HttpError::field_syntax);
  EXPECT_EQ(complete("GET / HTTP/1.1\r\nHost: a\r\nX:\r\n\r\n").fields()[1].value, "");
}

TEST(HttpRequest, ExactlyOneHost) {
  refused("GET / HTTP/1.1\r\nX: 1\r\n\r\n", HttpError::missing_host);
  refused("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", HttpError::duplicate_host);
  refused("GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n", HttpError::duplicate_host);
}

// ---- body framing (request smuggling shapes) -------------------------------------------

TEST(HttpRequest, ContentLengthDigitsOnly) {
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", HttpError::content_length_value);
  EXPECT_EQ(complete("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n").content_length(), 7u);
}

TEST(HttpRequest, ContentLengthOverflow) {
  EXPECT_EQ(
      complete("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n").content_length(),
      9223372036854775807u);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n",
          HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551617\r\n\r\n",
          HttpError::content_length_value);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999\r\n\r\n",
          HttpError::content_length_value);
}

TEST(HttpRequest, DuplicateContentLengthEvenEqual) {
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
          HttpError::duplicate_content_length);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
          HttpError::duplicate_content_length);
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", HttpError::duplicate_content_length);
}

TEST(HttpRequest, OnlyExactlyChunked) {
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
          HttpError::transfer_encoding);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
          HttpError::transfer_encoding);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", HttpError::transfer_encoding);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", HttpError::transfer_encoding);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
          HttpError::transfer_encoding);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", HttpError::transfer_encoding);
}

TEST(HttpRequest, BothLengthAndChunkedRefusedInEitherOrder) {
  refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
          HttpError::length_and_chunked);
  refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
          HttpError::length_and_chunked);
}

// ---- limits --------------------------------------------------------------------------

TEST(HttpRequest, HeadSizeLimit) {
  HeadLimits limits;
  limits.max_head_bytes = 64;
  std::string fits = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
  fits += std::string(64 - fits.size() - 4, 'x') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), 64u);
  complete(fits, limits);
  std::string over = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
  over += std::string(65 - over.size() - 4, 'x') + "\r\n\r\n";
  refused(over, HttpError::head_too_large, limits);
  // A slow head never completes: the limit decides it.
  RequestHead head;
  auto r = parse(std::string(64, 'G'), head, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), HttpError::head_too_large);
}

TEST(HttpRequest, PolicyLimitsApply) {
  policy::Limits l;
  l.http_head_bytes = 2048;
  EXPECT_EQ(HeadLimits::from(l).max_head_bytes, 2048u);
}

TEST(HttpRequest, FieldCountLimit) {
  HeadLimits limits;
  limits.max_fields = 3;
  complete("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n", limits);
  refused("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", HttpError::too_many_fields, limits);
  // The inline array bounds a larger setting.
  limits.max_fields = 100000;
  limits.max_head_bytes = 1 << 20;
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (std::size_t i = 0; i < kMaxHeaderFields; ++i) many += "A: 1\r\n";
  many += "\r\n";
  RequestHead head;
  auto r = parse(many, head, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), HttpError::too_many_fields);
}

TEST(HttpRequest, EveryErrorHasANameAndASentence) {
  for (int e = 0; e <= static_cast<int>(HttpError::trailer_too_large); ++e) {
    auto err = static_cast<HttpError>(e);
    EXPECT_NE(to_string(err), "unknown");
    EXPECT_NE(describe(err), "unknown error");
  }
}

}  // namespace
}  // namespace abox::broker
