// Sha256 and hmac_sha256: the digest and MAC of the guest control channel
// (guest/protocol/), written here because box-guest is a static binary that
// links base/ only, not BoringSSL (broker/ keeps BoringSSL for everything TLS).
//
// FIPS 180-4 SHA-256 and RFC 2104 HMAC. Not constant-time in any way that
// matters to a MAC check: compare MACs with equal_in_constant_time().
// Tests: the FIPS and RFC 4231 vectors, and BoringSSL as an oracle on random
// inputs (tests/base/sha256_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

namespace abox::base {

using Sha256Digest = std::array<std::uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::uint8_t> bytes);
  Sha256Digest finish();  // the object is spent afterwards; make a new one to hash again

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::span<const std::uint8_t> bytes);

// HMAC-SHA256 over the concatenation of `parts` (so a caller can MAC a
// header and a payload without copying them together).
Sha256Digest hmac_sha256(std::span<const std::uint8_t> key,
                         std::initializer_list<std::span<const std::uint8_t>> parts);

// True when a and b are the same length and bytes, in time that depends only
// on the length.
bool equal_in_constant_time(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);

}  // namespace abox::base
