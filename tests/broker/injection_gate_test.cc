// Tests for broker/injection_gate and broker/upstream_head: each condition
// failing on its own (everything else right), with its own reason, and the
// head that goes upstream when all hold.

#include "broker/injection_gate.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "base/byte_reader.h"
#include "broker/upstream_head.h"
#include "policy/policy_file.h"
#include "tests/broker/broker_test_support.h"
#include "tests/support/alloc_counter.h"

namespace abox::broker {
namespace {

constexpr std::string_view kPolicy = R"(
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"
methods = ["GET", "POST"]
paths = ["/v1/"]

[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
methods = ["POST"]
paths = ["/v1/chat/", "/v1/responses"]

[[broker]]
name = "ws.example.com"
port = 8443
credential = "ws"
header = "x-token"
nonce_env = "WS_TOKEN"
allow_upgrade = true
)";

constexpr std::string_view kRealKey = "sk-real-0123456789";

using broker_test::load;
using broker_test::secret_of;

class InjectionGateTest : public ::testing::Test {
 protected:
  InjectionGateTest()
      : policy_(load(kPolicy)),
        secret_(secret_of(3)),
        nonces_(secret_, policy_.brokers()),
        gate_(policy_, nonces_) {}

  std::string anthropic_nonce() const { return std::string(nonces_.nonce_for(0)); }
  std::string openai_nonce() const { return std::string(nonces_.nonce_for(1)); }

  // A request that passes for api.anthropic.com, with `extra` header lines
  // and the nonce header replaced when `nonce_line` is given.
  std::string anthropic_request(std::string_view extra = "", std::string_view target = "/v1/messages",
                                std::string nonce_line = "") const {
    if (nonce_line.empty()) nonce_line = "x-api-key: " + anthropic_nonce() + "\r\n";
    return "POST " + std::string(target) + " HTTP/1.1\r\nHost: api.anthropic.com\r\n" + nonce_line +
           std::string(extra) + "Content-Length: 2\r\n\r\n";
  }

  GateDecision decide(const std::string& text, std::string_view sni = "api.anthropic.com",
                      std::uint16_t port = 443) {
    auto r = parse_request_head(base::as_bytes(text), HeadLimits{}, head_);
    EXPECT_TRUE(r.ok() && *r == HeadStatus::complete) << text;
    GateRequest req;
    req.sni = sni;
    req.port = port;
    req.head = &head_;
    req.real_keys = keys_;
    return gate_.decide(req);
  }

  GateReason reason(const std::string& text, std::string_view sni = "api.anthropic.com",
                    std::uint16_t port = 443) {
    return decide(text, sni, port).reason;
  }

