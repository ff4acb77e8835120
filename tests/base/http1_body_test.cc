// Tests for base/http1_body (the broker's and abox-net's BodyDecoder): Content-Length and chunked bodies
// decoded incrementally. Every valid body is fed whole, then in every two-piece split, then byte by byte, and
// must decode to the same payload and stop at the same place; every malformed one must fail with its own
// error however it is split.

#include "base/http1_body.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "tests/support/alloc_counter.h"

namespace abox::base::http1 {
namespace {

struct Decoded {
  bool ok = true;
  Error error = Error::none;
  std::string payload;
  std::size_t consumed = 0;  // bytes used before done (or the error)
  bool done = false;
  std::string forwarded;  // the consumed bytes of the steps that are not trailer fields
  std::string dropped;    // the trailer steps' bytes
  std::size_t trailer_fields = 0;
};

// Trailer limits for decode(): none (a request's), or some (a response's).
struct Trailers {
  std::size_t fields = 0;
  std::size_t bytes = 0;
};

// Feeds `pieces` in order, as a broker would when bytes arrive.
Decoded decode(BodyFraming framing, std::uint64_t length, const std::vector<std::string_view>& pieces,
               std::uint64_t max_body = 1 << 20, Trailers trailers = {}) {
  BodyLimits limits;
  limits.max_body_bytes = max_body;
  limits.max_trailer_fields = trailers.fields;
  limits.max_trailer_bytes = trailers.bytes;
  BodyDecoder body(framing, length, limits);
  Decoded out;
  if (body.error() != Error::none) {
    out.ok = false;
    out.error = body.error();
    return out;
  }
  for (auto piece : pieces) {
    auto in = as_bytes(piece);
    int guard = 0;
    while (!in.empty() && !body.done()) {
      if (++guard > 100000) {
        ADD_FAILURE() << "no progress";
        return out;
      }
      auto step = body.feed(in);
      if (!step.ok()) {
        out.ok = false;
        out.error = step.error();
        EXPECT_EQ(body.error(), step.error());
        return out;
      }
      EXPECT_GT(step->consumed, 0u) << "feed() made no progress on a non-empty input";
      EXPECT_LE(step->consumed, in.size());
      out.payload.append(reinterpret_cast<const char*>(step->payload.data()), step->payload.size());
      (step->trailer ? out.dropped : out.forwarded)
          .append(reinterpret_cast<const char*>(in.data()), step->consumed);
      out.consumed += step->consumed;
      in = in.subspan(step->consumed);
    }
  }
  out.done = body.done();
  out.trailer_fields = body.trailer_fields();
  EXPECT_EQ(body.payload_bytes(), out.payload.size());
  return out;
}

// Decodes `wire` whole, split in two at every point, and byte by byte; all
// must agree. Returns the whole-input result.
Decoded decode_all_ways(BodyFraming framing, std::uint64_t length, std::string_view wire,
                        std::uint64_t max_body = 1 << 20, Trailers trailers = {}) {
  Decoded whole = decode(framing, length, {wire}, max_body, trailers);
  for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
    Decoded split = decode(framing, length, {wire.substr(0, cut), wire.substr(cut)}, max_body, trailers);
    EXPECT_EQ(split.ok, whole.ok) << "cut at " << cut;
    EXPECT_EQ(split.error, whole.error) << "cut at " << cut;
    EXPECT_EQ(split.payload, whole.payload) << "cut at " << cut;
    EXPECT_EQ(split.done, whole.done) << "cut at " << cut;
    if (whole.ok) {  // a refused body stops at a point that depends on the split
      EXPECT_EQ(split.forwarded, whole.forwarded) << "cut at " << cut;
      EXPECT_EQ(split.dropped, whole.dropped) << "cut at " << cut;
    }
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < wire.size(); ++i) bytes.push_back(wire.substr(i, 1));
  Decoded trickle = decode(framing, length, bytes, max_body, trailers);
  EXPECT_EQ(trickle.ok, whole.ok);
  EXPECT_EQ(trickle.error, whole.error);
  EXPECT_EQ(trickle.payload, whole.payload);
  if (whole.ok) {
    EXPECT_EQ(trickle.forwarded, whole.forwarded);
    EXPECT_EQ(trickle.dropped, whole.dropped);
    EXPECT_EQ(trickle.consumed, whole.consumed);
  }
  return whole;
}

void chunked_refused(std::string_view wire, Error want, std::uint64_t max_body = 1 << 20,
                     Trailers trailers = {}) {
  Decoded d = decode_all_ways(BodyFraming::chunked, 0, wire, max_body, trailers);
  EXPECT_FALSE(d.ok) << wire;
  EXPECT_EQ(d.error, want) << "got " << to_string(d.error) << " for " << wire;
}

TEST(BodyDecoder, NoBodyIsDoneAtOnce) {
  BodyDecoder body(BodyFraming::none, 0, BodyLimits{});
  EXPECT_TRUE(body.done());
  auto step = body.feed(as_bytes("GET / HTTP/1.1\r\n"));
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->consumed, 0u);
}

