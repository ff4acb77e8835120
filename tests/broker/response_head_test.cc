#include "broker/response_head.h"

#include <gtest/gtest.h>

#include <string>

#include "base/byte_reader.h"

namespace abox::broker {
namespace {

base::Result<ResponseHeadStatus, ResponseError> parse(std::string_view text, ResponseHead& head,
                                                      bool was_head = false) {
  return parse_response_head(base::as_bytes(text), was_head, head);
}

ResponseError error_of(std::string_view text) {
  ResponseHead head;
  auto r = parse(text, head);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? ResponseError::status_line : r.error();
}

TEST(ResponseHead, ContentLengthResponse) {
  ResponseHead head;
  std::string text =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"ok\":true}\n";
  auto r = parse(text, head);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, ResponseHeadStatus::complete);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.framing, ResponseFraming::content_length);
  EXPECT_EQ(head.content_length, 12u);
  EXPECT_FALSE(head.connection_close);
  EXPECT_EQ(head.head_bytes, text.find("{"));
}

TEST(ResponseHead, ChunkedSseAndRetryAfter) {
  ResponseHead head;
  auto r =
      parse("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 17\r\nTransfer-Encoding: chunked\r\n\r\n", head);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(head.status, 429);
  EXPECT_EQ(head.framing, ResponseFraming::chunked);
  EXPECT_EQ(head.retry_after, "17");
}

TEST(ResponseHead, NeedsMoreUntilTheEmptyLine) {
  std::string text = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  for (std::size_t n = 0; n < text.size(); ++n) {
    ResponseHead head;
    auto r = parse(text.substr(0, n), head);
    ASSERT_TRUE(r.ok()) << n;
    EXPECT_EQ(*r, ResponseHeadStatus::need_more) << n;
  }
}

TEST(ResponseHead, BodilessStatusesAndHead) {
  ResponseHead head;
  ASSERT_TRUE(parse("HTTP/1.1 204 No Content\r\n\r\n", head).ok());
  EXPECT_EQ(head.framing, ResponseFraming::none);
  ASSERT_TRUE(parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", head).ok());
  EXPECT_EQ(head.framing, ResponseFraming::none);
  ASSERT_TRUE(parse("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", head, true).ok());
  EXPECT_EQ(head.framing, ResponseFraming::none);
  ASSERT_TRUE(parse("HTTP/1.1 100 Continue\r\n\r\n", head).ok());
  EXPECT_EQ(head.framing, ResponseFraming::none);
}

TEST(ResponseHead, UntilCloseWithoutFramingOrOnHttp10) {
  ResponseHead head;
  ASSERT_TRUE(parse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", head).ok());
  EXPECT_EQ(head.framing, ResponseFraming::until_close);
  EXPECT_TRUE(head.connection_close);
  ASSERT_TRUE(parse("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", head).ok());
  EXPECT_TRUE(head.connection_close);
  ASSERT_TRUE(
      parse("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\n", head).ok());
  EXPECT_TRUE(head.connection_close);
}

TEST(ResponseHead, TransferEncodingIsExactlyOneChunked) {
  // The broker never offers another transfer coding (it drops the request's
  // TE); a client would undo one after the scrubber saw the coded bytes.
  for (std::string_view te :
       {"gzip", "gzip, chunked", "chunked, chunked", "deflate,chunked", "identity", ""}) {
    std::string text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: " + std::string(te) + "\r\n\r\n";
    EXPECT_EQ(error_of(text), ResponseError::transfer_encoding) << te;
  }
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ResponseError::transfer_encoding);
  ResponseHead head;
  ASSERT_TRUE(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding:  CHUNKED \r\n\r\n", head).ok());
  EXPECT_EQ(head.framing, ResponseFraming::chunked);
}

TEST(ResponseHead, ContentCodingIsNoted) {
  ResponseHead head;
  for (std::string_view ce : {"gzip", "br", "identity, gzip", "x-anything", ""}) {
    std::string text =
        "HTTP/1.1 200 OK\r\nContent-Encoding: " + std::string(ce) + "\r\nContent-Length: 3\r\n\r\n";
    ASSERT_TRUE(parse(text, head).ok()) << ce;
    EXPECT_TRUE(head.content_coded) << ce;
  }
  ASSERT_TRUE(parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Extensions: "
                    "permessage-deflate\r\n\r\n",
                    head)
                  .ok());
  EXPECT_TRUE(head.content_coded) << "a WebSocket extension codes the tunnel";
  for (std::string_view ok : {"HTTP/1.1 200 OK\r\nContent-Encoding: Identity\r\nContent-Length: 3\r\n\r\n",
                              "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"}) {
    ASSERT_TRUE(parse(ok, head).ok()) << ok;
    EXPECT_FALSE(head.content_coded) << ok;
  }
}

TEST(ResponseHead, SmugglingShapesOnTheWayBack) {
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ResponseError::length_and_chunked);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            ResponseError::content_length);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), ResponseError::content_length);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"),
            ResponseError::content_length);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n"), ResponseError::field_syntax);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\nX: a\r\n\r\n"), ResponseError::line_ending);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n"), ResponseError::line_ending);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n"), ResponseError::control_byte);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\nBad Name: a\r\n\r\n"), ResponseError::field_syntax);
  EXPECT_EQ(error_of("HTTP/1.1 200 OK\r\n: a\r\n\r\n"), ResponseError::field_syntax);
}