  policy::Policy policy_;
  InstanceSecretBytes secret_;
  NonceTable nonces_;
  InjectionGate gate_;
  RequestHead head_;
  std::string_view key_view_ = kRealKey;
  std::span<const std::string_view> keys_{&key_view_, 1};
};

TEST_F(InjectionGateTest, AllowsAWellFormedRequest) {
  GateDecision d = decide(anthropic_request());
  EXPECT_TRUE(d.allowed()) << to_string(d.reason);
  ASSERT_NE(d.binding, nullptr);
  EXPECT_EQ(d.binding->name, "api.anthropic.com");
  EXPECT_EQ(d.key_prefix, "");
}

TEST_F(InjectionGateTest, DecidingAllocatesNothing) {
  std::string text = anthropic_request();
  auto r = parse_request_head(base::as_bytes(text), HeadLimits{}, head_);
  ASSERT_TRUE(r.ok());
  GateRequest req{"api.anthropic.com", 443, &head_, keys_};
  testing::AllocationCounter allocations;
  GateDecision d = gate_.decide(req);
  EXPECT_EQ(allocations.count(), 0);
  EXPECT_TRUE(d.allowed());
}

// 1
TEST_F(InjectionGateTest, SniMustHaveABinding) {
  EXPECT_EQ(reason(anthropic_request(), ""), GateReason::no_sni);
  EXPECT_EQ(reason(anthropic_request(), "evil.example"), GateReason::sni_not_brokered);
  EXPECT_EQ(reason(anthropic_request(), "api.anthropic.com", 8443), GateReason::sni_not_brokered);
  EXPECT_EQ(reason(anthropic_request(), "api anthropic"), GateReason::sni_not_brokered);
  // The SNI is canonicalized: case and one trailing dot do not matter.
  EXPECT_TRUE(decide(anthropic_request(), "API.Anthropic.com.").allowed());
}

// 8
TEST_F(InjectionGateTest, RunningAndNotRevoked) {
  gate_.revoke(0);
  EXPECT_TRUE(gate_.revoked(0));
  EXPECT_EQ(reason(anthropic_request()), GateReason::binding_revoked);
  gate_.restore(0);
  EXPECT_TRUE(decide(anthropic_request()).allowed());
  gate_.revoke(1);
  EXPECT_TRUE(decide(anthropic_request()).allowed()) << "revoking one binding leaves the others";
  gate_.set_running(false);
  EXPECT_EQ(reason(anthropic_request()), GateReason::instance_not_running);
}

// 8: a binding a policy reload removed (binding_reload.h) is refused with
// its own reason, the others untouched; bringing it back restores it.
TEST_F(InjectionGateTest, RemovedByAReload) {
  gate_.set_removed(0, true);
  EXPECT_TRUE(gate_.removed(0));
  EXPECT_EQ(reason(anthropic_request()), GateReason::binding_removed);
  EXPECT_EQ(http_status(GateReason::binding_removed), 403);
  EXPECT_EQ(to_string(GateReason::binding_removed), "binding_removed");
  gate_.set_removed(1, true);
  gate_.set_removed(0, false);
  EXPECT_TRUE(decide(anthropic_request()).allowed()) << "removing one binding leaves the others";
}

// 2
TEST_F(InjectionGateTest, HostMustEqualTheSni) {
  auto with_host = [&](std::string_view host) {
    std::string t = anthropic_request();
    t.replace(t.find("api.anthropic.com\r\n"), 17, host);
    return t;
  };
  EXPECT_EQ(reason(with_host("api.openai.com")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("evil.example")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("api.anthropic.com.")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("api.anthropic.com:444")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("api.anthropic.com:0443")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("api.anthropic.com.evil")), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_host("")), GateReason::host_mismatch);
  EXPECT_TRUE(decide(with_host("API.ANTHROPIC.COM")).allowed());
  EXPECT_TRUE(decide(with_host("api.anthropic.com:443")).allowed());
}

TEST_F(InjectionGateTest, HostCarriesTheNonDefaultPort) {
  std::string nonce(nonces_.nonce_for(2));
  std::string base = "GET /x HTTP/1.1\r\nHost: ws.example.com{PORT}\r\nx-token: " + nonce + "\r\n\r\n";
  auto with_port = [&](std::string_view p) {
    std::string t = base;
    t.replace(t.find("{PORT}"), 6, p);
    return t;
  };
  EXPECT_TRUE(decide(with_port(":8443"), "ws.example.com", 8443).allowed());
  EXPECT_EQ(reason(with_port(""), "ws.example.com", 8443), GateReason::host_mismatch);
  EXPECT_EQ(reason(with_port(":443"), "ws.example.com", 8443), GateReason::host_mismatch);
}

// 3
TEST_F(InjectionGateTest, MethodAndPathFromTheBinding) {
  std::string get = anthropic_request();
  get.replace(0, 4, "GET");
  EXPECT_TRUE(decide(get).allowed());
  std::string put = anthropic_request();
  put.replace(0, 4, "PUT");
  EXPECT_EQ(reason(put), GateReason::method_not_allowed);
  std::string lower = anthropic_request();
  lower.replace(0, 4, "post");
  EXPECT_EQ(reason(lower), GateReason::method_not_allowed);
  EXPECT_EQ(reason(anthropic_request("", "/v2/messages")), GateReason::path_not_allowed);
  EXPECT_EQ(reason(anthropic_request("", "/v1")), GateReason::path_not_allowed);
  EXPECT_EQ(reason(anthropic_request("", "/")), GateReason::path_not_allowed);
  EXPECT_EQ(reason(anthropic_request("", "/V1/messages")), GateReason::path_not_allowed);
  // The query is not part of the path.
  EXPECT_EQ(reason(anthropic_request("", "/x?/v1/")), GateReason::path_not_allowed);
  EXPECT_TRUE(decide(anthropic_request("", "/v1/messages?stream=true")).allowed());
}

TEST_F(InjectionGateTest, UpgradeOnlyWhereAllowed) {
  EXPECT_EQ(reason(anthropic_request("Upgrade: websocket\r\nConnection: Upgrade\r\n")),
            GateReason::upgrade_not_allowed);
  EXPECT_EQ(reason(anthropic_request("Connection: upgrade\r\n")), GateReason::upgrade_not_allowed);
  std::string nonce(nonces_.nonce_for(2));
  std::string ws =
      "GET /socket HTTP/1.1\r\nHost: ws.example.com:8443\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "x-token: " +
      nonce + "\r\n\r\n";
  EXPECT_TRUE(decide(ws, "ws.example.com", 8443).allowed());
}

// 4
TEST_F(InjectionGateTest, NonceExactlyOnceInTheBindingsHeader) {
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "X-Other: 1\r\n")), GateReason::nonce_missing);
  EXPECT_EQ(reason(anthropic_request("x-api-key: " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_duplicate);
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: sk-guess\r\n")),
            GateReason::nonce_malformed);
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: Bearer " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_malformed);
  std::string upper = anthropic_nonce();
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: " + upper + "\r\n")),
            GateReason::nonce_malformed);
  // The header name is matched in any case.
  EXPECT_TRUE(
      decide(anthropic_request("", "/v1/messages", "X-Api-Key: " + anthropic_nonce() + "\r\n")).allowed());
}

