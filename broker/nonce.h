// Nonces: what the guest holds in place of each key. One per (instance,
// binding).
//
// nonce = "abox-nonce-" + lower-case hex of
//         HMAC-SHA256(instance secret, "abox broker nonce v1" NUL name NUL
//                     port in decimal NUL credential)
// 75 ASCII bytes. The instance secret is 32 random bytes kept in the
// instance's state folder (instance_secret.h), readable by the operator only.
//
// Why derived and not stored: one secret per instance is the only state to
// protect, wipe and rotate; the nonces need no file of their own and come out
// the same after a restart or a policy reload (so `abox broker nonces` and the
// running broker agree without sharing a table), and a binding's nonce
// changes when its name, port or credential does. Two instances never share
// a nonce because they never share a secret (HMAC-SHA256 as a PRF).
// Revoking one binding is the gate's revocation state; rotating the secret
// revokes them all.
//
// The prefix makes a nonce recognizable anywhere (condition 5 of the gate):
// looks_like_nonce() finds "abox-nonce-" in any ASCII case, also when
// percent-encoded in a URL target. A nonce-shaped string that is not one of
// this instance's is a nonce of another instance (or a forgery): refused.
//
// Invariants: a NonceTable is immutable after construction and indexed like
// the policy's brokers(). binding_of() compares the candidate with every
// entry using CRYPTO_memcmp, whatever matches, so its time does not depend on
// which bytes of a nonce were right.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace abox::broker {

inline constexpr std::string_view kNoncePrefix = "abox-nonce-";
inline constexpr std::size_t kNonceHexDigits = 64;
inline constexpr std::size_t kNonceLength = kNoncePrefix.size() + kNonceHexDigits;
inline constexpr std::size_t kInstanceSecretBytes = 32;

using InstanceSecretBytes = std::array<std::uint8_t, kInstanceSecretBytes>;

// The nonce of one binding under one instance secret.
std::string derive_nonce(std::span<const std::uint8_t, kInstanceSecretBytes> secret,
                         const policy::BrokerBinding& binding);

// Is `text` exactly nonce-shaped: the prefix (exact case) then 64 lower-case
// hex digits?
bool is_nonce_shaped(std::string_view text);

// Does `text` contain "abox-nonce-" anywhere, in any ASCII case? When
// `percent_decode` (URL targets), also after decoding "%XX" escapes: either
// reading finding it is enough.
bool looks_like_nonce(std::string_view text, bool percent_decode = false);

class NonceTable {
 public:
  NonceTable(std::span<const std::uint8_t, kInstanceSecretBytes> secret,
             std::span<const policy::BrokerBinding> bindings);

  std::size_t size() const { return nonces_.size(); }
  // The nonce the guest gets for binding `index` (policy brokers() order).
  std::string_view nonce_for(std::size_t index) const { return nonces_.at(index); }
  // The binding whose nonce `candidate` is, compared in constant time against
  // every entry; nullopt if none.
  std::optional<std::size_t> binding_of(std::string_view candidate) const;

 private:
  std::vector<std::string> nonces_;
};

// Finds "abox-nonce-" (any ASCII case) in a byte stream that arrives in
// pieces, such as a request body, however the pieces split it. For the
// broker to stop forwarding a body that carries a nonce (see
// docs/security.md: the body is never rewritten, so this is a tripwire, not
// a boundary: JSON escapes or other encodings are not decoded).
class NonceMarkerScanner {
 public:
  // Returns true once the marker has been seen (in this piece or before).
  bool feed(std::span<const std::uint8_t> piece);
  bool found() const { return found_; }

 private:
  std::size_t matched_ = 0;
  bool found_ = false;
};

}  // namespace abox::broker