TEST(BodyDecoder, ContentLengthStopsAtItsEnd) {
  Decoded d = decode_all_ways(BodyFraming::content_length, 5, "hello GET / HTTP/1.1");
  EXPECT_TRUE(d.ok);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.payload, "hello");
  EXPECT_EQ(d.consumed, 5u);
}

TEST(BodyDecoder, ContentLengthZero) {
  BodyDecoder body(BodyFraming::content_length, 0, BodyLimits{});
  EXPECT_TRUE(body.done());
}

TEST(BodyDecoder, ContentLengthNotYetComplete) {
  Decoded d = decode(BodyFraming::content_length, 10, {"hel", "lo"});
  EXPECT_TRUE(d.ok);
  EXPECT_FALSE(d.done);
  EXPECT_EQ(d.payload, "hello");
}

TEST(BodyDecoder, ContentLengthOverTheLimitRefusedUpFront) {
  BodyLimits limits;
  limits.max_body_bytes = 4;
  BodyDecoder body(BodyFraming::content_length, 5, limits);
  EXPECT_EQ(body.error(), Error::body_too_large);
  EXPECT_FALSE(body.done());
  auto step = body.feed(as_bytes("hello"));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.error(), Error::body_too_large);
  BodyDecoder exact(BodyFraming::content_length, 4, limits);
  EXPECT_EQ(exact.error(), Error::none);
}

TEST(BodyDecoder, Chunked) {
  Decoded d = decode_all_ways(BodyFraming::chunked, 0,
                              "5\r\nhello\r\n1;name=value\r\n \r\nA\r\n0123456789\r\n0\r\n\r\nNEXT");
  EXPECT_TRUE(d.ok);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.payload, "hello 0123456789");
  EXPECT_EQ(d.consumed,
            std::string_view("5\r\nhello\r\n1;name=value\r\n \r\nA\r\n0123456789\r\n0\r\n\r\n").size());
}

TEST(BodyDecoder, ChunkedHexInEitherCaseWithLeadingZeros) {
  Decoded d = decode_all_ways(BodyFraming::chunked, 0,
                              "0000000000000001\r\nx\r\naB\r\n" + std::string(0xab, 'y') + "\r\n000\r\n\r\n");
  EXPECT_TRUE(d.ok);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.payload.size(), 1u + 0xab);
}

TEST(BodyDecoder, ChunkSizeRefusals) {
  chunked_refused("\r\nhello\r\n0\r\n\r\n", Error::chunk_size);               // empty size
  chunked_refused("g\r\nhello\r\n0\r\n\r\n", Error::chunk_size);              // not hex
  chunked_refused("-5\r\nhello\r\n0\r\n\r\n", Error::chunk_size);             // sign
  chunked_refused("0x5\r\nhello\r\n0\r\n\r\n", Error::chunk_size);            // prefix
  chunked_refused(" 5\r\nhello\r\n0\r\n\r\n", Error::chunk_size);             // leading space
  chunked_refused("5 \r\nhello\r\n0\r\n\r\n", Error::chunk_size);             // trailing space
  chunked_refused("5\nhello\r\n0\r\n\r\n", Error::chunk_size);                // bare LF
  chunked_refused("5\rhello\r\n0\r\n\r\n", Error::chunk_size);                // lone CR
  chunked_refused("00000000000000001\r\nx\r\n0\r\n\r\n", Error::chunk_size);  // 17 digits
  // 2^64 would overflow; 16 digits of f fit in 64 bits but not in the limit.
  chunked_refused("10000000000000000\r\n", Error::chunk_size);
  chunked_refused("ffffffffffffffff\r\n", Error::body_too_large);
}