TEST_F(InjectionGateTest, NonceOfAnotherBindingOrInstance) {
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: " + openai_nonce() + "\r\n")),
            GateReason::nonce_other_binding);
  std::string other_instance = derive_nonce(secret_of(4), policy_.brokers()[0]);
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: " + other_instance + "\r\n")),
            GateReason::nonce_unknown);
  std::string forged = "abox-nonce-" + std::string(64, '0');
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages", "x-api-key: " + forged + "\r\n")),
            GateReason::nonce_unknown);
}

TEST_F(InjectionGateTest, BearerNonceInAnAuthorizationBinding) {
  auto openai = [&](std::string_view auth) {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: " +
           std::string(auth) + "\r\nContent-Length: 2\r\n\r\n";
  };
  GateDecision d = decide(openai("Bearer " + openai_nonce()), "api.openai.com");
  EXPECT_TRUE(d.allowed()) << to_string(d.reason);
  EXPECT_EQ(d.key_prefix, "Bearer ");
  d = decide(openai("bearer " + openai_nonce()), "api.openai.com");
  EXPECT_TRUE(d.allowed());
  EXPECT_EQ(d.key_prefix, "Bearer ");
  d = decide(openai(openai_nonce()), "api.openai.com");
  EXPECT_TRUE(d.allowed());
  EXPECT_EQ(d.key_prefix, "");
  EXPECT_EQ(decide(openai("Basic " + openai_nonce()), "api.openai.com").reason, GateReason::nonce_malformed);
  EXPECT_EQ(decide(openai("Bearer  " + openai_nonce()), "api.openai.com").reason,
            GateReason::nonce_malformed);
  EXPECT_EQ(decide(openai("Bearer " + anthropic_nonce()), "api.openai.com").reason,
            GateReason::nonce_other_binding);
}

