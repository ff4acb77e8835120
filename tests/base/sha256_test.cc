// SHA-256 and HMAC-SHA256 against the published vectors (FIPS 180-4 examples,
// RFC 4231); tests/broker/sha256_oracle_test.cc compares with BoringSSL.
#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "base/byte_reader.h"

namespace abox::base {
namespace {

std::string hex(std::span<const std::uint8_t> d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (auto b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string sha_hex(std::string_view s) {
  return hex(sha256(as_bytes(s)));
}

std::string hmac_hex(std::string_view key, std::string_view data) {
  return hex(hmac_sha256(as_bytes(key), {as_bytes(data)}));
}

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, SplitUpdatesGiveTheSameDigest) {
  std::string msg;
  for (int i = 0; i < 300; ++i) msg += static_cast<char>(i * 7);
  auto whole = sha256(as_bytes(msg));
  // Every split point, and every padding boundary (55, 56, 63, 64 bytes) on the way.
  for (std::size_t cut = 0; cut <= msg.size(); ++cut) {
    Sha256 h;
    h.update(as_bytes(std::string_view(msg).substr(0, cut)));
    h.update(as_bytes(std::string_view(msg).substr(cut)));
    ASSERT_EQ(h.finish(), whole) << cut;
  }
}

TEST(Sha256, EmptyUpdatesMidBlockChangeNothing) {
  // An empty span has no data pointer: nothing may be copied from it (UBSan
  // caught a memcpy from null here, through a frame with an empty payload).
  Sha256 h;
  h.update(as_bytes("abc"));
  h.update(std::span<const std::uint8_t>());
  h.update(as_bytes(""));
  EXPECT_EQ(hex(h.finish()), sha_hex("abc"));
  EXPECT_EQ(
      hex(hmac_sha256(as_bytes("key"), {as_bytes("ab"), std::span<const std::uint8_t>(), as_bytes("c")})),
      hmac_hex("key", "abc"));
}

TEST(HmacSha256, Rfc4231Vectors) {
  // Test case 1: a 20-byte key of 0x0b.
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block.
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key (longer than the block: hashed first).
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, PartsAreConcatenated) {
  auto key = as_bytes("k");
  EXPECT_EQ(hmac_sha256(key, {as_bytes("hello "), as_bytes("world")}),
            hmac_sha256(key, {as_bytes("hello world")}));
  EXPECT_NE(hmac_sha256(key, {as_bytes("hello world")}),
            hmac_sha256(as_bytes("K"), {as_bytes("hello world")}));
}

TEST(EqualInConstantTime, ComparesLengthAndBytes) {
  EXPECT_TRUE(equal_in_constant_time(as_bytes("abc"), as_bytes("abc")));
  EXPECT_FALSE(equal_in_constant_time(as_bytes("abc"), as_bytes("abd")));
  EXPECT_FALSE(equal_in_constant_time(as_bytes("abc"), as_bytes("ab")));
  EXPECT_TRUE(equal_in_constant_time({}, {}));
}

}  // namespace
}  // namespace abox::base
