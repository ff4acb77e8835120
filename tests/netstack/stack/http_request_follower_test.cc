// Tests for netstack/stack/http_request_follower: every request of a followed flow
// is found, whatever the pieces the bytes come in. Each stream is fed whole,
// in every two-piece split, and a byte at a time, and must give the same
// Hosts at the same offsets (the offset is where the head ends, so that the
// caller can hold those bytes back) and the same refusal.

#include "netstack/stack/http_request_follower.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/alloc_counter.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kLimit = 4096;  // the policy's default peek_bytes

using Bytes = std::vector<std::uint8_t>;

Bytes bytes_of(std::string_view s) {
  return {s.begin(), s.end()};
}

// What following a stream gives: each request's Host and the offset right
// after its head, and the refusal if any (with the offset it came at).
struct Followed {
  std::vector<std::pair<std::string, std::size_t>> requests;
  bool refused = false;
  FollowError error = FollowError::none;
  base::http1::Error http = base::http1::Error::none;
  std::size_t refused_at = 0;  // bytes consumed before the refusal
  bool opaque = false;
  bool operator==(const Followed&) const = default;
};

std::string show(const Followed& f) {
  std::string s;
  for (const auto& [name, at] : f.requests) s += name + "@" + std::to_string(at) + " ";
  if (f.refused) {
    FollowStep step;
    step.error = f.error;
    step.http = f.http;
    s += "refused@" + std::to_string(f.refused_at) + ": " + describe(step);
  }
  if (f.opaque) s += " opaque";
  return s;
}

// Feeds `pieces` (cuts of `stream` at the given offsets) as a flow would.
Followed follow(const Bytes& stream, const std::vector<std::size_t>& cuts) {
  HttpRequestFollower follower(kLimit);
  Followed out;
  std::size_t offset = 0;
  std::size_t start = 0;
  auto feed_piece = [&](std::span<const std::uint8_t> in) {
    while (!in.empty()) {
      const FollowStep step = follower.feed(in);
      if (step.kind == FollowStep::Kind::refused) {
        out.refused = true;
        out.error = step.error;
        out.http = step.http;
        out.refused_at = offset;
        EXPECT_EQ(step.consumed, 0u);
        return false;
      }
      EXPECT_GT(step.consumed, 0u) << "no progress at " << offset;
      if (step.consumed == 0) return false;
      offset += step.consumed;
      // The ClientHello of a TLS upgrade is reported with the whole piece it
      // ends in (what follows is TLS, never read): its offset depends on
      // the cut, so it is recorded as 0.
      if (step.kind == FollowStep::Kind::request)
        out.requests.emplace_back(step.name.str(), follower.opaque() ? 0 : offset);
      in = in.subspan(step.consumed);
    }
    return true;
  };
  for (std::size_t cut : cuts) {
    if (!feed_piece(std::span(stream).subspan(start, cut - start))) return out;
    start = cut;
  }
  if (feed_piece(std::span(stream).subspan(start))) out.opaque = follower.opaque();
  return out;
}

// The stream fed whole, in every two-piece split and a byte at a time: all
// must agree. A refusal may come earlier in bytes read but never at another
// request, so the comparison is on what was found.
Followed follow_every_way(const Bytes& stream) {
  const Followed whole = follow(stream, {});
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  auto same_as_whole = [&](const Followed& f, const std::string& how) {
    EXPECT_EQ(f.requests, whole.requests) << how << ": " << show(f) << " vs " << show(whole);
    EXPECT_EQ(f.refused, whole.refused) << how << ": " << show(f) << " vs " << show(whole);
    EXPECT_EQ(f.error, whole.error) << how << ": " << show(f) << " vs " << show(whole);
    EXPECT_EQ(f.http, whole.http) << how << ": " << show(f) << " vs " << show(whole);
    EXPECT_EQ(f.opaque, whole.opaque) << how;
  };
  same_as_whole(follow(stream, every), "byte by byte");
  for (std::size_t i = 1; i < stream.size(); ++i)
    same_as_whole(follow(stream, {i}), "cut at " + std::to_string(i));
  return whole;
}

Followed follow_every_way(std::string_view text) {
  return follow_every_way(bytes_of(text));
}

std::vector<std::string> hosts(const Followed& f) {
  std::vector<std::string> out;
  for (const auto& r : f.requests) out.push_back(r.first);
  return out;
}

using Names = std::vector<std::string>;

