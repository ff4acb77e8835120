// write_upstream_head's hop-by-hop handling (the rest is in
// injection_gate_test.cc, next to the gate that allows a head).
#include "broker/upstream_head.h"

#include <gtest/gtest.h>

#include <string>

#include "base/byte_reader.h"

namespace abox::broker {
namespace {

RequestHead parse_ok(const std::string& text) {
  RequestHead head;
  auto r = parse_request_head(base::as_bytes(text), HeadLimits{}, head);
  EXPECT_TRUE(r.ok() && *r == HeadStatus::complete) << text;
  return head;
}

TEST(UpstreamHead, HopByHopHeadersAreTheBrokersOwn) {
  std::string text =
      "POST /v1/m HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n"
      "Proxy-Connection: keep-alive\r\nTE: trailers\r\nx-api-key: n\r\nContent-Length: 0\r\n\r\n";
  RequestHead head = parse_ok(text);
  std::string out;
  write_upstream_head(head, KeyPlacement{"x-api-key", ""}, "sk", out);
  EXPECT_EQ(out,
            "POST /v1/m HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nAccept-Encoding: identity\r\n"
            "x-api-key: sk\r\n\r\n");
}

TEST(UpstreamHead, AnUpgradeKeepsItsUpgradeAndSaysSo) {
  std::string text =
      "GET /v1/ws HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
      "x-api-key: n\r\n\r\n";
  RequestHead head = parse_ok(text);
  std::string out;
  write_upstream_head(head, KeyPlacement{"x-api-key", ""}, "sk", out);
  EXPECT_EQ(out,
            "GET /v1/ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
            "Accept-Encoding: identity\r\nx-api-key: sk\r\n\r\n");
  EXPECT_TRUE(parse_ok(out).wants_upgrade());
}

TEST(UpstreamHead, TheProviderIsAskedForNoContentCoding) {
  // A gzip body would hide an echoed key from the scrubber, not from the guest.
  std::string text =
      "POST /v1/m HTTP/1.1\r\nHost: a.test\r\naccept-ENCODING: gzip, deflate, br\r\nAccept-Encoding: zstd\r\n"
      "x-api-key: n\r\nContent-Length: 0\r\n\r\n";
  RequestHead head = parse_ok(text);
  std::string out;
  write_upstream_head(head, KeyPlacement{"x-api-key", ""}, "sk", out);
  EXPECT_EQ(out,
            "POST /v1/m HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nAccept-Encoding: identity\r\n"
            "x-api-key: sk\r\n\r\n");
}

TEST(UpstreamHead, NoWebSocketExtensionIsOffered) {
  // permessage-deflate would compress the tunnel past the scrubber's sight.
  std::string text =
      "GET /v1/ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nSec-WebSocket-Key: abc=\r\n"
      "x-api-key: n\r\n\r\n";
  RequestHead head = parse_ok(text);
  std::string out;
  write_upstream_head(head, KeyPlacement{"x-api-key", ""}, "sk", out);
  EXPECT_EQ(out.find("xtensions"), std::string::npos) << out;
  EXPECT_NE(out.find("Sec-WebSocket-Key: abc=\r\n"), std::string::npos) << out;
}

TEST(UpstreamHead, HopByHopNamesInAnySpelling) {
  for (auto name : {"Connection", "KEEP-ALIVE", "proxy-connection", "TE"})
    EXPECT_TRUE(is_hop_by_hop_header(name));
  for (auto name : {"connections", "upgrade", "tee", "x-connection"})
    EXPECT_FALSE(is_hop_by_hop_header(name));
}

}  // namespace
}  // namespace abox::broker
