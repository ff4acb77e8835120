// Tests for broker/nonce and broker/instance_secret: derivation, the table's
// lookup, the marker search (whole and in pieces), and the secret file's
// checks on a real state folder.

#include "broker/nonce.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "base/byte_reader.h"
#include "broker/instance_secret.h"
#include "policy/policy_file.h"
#include "tests/broker/broker_test_support.h"
#include "tests/support/temp_dir.h"

namespace abox::broker {
namespace {

using base::as_bytes;

constexpr std::string_view kPolicy = R"(
[[broker]]
name = "api.anthropic.com"
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"

[[broker]]
name = "api.openai.com"
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
)";

using broker_test::load;
using broker_test::secret_of;

TEST(Nonce, DerivedNoncesHaveTheirShape) {
  auto p = load(kPolicy);
  auto s = secret_of(1);
  std::string n = derive_nonce(s, p.brokers()[0]);
  EXPECT_EQ(n.size(), kNonceLength);
  EXPECT_TRUE(n.starts_with("abox-nonce-"));
  EXPECT_TRUE(is_nonce_shaped(n));
  EXPECT_EQ(n, derive_nonce(s, p.brokers()[0])) << "derivation is deterministic";
}

TEST(Nonce, DistinctPerInstanceAndPerBinding) {
  auto p = load(kPolicy);
  auto a = secret_of(1);
  auto b = secret_of(2);
  EXPECT_NE(derive_nonce(a, p.brokers()[0]), derive_nonce(a, p.brokers()[1]));
  EXPECT_NE(derive_nonce(a, p.brokers()[0]), derive_nonce(b, p.brokers()[0]));
  // The binding's port and credential are part of it.
  policy::BrokerBinding moved = p.brokers()[0];
  moved.port = 8443;
  EXPECT_NE(derive_nonce(a, moved), derive_nonce(a, p.brokers()[0]));
  policy::BrokerBinding other_key = p.brokers()[0];
  other_key.credential = "anthropic2";
  EXPECT_NE(derive_nonce(a, other_key), derive_nonce(a, p.brokers()[0]));
}

TEST(Nonce, KnownAnswer) {
  // HMAC-SHA256(key = 32 x 0x00, "abox broker nonce v1\0api.anthropic.com\0443\0anthropic"),
  // computed independently with Python's hmac module.
  auto p = load(kPolicy);
  EXPECT_EQ(derive_nonce(secret_of(0), p.brokers()[0]),
            "abox-nonce-28bebc62034b087a4d3621ec907285d483db11d2b32a692891745892a971c44e");
}

TEST(Nonce, TableFindsTheBinding) {
  auto p = load(kPolicy);
  auto s = secret_of(7);
  NonceTable table(s, p.brokers());
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table.binding_of(table.nonce_for(0)), 0u);
  EXPECT_EQ(table.binding_of(table.nonce_for(1)), 1u);
  std::string other = derive_nonce(secret_of(8), p.brokers()[0]);
  EXPECT_FALSE(table.binding_of(other).has_value());
  std::string flipped(table.nonce_for(0));
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  EXPECT_FALSE(table.binding_of(flipped).has_value());
  EXPECT_FALSE(table.binding_of(std::string(table.nonce_for(0)) + "0").has_value());
  EXPECT_FALSE(table.binding_of(table.nonce_for(0).substr(1)).has_value());
  EXPECT_FALSE(table.binding_of("").has_value());
}

TEST(Nonce, Shape) {
  std::string good = "abox-nonce-" + std::string(64, 'a');
  EXPECT_TRUE(is_nonce_shaped(good));
  EXPECT_FALSE(is_nonce_shaped("ABOX-NONCE-" + std::string(64, 'a')));
  EXPECT_FALSE(is_nonce_shaped("abox-nonce-" + std::string(64, 'A')));
  EXPECT_FALSE(is_nonce_shaped("abox-nonce-" + std::string(63, 'a')));
  EXPECT_FALSE(is_nonce_shaped("abox-nonce-" + std::string(63, 'a') + "g"));
  EXPECT_FALSE(is_nonce_shaped(""));
}

TEST(Nonce, MarkerAnywhereInAnyCase) {
  EXPECT_TRUE(looks_like_nonce("abox-nonce-"));
  EXPECT_TRUE(looks_like_nonce("xx ABOX-Nonce-123"));
  EXPECT_TRUE(looks_like_nonce("aabox-nonce-"));  // a restart after a partial match
  EXPECT_TRUE(looks_like_nonce("abox-nonabox-nonce-"));
  EXPECT_FALSE(looks_like_nonce("abox-nonce"));
  EXPECT_FALSE(looks_like_nonce("abox_nonce-"));
  EXPECT_FALSE(looks_like_nonce(""));
}

TEST(Nonce, MarkerPercentEncodedInTargets) {
  EXPECT_TRUE(looks_like_nonce("/v1/x?k=abox%2Dnonce%2dabc", true));
  EXPECT_TRUE(looks_like_nonce("/v1/x?k=%61%62%6f%78-nonce-", true));
  EXPECT_FALSE(looks_like_nonce("/v1/x?k=abox%2Dnonce%2dabc", false));
  EXPECT_FALSE(looks_like_nonce("/v1/x?k=abox%2", true));
  // A stray "%" before a raw marker: decoding "%ab" must not hide it (a fuzzer find).
  EXPECT_TRUE(looks_like_nonce("/v1/x?k=abox%abox-nonce-1", true));
  EXPECT_TRUE(looks_like_nonce("%abox-nonce-", true));
}