TEST(HttpRequestFollower, OneRequest) {
  const std::string_view text = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
  const Followed f = follow_every_way(text);
  ASSERT_EQ(f.requests.size(), 1u) << show(f);
  EXPECT_EQ(f.requests[0], (std::pair<std::string, std::size_t>{"a.example", text.size()}));
  EXPECT_FALSE(f.refused);
}

// Issue 15: a second request on a kept-alive connection, or one pipelined
// behind the first, named another host and was never read.
TEST(HttpRequestFollower, EveryPipelinedRequestIsFound) {
  const std::string first = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
  const std::string second = "GET /secret HTTP/1.1\r\nHost: denied.example\r\nConnection: keep-alive\r\n\r\n";
  const Followed f = follow_every_way(first + second);
  ASSERT_EQ(f.requests.size(), 2u) << show(f);
  EXPECT_EQ(f.requests[0].second, first.size());
  EXPECT_EQ(f.requests[1],
            (std::pair<std::string, std::size_t>{"denied.example", first.size() + second.size()}));
}

std::string hex(std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[n % 16]);
    n /= 16;
  } while (n != 0);
  return out;
}

TEST(HttpRequestFollower, BehindAnEmptyPostAndAContentLengthBody) {
  const std::string body = "GET / HTTP/1.1\r\nHost: hidden.example\r\n\r\n";  // a body that looks like a head
  const std::string text =
      "POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: b.example\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body + "GET / HTTP/1.1\r\nHost: c.example\r\n\r\n";
  const Followed f = follow_every_way(text);
  EXPECT_FALSE(f.refused) << show(f);
  EXPECT_EQ(hosts(f), (Names{"a.example", "b.example", "c.example"}));
}

TEST(HttpRequestFollower, ChunkedBodiesWithExtensionsAndTrailers) {
  const std::string hidden = "GET / HTTP/1.1\r\nHost: hidden.example\r\n\r\n";
  const std::string text =
      "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nHost:\r\n" +
      hex(hidden.size()) + "\r\n" + hidden +
      "\r\n"
      "0\r\nX-Trailer: yes\r\n\r\n"
      "GET / HTTP/1.1\r\nHost: b.example\r\n\r\n";
  const Followed f = follow_every_way(text);
  EXPECT_FALSE(f.refused) << show(f);
  EXPECT_EQ(hosts(f), (Names{"a.example", "b.example"}));
}

TEST(HttpRequestFollower, HttpTenAndSpellingsOfTheHost) {
  const std::string text =
      "GET / HTTP/1.0\r\nHost: A.Example.\r\nConnection: keep-alive\r\n\r\n"
      "OPTIONS * HTTP/1.1\r\nHost:  b.example:8080 \r\n\r\n";
  EXPECT_EQ(hosts(follow_every_way(text)), (Names{"a.example", "b.example"}));
}

struct Refusal {
  const char* what;
  std::string stream;  // a good request, then the bad one
  FollowError error;
  base::http1::Error http = base::http1::Error::none;
};