TEST(BodyDecoder, ChunkExtensionRefusals) {
  chunked_refused("5;a=\x01\r\nhello\r\n0\r\n\r\n", Error::chunk_extension);
  chunked_refused("5;a\nhello\r\n0\r\n\r\n", Error::chunk_extension);
  std::string long_ext = "5;" + std::string(kMaxChunkExtensionBytes + 1, 'a') + "\r\nhello\r\n0\r\n\r\n";
  chunked_refused(long_ext, Error::chunk_extension);
  std::string max_ext = "5;" + std::string(kMaxChunkExtensionBytes, 'a') + "\r\nhello\r\n0\r\n\r\n";
  EXPECT_TRUE(decode(BodyFraming::chunked, 0, {max_ext}).done);
}

TEST(BodyDecoder, ChunkDataMustEndInCrlf) {
  chunked_refused("5\r\nhello!\r\n0\r\n\r\n", Error::chunk_crlf);
  chunked_refused("5\r\nhello\n0\r\n\r\n", Error::chunk_crlf);
  chunked_refused("5\r\nhello\r0\r\n\r\n", Error::chunk_crlf);
  chunked_refused("0\r\n\rX", Error::chunk_crlf);
}

TEST(BodyDecoder, TrailersRefused) {
  chunked_refused("5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", Error::trailer);
}

// Where trailers are allowed (upstream responses): 4 fields, 64 bytes here.
constexpr Trailers kSomeTrailers{4, 64};

TEST(BodyDecoder, AllowedTrailersAreCheckedAndSetApartFromTheBody) {
  Decoded d = decode_all_ways(BodyFraming::chunked, 0,
                              "5\r\nhello\r\n0\r\nX-Checksum: abc\r\nServer-Timing: db;dur=5\r\n\r\nNEXT",
                              1 << 20, kSomeTrailers);
  ASSERT_TRUE(d.ok) << to_string(d.error);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.payload, "hello");
  EXPECT_EQ(d.trailer_fields, 2u);
  // What a caller passes on is a chunked body with no trailer at all; the
  // bytes after the body ("NEXT") are not consumed.
  EXPECT_EQ(d.forwarded, "5\r\nhello\r\n0\r\n\r\n");
  EXPECT_EQ(d.dropped, "X-Checksum: abc\r\nServer-Timing: db;dur=5\r\n");
  Decoded again = decode(BodyFraming::chunked, 0, {d.forwarded});
  EXPECT_TRUE(again.done);
  EXPECT_EQ(again.payload, "hello");
}

TEST(BodyDecoder, TrailerFieldsTheBrokerStripsFromHeadsAreNeverPassedOn) {
  // An upstream that tries to reframe or to set things through the trailer,
  // for clients that merge trailer fields into the head.
  const std::string_view wire =
      "3\r\nabc\r\n0\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
      "Set-Cookie: s=1\r\n\r\n";
  Decoded d = decode_all_ways(BodyFraming::chunked, 0, wire, 1 << 20, Trailers{8, 256});
  ASSERT_TRUE(d.ok) << to_string(d.error);
  EXPECT_EQ(d.forwarded, "3\r\nabc\r\n0\r\n\r\n");
  EXPECT_EQ(d.forwarded.find("Content-Length"), std::string::npos);
  EXPECT_EQ(d.trailer_fields, 4u);
}

TEST(BodyDecoder, TrailersOverTheLimitsAreRefused) {
  // A fifth field, over the count.
  chunked_refused("0\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n", Error::trailer_too_large, 1 << 20,
                  kSomeTrailers);
  // One field of 65 bytes with its CRLF, over the bytes.
  chunked_refused("0\r\nX: " + std::string(60, 'v') + "\r\n\r\n", Error::trailer_too_large, 1 << 20,
                  kSomeTrailers);
  // Exactly at both limits is fine: 4 fields, 64 bytes.
  const std::string at_limit =
      "0\r\na: 1\r\nb: 2\r\nc: 3\r\nd: " + std::string(64 - 3 * 6 - 5, 'v') + "\r\n\r\n";
  Decoded d = decode_all_ways(BodyFraming::chunked, 0, at_limit, 1 << 20, kSomeTrailers);
  EXPECT_TRUE(d.ok) << to_string(d.error);
  EXPECT_EQ(d.dropped.size(), 64u);
}