TEST(Nonce, ScannerAcrossPieces) {
  std::string body = "{\"prompt\":\"say ABOX-nonce-0123\"}";
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    NonceMarkerScanner scan;
    bool first = scan.feed(as_bytes(std::string_view(body).substr(0, cut)));
    bool second = scan.feed(as_bytes(std::string_view(body).substr(cut)));
    EXPECT_TRUE(second) << "cut at " << cut;
    EXPECT_EQ(first, cut >= body.find("ABOX") + kNoncePrefix.size());
  }
  NonceMarkerScanner clean;
  for (char c : std::string_view("abox-nonc abox-nonc-e abox nonce-")) {
    EXPECT_FALSE(clean.feed(as_bytes(std::string_view(&c, 1))));
  }
  EXPECT_FALSE(clean.found());
}

// The scanner skips from its start state to the next 'a'/'A': it must find
// exactly what a byte-by-byte reading finds (looks_like_nonce without
// decoding is that reading), in bodies made of the marker's own letters in
// both cases, cut anywhere. Bounded: 2000 bodies of up to 64 bytes.
TEST(Nonce, ScannerAgreesWithAByteByByteReadingWhereverItSkips) {
  std::mt19937 rng(19);
  const std::string_view alphabet = "aAbBoOxX-nNcCeE z";
  for (int round = 0; round < 2000; ++round) {
    std::string body(rng() % 65, ' ');
    for (char& c : body) c = alphabet[rng() % alphabet.size()];
    if (round % 4 == 0 && body.size() >= kNoncePrefix.size()) {
      body.replace(rng() % (body.size() - kNoncePrefix.size() + 1), kNoncePrefix.size(),
                   round % 8 == 0 ? "ABOX-NONCE-" : "abox-nonce-");
    }
    const bool expected = looks_like_nonce(body, false);
    const std::size_t cut = body.empty() ? 0 : rng() % (body.size() + 1);
    NonceMarkerScanner scan;
    scan.feed(as_bytes(std::string_view(body).substr(0, cut)));
    EXPECT_EQ(scan.feed(as_bytes(std::string_view(body).substr(cut))), expected) << body << " cut at " << cut;
  }
}

// ---- the secret file ------------------------------------------------------------------

class InstanceSecretFile : public ::testing::Test {
 protected:
  std::string path() const { return dir_.file(InstanceSecret::kFileName); }
  abox::testing::TempDir dir_{"abox-secret-test"};
};

TEST_F(InstanceSecretFile, CreatedOnceThenReadBack) {
  auto first = InstanceSecret::load_or_create(dir_.path());
  ASSERT_TRUE(first.ok()) << first.error();
  struct stat st {};
  ASSERT_EQ(::stat(path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto second = InstanceSecret::load_or_create(dir_.path());
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_TRUE(std::equal(first->bytes().begin(), first->bytes().end(), second->bytes().begin()));
  // Not all zeros: it came from the random source.
  EXPECT_TRUE(
      std::any_of(first->bytes().begin(), first->bytes().end(), [](std::uint8_t b) { return b != 0; }));
}

TEST_F(InstanceSecretFile, TwoInstancesGetDifferentSecrets) {
  auto a = InstanceSecret::load_or_create(dir_.path());
  ASSERT_TRUE(a.ok());
  std::string other = dir_.file("other");
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  auto b = InstanceSecret::load_or_create(other);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(std::equal(a->bytes().begin(), a->bytes().end(), b->bytes().begin()));
}

TEST_F(InstanceSecretFile, RefusesAReadableFile) {
  ASSERT_TRUE(InstanceSecret::load_or_create(dir_.path()).ok());
  ASSERT_EQ(::chmod(path().c_str(), 0640), 0);
  auto r = InstanceSecret::load_or_create(dir_.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("group or others"), std::string::npos) << r.error();
}

TEST_F(InstanceSecretFile, RefusesTheWrongSize) {
  {
    std::ofstream f(path(), std::ios::binary);
    f << "short";
  }
  ASSERT_EQ(::chmod(path().c_str(), 0600), 0);
  auto r = InstanceSecret::load_or_create(dir_.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("32 bytes"), std::string::npos) << r.error();
}

TEST_F(InstanceSecretFile, RefusesASymlink) {
  std::string target = dir_.file("elsewhere");
  {
    std::ofstream f(target, std::ios::binary);
    f << std::string(32, 'k');
  }
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(target.c_str(), path().c_str()), 0);
  auto r = InstanceSecret::load_or_create(dir_.path());
  EXPECT_FALSE(r.ok());
}

TEST_F(InstanceSecretFile, RefusesADirectory) {
  ASSERT_EQ(::mkdir(path().c_str(), 0700), 0);
  EXPECT_FALSE(InstanceSecret::load_or_create(dir_.path()).ok());
}

TEST_F(InstanceSecretFile, MissingFolderIsAnError) {
  auto r = InstanceSecret::load_or_create(dir_.file("missing"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("missing"), std::string::npos);
}

}  // namespace
}  // namespace abox::broker
