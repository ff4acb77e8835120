// Nonces. How this works: NonceTable derives every binding's nonce once, at
// construction (HMAC-SHA256 from BoringSSL), and keeps them as strings
// indexed like the policy's bindings. binding_of() compares a candidate with
// all of them through CRYPTO_memcmp and only then looks at the result, so its
// time depends on the candidate's length (public: every nonce has the same)
// and the table's size, not on how much of a nonce matched.
//
// The marker search ("abox-nonce-" in any case) is a Knuth-Morris-Pratt
// automaton over the lower-cased bytes, compiled into a transition table: one
// table load per byte, no look-back, so a body can be scanned in pieces with
// one integer of state. A body scan skips from the start state straight to
// the next 'a'/'A' with memchr (the rest of the bytes would not move it).
#include "broker/nonce.h"

#include <openssl/hmac.h>
#include <openssl/mem.h>

#include <array>
#include <cstring>

namespace abox::broker {

namespace {

constexpr std::string_view kDerivationLabel = "abox broker nonce v1";

constexpr std::size_t kFound = kNoncePrefix.size();

constexpr std::uint8_t lower(std::uint8_t c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

// The marker automaton as a table: kTransitions[state][byte], where a state
// is how many bytes of kNoncePrefix are matched (Knuth-Morris-Pratt, built at
// compile time) and kFound absorbs. One load per byte, no branch on the data.
using TransitionTable = std::array<std::array<std::uint8_t, 256>, kFound + 1>;
constexpr TransitionTable make_transitions() {
  std::array<std::size_t, kFound> failure{};
  for (std::size_t i = 1, k = 0; i < kFound; ++i) {
    while (k > 0 && kNoncePrefix[i] != kNoncePrefix[k]) k = failure[k - 1];
    if (kNoncePrefix[i] == kNoncePrefix[k]) ++k;
    failure[i] = k;
  }
  TransitionTable t{};
  for (std::size_t state = 0; state <= kFound; ++state) {
    for (std::size_t byte = 0; byte < 256; ++byte) {
      if (state == kFound) {
        t[state][byte] = static_cast<std::uint8_t>(kFound);
        continue;
      }
      const char c = static_cast<char>(lower(static_cast<std::uint8_t>(byte)));
      std::size_t m = state;
      while (m > 0 && kNoncePrefix[m] != c) m = failure[m - 1];
      if (kNoncePrefix[m] == c) ++m;
      t[state][byte] = static_cast<std::uint8_t>(m);
    }
  }
  return t;
}
constexpr TransitionTable kTransitions = make_transitions();

// One automaton step; kFound means the marker has been seen.
std::size_t step(std::size_t matched, std::uint8_t byte) {
  return kTransitions[matched][byte];
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string derive_nonce(std::span<const std::uint8_t, kInstanceSecretBytes> secret,
                         const policy::BrokerBinding& binding) {
  std::string message(kDerivationLabel);
  message.push_back('\0');
  message.append(binding.name);
  message.push_back('\0');
  message.append(std::to_string(binding.port));
  message.push_back('\0');
  message.append(binding.credential);

  std::array<std::uint8_t, 32> mac{};
  unsigned int mac_size = 0;
  if (HMAC(EVP_sha256(), secret.data(), secret.size(), reinterpret_cast<const std::uint8_t*>(message.data()),
           message.size(), mac.data(), &mac_size) == nullptr ||
      mac_size != mac.size()) {
    // HMAC-SHA256 on an in-memory buffer cannot fail short of a broken
    // library: an invariant, not an input error.
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce(kNoncePrefix);
  for (std::uint8_t b : mac) {
    nonce.push_back(kHex[b >> 4]);
    nonce.push_back(kHex[b & 0xF]);
  }
  OPENSSL_cleanse(mac.data(), mac.size());
  return nonce;
}

bool is_nonce_shaped(std::string_view text) {
  if (text.size() != kNonceLength || !text.starts_with(kNoncePrefix)) return false;
  for (char c : text.substr(kNoncePrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool looks_like_nonce(std::string_view text, bool percent_decode) {
  // Raw and decoded are scanned side by side: decoding "%ab" eats the "ab"
  // of a raw "abox-nonce-" that follows a stray "%".
  std::size_t raw = 0;
  std::size_t decoded = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    raw = step(raw, static_cast<std::uint8_t>(text[i]));
    if (raw == kFound) return true;
    if (!percent_decode) continue;
    auto byte = static_cast<std::uint8_t>(text[i]);
    if (text[i] == '%' && i + 2 < text.size()) {
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        byte = static_cast<std::uint8_t>(hi * 16 + lo);
        // The raw automaton still has to see the two hex digits.
        raw = step(step(raw, static_cast<std::uint8_t>(text[i + 1])), static_cast<std::uint8_t>(text[i + 2]));
        if (raw == kFound) return true;
        i += 2;
      }
    }
    decoded = step(decoded, byte);
    if (decoded == kFound) return true;
  }
  return false;
}

NonceTable::NonceTable(std::span<const std::uint8_t, kInstanceSecretBytes> secret,
                       std::span<const policy::BrokerBinding> bindings) {
  nonces_.reserve(bindings.size());
  for (const auto& b : bindings) nonces_.push_back(derive_nonce(secret, b));
}

std::optional<std::size_t> NonceTable::binding_of(std::string_view candidate) const {
  if (candidate.size() != kNonceLength) return std::nullopt;
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < nonces_.size(); ++i) {
    // Every entry is compared; the branch is on the result only.
    if (CRYPTO_memcmp(candidate.data(), nonces_[i].data(), kNonceLength) == 0) found = i;
  }
  return found;
}

namespace {

// Where the marker could begin: the first 'a' or 'A' in [p, end), or end.
// From the automaton's start state every other byte leads back to it, so
// the bytes skipped are the ones step() would have read without moving.
// memchr reads a vector at a time; step() one byte per dependent load.
const std::uint8_t* next_marker_start(const std::uint8_t* p, const std::uint8_t* end) {
  static_assert(kNoncePrefix[0] == 'a');
  const auto n = static_cast<std::size_t>(end - p);
  const auto* lower_a = static_cast<const std::uint8_t*>(std::memchr(p, 'a', n));
  const std::size_t before = lower_a == nullptr ? n : static_cast<std::size_t>(lower_a - p);
  const auto* upper_a = static_cast<const std::uint8_t*>(std::memchr(p, 'A', before));
  if (upper_a != nullptr) return upper_a;
  return lower_a == nullptr ? end : lower_a;
}

}  // namespace

bool NonceMarkerScanner::feed(std::span<const std::uint8_t> piece) {
  if (found_) return true;
  std::size_t m = matched_;
  const std::uint8_t* p = piece.data();
  const std::uint8_t* const end = p + piece.size();
  while (p != end && m != kFound) {
    if (m == 0) {
      p = next_marker_start(p, end);
      if (p == end) break;
    }
    m = step(m, *p++);
  }
  matched_ = m;
  found_ = m == kFound;
  return found_;
}

}  // namespace abox::broker