TEST(ResponseHead, BadStatusLines) {
  for (std::string_view s : {"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n",
                             "HTTP/1.1 099 X\r\n\r\n", "HTTP/1.1 600 X\r\n\r\n", "HTTP/1.1  200 OK\r\n\r\n",
                             "ICY 200 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "\r\n\r\n"}) {
    EXPECT_EQ(error_of(s), ResponseError::status_line) << s;
  }
  ResponseHead head;
  EXPECT_TRUE(parse("HTTP/1.1 200\r\n\r\n", head).ok());
}

TEST(ResponseHead, Bounded) {
  std::string big = "HTTP/1.1 200 OK\r\nX: " + std::string(kMaxResponseHeadBytes, 'a');
  EXPECT_EQ(error_of(big), ResponseError::head_too_large);
  std::string many = "HTTP/1.1 200 OK\r\n";
  for (std::size_t i = 0; i <= kMaxResponseFields; ++i) many += "X: y\r\n";
  many += "\r\n";
  EXPECT_EQ(error_of(many), ResponseError::too_many_fields);
}

TEST(ResponseHead, RetryAfterIsCappedAt64Bytes) {
  ResponseHead head;
  std::string text = "HTTP/1.1 503 X\r\nRetry-After: " + std::string(500, '9') + "\r\n\r\n";
  ASSERT_TRUE(parse(text, head).ok());
  EXPECT_EQ(head.retry_after.size(), 64u);
}

TEST(GuestResponseHead, ProviderConnectionHeadersAreReplaced) {
  std::string raw =
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
      "X-Connection: stays\r\n\r\n";
  std::string out;
  write_guest_response_head(raw, false, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Connection: stays\r\n\r\n");
  out.clear();
  write_guest_response_head("HTTP/1.1 200 OK\r\nCONNECTION: close\r\nContent-Length: 2\r\n\r\n", true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
  ResponseHead head;
  auto r = parse(out, head);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(head.connection_close);
  EXPECT_EQ(head.head_bytes, out.size());
}

TEST(GuestResponseHead, TrailerIsNotAnnouncedSinceTrailersAreDropped) {
  std::string out;
  write_guest_response_head(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\nX-Trailer-Note: stays\r\n\r\n",
      false, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Trailer-Note: stays\r\n\r\n");
}

}  // namespace
}  // namespace abox::broker