// 4, the other standard place: today's SDKs (@anthropic-ai/sdk 1.x, openai)
// send a key as "Authorization: Bearer"; 0.x sent x-api-key.
TEST_F(InjectionGateTest, BearerNonceInAuthorizationForAnotherBindingsHeader) {
  auto bearer_only = [&](std::string_view auth, std::string_view extra = "") {
    return anthropic_request(extra, "/v1/messages", "Authorization: " + std::string(auth) + "\r\n");
  };
  for (std::string_view scheme : {"Bearer ", "bearer ", "BEARER "}) {
    GateDecision d = decide(bearer_only(std::string(scheme) + anthropic_nonce()));
    EXPECT_TRUE(d.allowed()) << scheme << to_string(d.reason);
    EXPECT_EQ(d.key_prefix, "") << "the key goes in x-api-key, the binding's form";
  }
  // The key goes upstream in the binding's header, and authorization is not passed on.
  const std::string text = bearer_only("Bearer " + anthropic_nonce());  // head_ points into it
  ASSERT_TRUE(decide(text).allowed());
  std::string out;
  write_upstream_head(head_, KeyPlacement{"x-api-key", ""}, kRealKey, out);
  EXPECT_NE(out.find("\r\nx-api-key: sk-real-0123456789\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("uthorization"), std::string::npos) << out;
  EXPECT_EQ(out.find("abox-nonce-"), std::string::npos) << out;
  // Only the Bearer scheme, and a nonce after it, this binding's.
  EXPECT_EQ(reason(bearer_only(anthropic_nonce())), GateReason::nonce_malformed);
  EXPECT_EQ(reason(bearer_only("Basic Zm9vOmJhcg==")), GateReason::nonce_missing);
  EXPECT_EQ(reason(bearer_only("Bearer sk-guess")), GateReason::nonce_malformed);
  EXPECT_EQ(reason(bearer_only("Bearer " + openai_nonce())), GateReason::nonce_other_binding);
  EXPECT_EQ(reason(bearer_only("Bearer abox-nonce-" + std::string(64, '0'))), GateReason::nonce_unknown);
  // Once: two authorization fields, or both places at once, are refused.
  EXPECT_EQ(reason(bearer_only("Bearer " + anthropic_nonce(),
                               "Authorization: Bearer " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_duplicate);
  EXPECT_EQ(reason(anthropic_request("Authorization: Bearer " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_duplicate);
  EXPECT_EQ(reason(anthropic_request("authorization: Bearer " + openai_nonce() + "\r\n")),
            GateReason::nonce_duplicate);
  // A guest credential of another kind beside the binding's header is only dropped.
  EXPECT_TRUE(decide(anthropic_request("Authorization: Basic Zm9vOmJhcg==\r\n")).allowed());
  // Condition 5 still holds for the other fields.
  EXPECT_EQ(reason(bearer_only("Bearer " + anthropic_nonce(), "Cookie: k=" + anthropic_nonce() + "\r\n")),
            GateReason::nonce_in_other_header);
  EXPECT_EQ(reason(bearer_only("Bearer " + anthropic_nonce(),
                               "Proxy-Authorization: Bearer " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_in_other_header);
  // An authorization binding has no other place: its nonce in x-api-key is missing.
  std::string openai =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nx-api-key: " + openai_nonce() +
      "\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(reason(openai, "api.openai.com"), GateReason::nonce_missing);
}

// 5
TEST_F(InjectionGateTest, NonceInAnotherHeader) {
  EXPECT_EQ(reason(anthropic_request("Proxy-Authorization: Bearer " + anthropic_nonce() + "\r\n")),
            GateReason::nonce_in_other_header);
  EXPECT_EQ(reason(anthropic_request("Cookie: k=" + anthropic_nonce() + "\r\n")),
            GateReason::nonce_in_other_header);
  EXPECT_EQ(reason(anthropic_request("X-Debug: ABOX-NONCE-zzz\r\n")), GateReason::nonce_in_other_header);
  EXPECT_EQ(reason(anthropic_request("abox-nonce-x: 1\r\n")), GateReason::nonce_in_other_header);
}

TEST_F(InjectionGateTest, NonceInTheTarget) {
  EXPECT_EQ(reason(anthropic_request("", "/v1/messages?key=" + anthropic_nonce())),
            GateReason::nonce_in_target);
  EXPECT_EQ(reason(anthropic_request("", "/v1/abox-nonce-" + std::string(64, 'a'))),
            GateReason::nonce_in_target);
  EXPECT_EQ(reason(anthropic_request("", "/v1/x?k=abox%2dnonce%2D1")), GateReason::nonce_in_target);
}

TEST_F(InjectionGateTest, RealKeyFromTheGuest) {
  EXPECT_EQ(reason(anthropic_request("X-Goog-Api-Key: " + std::string(kRealKey) + "\r\n")),
            GateReason::real_key_in_request);
  EXPECT_EQ(reason(anthropic_request("X-Other: Bearer " + std::string(kRealKey) + "\r\n")),
            GateReason::real_key_in_request);
  keys_ = {};
  EXPECT_TRUE(decide(anthropic_request("X-Goog-Api-Key: " + std::string(kRealKey) + "\r\n")).allowed())
      << "without keys, condition 5's key check is skipped";
}

TEST_F(InjectionGateTest, ConditionOrder) {
  // Everything wrong at once: the first condition in order is the reason.
  std::string bad = "PUT /admin HTTP/1.1\r\nHost: evil.example\r\nCookie: abox-nonce-1\r\n\r\n";
  EXPECT_EQ(reason(bad, "evil.example"), GateReason::sni_not_brokered);
  gate_.set_running(false);
  EXPECT_EQ(reason(bad), GateReason::instance_not_running);
  gate_.set_running(true);
  EXPECT_EQ(reason(bad), GateReason::host_mismatch);
}

TEST_F(InjectionGateTest, EveryReasonHasANameASentenceAndAStatus) {
  for (int r = 0; r <= static_cast<int>(GateReason::upstream_content_encoding); ++r) {
    auto reason_code = static_cast<GateReason>(r);
    EXPECT_NE(to_string(reason_code), "unknown");
    EXPECT_NE(describe(reason_code), "unknown reason");
    int status = http_status(reason_code);
    EXPECT_TRUE(status == 200 || status == 403 || status == 502);
  }
  EXPECT_EQ(http_status(GateReason::host_mismatch), 403);
  EXPECT_EQ(http_status(GateReason::upstream_tls_unverified), 502);
  EXPECT_EQ(http_status(GateReason::upstream_content_encoding), 502);
}

// ---- the head that goes upstream ---------------------------------------------------------

TEST_F(InjectionGateTest, UpstreamHeadDropsGuestCredentialsAndAddsTheKey) {
  std::string text =
      "POST /v1/messages HTTP/1.1\r\n"
      "Host: api.anthropic.com\r\n"
      "X-API-KEY: " +
      anthropic_nonce() +
      "\r\n"
      "authorization: Basic Zm9vOmJhcg==\r\n"
      "Proxy-Authorization: x\r\n"
      "COOKIE: session=1\r\n"
      "anthropic-version: 2023-06-01\r\n"
      "Transfer-Encoding: chunked\r\n"
      "\r\n";
  GateDecision d = decide(text);
  ASSERT_TRUE(d.allowed()) << to_string(d.reason);
  std::string out;
  write_upstream_head(head_, KeyPlacement{d.binding->header, d.key_prefix}, kRealKey, out);
  EXPECT_EQ(out,
            "POST /v1/messages HTTP/1.1\r\n"
            "Host: api.anthropic.com\r\n"
            "anthropic-version: 2023-06-01\r\n"
            "Transfer-Encoding: chunked\r\n"
            "Accept-Encoding: identity\r\n"
            "x-api-key: sk-real-0123456789\r\n"
            "\r\n");
  // The upstream head is itself a valid head, with the key exactly once.
  RequestHead reparsed;
  auto r = parse_request_head(base::as_bytes(out), HeadLimits{}, reparsed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(reparsed.count("x-api-key"), 1u);
  EXPECT_EQ(reparsed.find("x-api-key")->value, kRealKey);
  EXPECT_EQ(out.find("abox-nonce-"), std::string::npos);
  wipe_string(out);
  EXPECT_TRUE(out.empty());
}

TEST_F(InjectionGateTest, UpstreamHeadWithABearerKey) {
  std::string text = "POST /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer " +
                     openai_nonce() + "\r\nContent-Length: 2\r\n\r\n";
  GateDecision d = decide(text, "api.openai.com");
  ASSERT_TRUE(d.allowed()) << to_string(d.reason);
  std::string out;
  write_upstream_head(head_, KeyPlacement{d.binding->header, d.key_prefix}, kRealKey, out);
  EXPECT_EQ(out,
            "POST /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\nContent-Length: 2\r\n"
            "Accept-Encoding: identity\r\nauthorization: Bearer sk-real-0123456789\r\n\r\n");
}

TEST(UpstreamHead, GuestCredentialHeadersInAnySpelling) {
  for (auto name :
       {"Authorization", "AUTHORIZATION", "proxy-authorization", "X-Api-Key", "cookie", "Cookie"}) {
    EXPECT_TRUE(is_guest_credential_header(name)) << name;
  }
  for (auto name : {"authorization2", "x-api-keys", "set-cookie", "cookies", ""}) {
    EXPECT_FALSE(is_guest_credential_header(name)) << name;
  }
}

TEST(UpstreamHead, WipeClearsTheWholeCapacity) {
  std::string s(100, 'k');
  s.resize(10);
  const char* data = s.data();
  wipe_string(s);
  EXPECT_TRUE(s.empty());
  // Same buffer (clear keeps the capacity), and none of the old bytes remain.
  ASSERT_EQ(s.data(), data);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(data[i], '\0') << i;
}

}  // namespace
}  // namespace abox::broker