TEST(HttpRequestFollower, WhatCannotBeFollowedIsRefused) {
  using E = base::http1::Error;
  const std::string ok = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
  const std::vector<Refusal> cases = {
      {"unknown coding", ok + "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n",
       FollowError::head, E::transfer_encoding},
      {"a coding list", ok + "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
       FollowError::head, E::transfer_encoding},
      {"both framings",
       ok + "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       FollowError::head, E::length_and_chunked},
      {"two lengths",
       ok + "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
       FollowError::head, E::duplicate_content_length},
      {"chunked in 1.0", ok + "POST / HTTP/1.0\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n",
       FollowError::head, E::transfer_encoding},
      {"bare LF", ok + "GET / HTTP/1.1\nHost: b.example\n\n", FollowError::head, E::line_ending},
      // Refused when the byte arrives, however the head is cut, with no LF
      // after it (found by the http_follower fuzz target).
      {"NUL, no LF after it", ok + std::string("GET / HTTP/1.1\r\nX: a\0bcdefgh", 28), FollowError::head,
       E::control_byte},
      {"lone CR, no LF after it", ok + "GET / HTTP/1.1\r\nX: a\rbcdefgh", FollowError::head, E::line_ending},
      {"obs-fold", ok + "GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\r\n 2\r\n\r\n", FollowError::head,
       E::obs_fold},
      {"two hosts", ok + "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", FollowError::head,
       E::duplicate_host},
      {"no host", ok + "GET / HTTP/1.1\r\nX: 1\r\n\r\n", FollowError::head, E::missing_host},
      {"absolute-form", ok + "GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", FollowError::head,
       E::absolute_form},
      {"CONNECT", ok + "CONNECT b.example:443 HTTP/1.1\r\nHost: b.example\r\n\r\n", FollowError::head,
       E::connect_method},
      {"HTTP/2 preface", ok + "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", FollowError::head, E::version},
      {"junk between requests", ok + "\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n", FollowError::head,
       E::request_line},
      {"TLS without an upgrade", ok + "\x16\x03\x01\x00\x05hello", FollowError::head, E::control_byte},
      {"IP literal", ok + "GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", FollowError::host},
      {"bad port", ok + "GET / HTTP/1.1\r\nHost: a.example:0\r\n\r\n", FollowError::host},
      {"websocket",
       ok + "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
       FollowError::upgrade},
      {"h2c",
       ok +
           "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n",
       FollowError::upgrade},
      {"TLS or h2c", ok + "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: TLS/1.0, h2c\r\n\r\n",
       FollowError::upgrade},
      {"two upgrade fields",
       ok + "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: TLS/1.0\r\nUpgrade: TLS/1.2\r\n\r\n",
       FollowError::upgrade},
      {"Connection: upgrade alone", ok + "GET / HTTP/1.1\r\nHost: a.example\r\nConnection: upgrade\r\n\r\n",
       FollowError::upgrade},
      {"bad chunk size",
       ok + "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: "
            "chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
       FollowError::body, E::chunk_size},
      {"chunk data not followed by CRLF",
       ok +
           "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!\r\n0\r\n\r\n",
       FollowError::body, E::chunk_crlf},
  };
  for (const auto& c : cases) {
    const Followed f = follow_every_way(c.stream);
    EXPECT_TRUE(f.refused) << c.what << ": " << show(f);
    EXPECT_EQ(f.error, c.error) << c.what << ": " << show(f);
    EXPECT_EQ(f.http, c.http) << c.what << ": " << show(f);
    // The head whose body breaks the rules was read (and checked) first.
    const Names want = c.error == FollowError::body ? Names{"a.example", "a.example"} : Names{"a.example"};
    EXPECT_EQ(hosts(f), want) << c.what << ": " << show(f);
  }
}

TEST(HttpRequestFollower, HeadsAreBoundedByTheLimit) {
  std::string big = "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + std::string(kLimit, 'x') + "\r\n\r\n";
  Followed f = follow_every_way("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n" + big);
  EXPECT_TRUE(f.refused);
  EXPECT_EQ(f.http, base::http1::Error::head_too_large);
  std::string many = "GET / HTTP/1.1\r\nHost: a.example\r\n";
  for (std::size_t i = 0; i < kMaxRequestFields; ++i) many += "X: 1\r\n";
  f = follow(bytes_of(many + "\r\n"), {});
  EXPECT_EQ(f.http, base::http1::Error::too_many_fields) << show(f);
}

TEST(HttpRequestFollower, ARefusalStays) {
  HttpRequestFollower follower(kLimit);
  const Bytes bad = bytes_of("GET / HTTP/1.1\nHost: a.example\n\n");
  const FollowStep first = follower.feed(bad);
  ASSERT_EQ(first.kind, FollowStep::Kind::refused);
  const Bytes good = bytes_of("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
  const FollowStep again = follower.feed(good);
  EXPECT_EQ(again.kind, FollowStep::Kind::refused);
  EXPECT_EQ(again.consumed, 0u);
  EXPECT_EQ(again.http, first.http);
}

// Bodies are counted, not read: each piece of a large body is taken whole in
// one step, and nothing is allocated for it.
TEST(HttpRequestFollower, BodiesAreCountedInWholePieces) {
  HttpRequestFollower follower(kLimit);
  const Bytes head = bytes_of("PUT /big HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1048576\r\n\r\n");
  ASSERT_EQ(follower.feed(head).kind, FollowStep::Kind::request);
  const Bytes piece(65536, 'G');
  testing::AllocationCounter allocations;
  for (int i = 0; i < 16; ++i) {
    const FollowStep step = follower.feed(piece);
    ASSERT_EQ(step.kind, FollowStep::Kind::more);
    ASSERT_EQ(step.consumed, piece.size());
  }
  EXPECT_EQ(allocations.count(), 0);
  const FollowStep next = follower.feed(bytes_of("GET / HTTP/1.1\r\nHost: b.example\r\n\r\n"));
  EXPECT_EQ(next.kind, FollowStep::Kind::request);
  EXPECT_EQ(next.name.view(), "b.example");
}

// A minimal TLS 1.2-style ClientHello in one record naming `sni`.
Bytes client_hello(std::string_view sni) {
  Bytes ext;
  auto put16 = [](Bytes& b, std::size_t v) {
    b.push_back(static_cast<std::uint8_t>(v >> 8));
    b.push_back(static_cast<std::uint8_t>(v));
  };
  put16(ext, 0);  // server_name
  put16(ext, sni.size() + 5);
  put16(ext, sni.size() + 3);
  ext.push_back(0);
  put16(ext, sni.size());
  ext.insert(ext.end(), sni.begin(), sni.end());
  Bytes body = {0x03, 0x03};
  body.insert(body.end(), 32, 0xab);  // random
  body.push_back(0);                  // session id
  put16(body, 2);
  put16(body, 0xc02f);
  body.push_back(1);
  body.push_back(0);
  put16(body, ext.size());
  body.insert(body.end(), ext.begin(), ext.end());
  Bytes hs = {1, 0, static_cast<std::uint8_t>(body.size() >> 8), static_cast<std::uint8_t>(body.size())};
  hs.insert(hs.end(), body.begin(), body.end());
  Bytes rec = {0x16, 0x03, 0x01};
  put16(rec, hs.size());
  rec.insert(rec.end(), hs.begin(), hs.end());
  return rec;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::string kTlsUpgrade =
    "OPTIONS * HTTP/1.1\r\nHost: a.example\r\nUpgrade: TLS/1.0\r\nConnection: Upgrade\r\n\r\n";

TEST(HttpRequestFollower, AnUpgradeToTlsOnTheSameName) {
  const Bytes hello = client_hello("a.example");
  const Bytes stream = cat(cat(bytes_of(kTlsUpgrade), hello), Bytes(100, 0x17));  // then TLS records
  const Followed f = follow_every_way(stream);
  ASSERT_EQ(f.requests.size(), 2u) << show(f);
  EXPECT_EQ(f.requests[1].first, "a.example");
  EXPECT_TRUE(f.opaque);
  EXPECT_FALSE(f.refused);
}

TEST(HttpRequestFollower, AnUpgradeToTlsOnAnotherNameIsRefused) {
  const Followed f = follow_every_way(cat(bytes_of(kTlsUpgrade), client_hello("b.example")));
  EXPECT_TRUE(f.refused) << show(f);
  EXPECT_EQ(f.error, FollowError::tls_upgrade);
  EXPECT_EQ(hosts(f), (Names{"a.example"}));
}

TEST(HttpRequestFollower, ADeclinedUpgradeGoesOnAsHttp) {
  const Followed f = follow_every_way(kTlsUpgrade + "GET / HTTP/1.1\r\nHost: b.example\r\n\r\n");
  EXPECT_EQ(hosts(f), (Names{"a.example", "b.example"}));
  EXPECT_FALSE(f.opaque);
  // And TLS without an upgrade just before is not followed.
  const Followed g = follow_every_way(
      cat(bytes_of(kTlsUpgrade + "GET / HTTP/1.1\r\nHost: b.example\r\n\r\n"), client_hello("a.example")));
  EXPECT_TRUE(g.refused);
  EXPECT_EQ(g.error, FollowError::head);
}

TEST(HttpRequestFollower, TlsProtocolSpellings) {
  for (std::string_view upgrade : {"TLS", "tls/1.2", "TLS/1.0, TLS/1.1"}) {
    const std::string text =
        "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: " + std::string(upgrade) + "\r\n\r\n";
    const Followed f = follow(bytes_of(text), {});
    EXPECT_FALSE(f.refused) << upgrade << ": " << show(f);
  }
  for (std::string_view upgrade : {"TLSX", "TLS/", "TLS/1.0a", "", "TLS/1.0,", "SSL/3.0"}) {
    const std::string text =
        "GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: " + std::string(upgrade) + "\r\n\r\n";
    const Followed f = follow(bytes_of(text), {});
    EXPECT_TRUE(f.refused) << upgrade;
    EXPECT_EQ(f.error, FollowError::upgrade) << upgrade;
  }
}

}  // namespace
}  // namespace abox::netstack