TEST(BodyDecoder, MalformedTrailersAreRefused) {
  const auto refused = [](std::string_view wire) {
    chunked_refused(wire, Error::trailer_syntax, 1 << 20, kSomeTrailers);
  };
  refused("0\r\nX-A: 1\n\r\n");              // a bare LF ends the field
  refused("0\r\nX-A: 1\r\n\n");              // a bare LF for the final line
  refused("0\r\nX-A: 1\rX\r\n\r\n");         // a lone CR
  refused("0\r\nX-A : 1\r\n\r\n");           // whitespace before the colon
  refused("0\r\n X-A: 1\r\n\r\n");           // obs-fold / leading whitespace
  refused("0\r\nX-A: 1\r\n\tmore\r\n\r\n");  // a folded continuation line
  refused("0\r\nno colon\r\n\r\n");
  refused("0\r\nX-A: a\x01b\r\n\r\n");  // a control byte in the value
  refused("0\r\n: empty name\r\n\r\n");
}

TEST(BodyDecoder, ATrailerWithoutTheFinalCrlfIsNotDone) {
  // The upstream stops after a field: the body is not over (the broker cuts
  // the exchange when the connection ends here).
  Decoded d = decode_all_ways(BodyFraming::chunked, 0, "2\r\nok\r\n0\r\nX-A: 1\r\n", 1 << 20, kSomeTrailers);
  EXPECT_TRUE(d.ok);
  EXPECT_FALSE(d.done);
  EXPECT_EQ(d.forwarded, "2\r\nok\r\n0\r\n");
  Decoded half = decode_all_ways(BodyFraming::chunked, 0, "0\r\nX-A: 1\r\n\r", 1 << 20, kSomeTrailers);
  EXPECT_TRUE(half.ok);
  EXPECT_FALSE(half.done);
}

TEST(BodyDecoder, BodyLimitCountsEveryChunk) {
  Decoded ok = decode_all_ways(BodyFraming::chunked, 0, "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 5);
  EXPECT_TRUE(ok.done);
  chunked_refused("3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", Error::body_too_large, 5);
}

TEST(BodyDecoder, FailureIsSticky) {
  BodyDecoder body(BodyFraming::chunked, 0, BodyLimits{});
  EXPECT_FALSE(body.feed(as_bytes("z")).ok());
  auto again = body.feed(as_bytes("5\r\nhello\r\n"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), Error::chunk_size);
}

TEST(BodyDecoder, PayloadIsAViewIntoTheInput) {
  std::string wire = "5\r\nhello\r\n";
  BodyDecoder body(BodyFraming::chunked, 0, BodyLimits{});
  auto step = body.feed(as_bytes(wire));
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->consumed, 8u);
  ASSERT_EQ(step->payload.size(), 5u);
  EXPECT_EQ(reinterpret_cast<const char*>(step->payload.data()), wire.data() + 3);
}

TEST(BodyDecoder, DecodingAllocatesNothing) {
  std::string wire = "5\r\nhello\r\n0\r\n\r\n";
  BodyDecoder body(BodyFraming::chunked, 0, BodyLimits{});
  testing::AllocationCounter allocations;
  auto in = as_bytes(wire);
  while (!in.empty() && !body.done()) {
    auto step = body.feed(in);
    ASSERT_TRUE(step.ok());
    in = in.subspan(step->consumed);
  }
  EXPECT_EQ(allocations.count(), 0);
  EXPECT_TRUE(body.done());
}

TEST(BodyDecoder, ReframedChunksDecodeToTheSameBody) {
  std::string out;
  append_chunk(as_bytes("hello"), out);
  append_chunk(as_bytes(""), out);
  std::string big(300, 'z');
  append_chunk(as_bytes(big), out);
  append_last_chunk(out);
  EXPECT_TRUE(out.starts_with("5\r\nhello\r\n12c\r\n"));
  Decoded d = decode(BodyFraming::chunked, 0, {out});
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.payload, "hello" + big);
}

}  // namespace
}  // namespace abox::base::http1
