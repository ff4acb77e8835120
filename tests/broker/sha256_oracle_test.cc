// base/sha256 (written for the static box-guest, which has no BoringSSL)
// against BoringSSL's SHA-256 and HMAC on random inputs of every length
// around the block and padding boundaries.
#include <gtest/gtest.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <vector>

#include "base/random.h"
#include "base/sha256.h"

namespace abox::base {
namespace {

TEST(Sha256Oracle, MatchesBoringSslOnRandomInputs) {
  SeededRandom random(42);
  for (std::size_t len = 0; len < 300; ++len) {
    std::vector<std::uint8_t> msg(len), key(len % 100);
    for (auto& b : msg) b = static_cast<std::uint8_t>(random.next_u64());
    for (auto& b : key) b = static_cast<std::uint8_t>(random.next_u64());

    Sha256Digest want{};
    SHA256(msg.data(), msg.size(), want.data());
    ASSERT_EQ(sha256(msg), want) << len;

    unsigned out_len = 0;
    Sha256Digest want_mac{};
    HMAC(EVP_sha256(), key.data(), key.size(), msg.data(), msg.size(), want_mac.data(), &out_len);
    ASSERT_EQ(out_len, 32u);
    ASSERT_EQ(hmac_sha256(key, {msg}), want_mac) << len;
  }
}

}  // namespace
}  // namespace abox::base
