// InstanceSecret: the 32 random bytes an instance's nonces derive from
// (nonce.h), kept in the instance's state folder as the file
// "nonce-secret" (exactly 32 raw bytes, mode 0600, owned by the operator).
//
// Startup code only: errors are messages naming the file and the problem (for
// the CLI), as in ca.h. The caller has made the folder private first
// (ensure_private_dir()). load_or_create() refuses a file that is not a regular file
// (symlinks are not followed), is readable or writable by group or others, is
// owned by another user, or is not exactly 32 bytes long; it creates a missing
// one atomically (O_CREAT | O_EXCL, mode 0600) from the kernel's random
// source. The bytes are wiped when the object is destroyed.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/result.h"
#include "broker/nonce.h"

namespace abox::broker {

class InstanceSecret {
 public:
  static constexpr const char* kFileName = "nonce-secret";

  // Reads <state_dir>/nonce-secret, creating it first when missing.
  static base::Result<InstanceSecret, std::string> load_or_create(const std::string& state_dir);
  // For tests and fuzzing.
  static InstanceSecret from_bytes(const InstanceSecretBytes& bytes);

  InstanceSecret(const InstanceSecret&) = delete;
  InstanceSecret& operator=(const InstanceSecret&) = delete;
  InstanceSecret(InstanceSecret&& other) noexcept;
  InstanceSecret& operator=(InstanceSecret&& other) noexcept;
  ~InstanceSecret();

  std::span<const std::uint8_t, kInstanceSecretBytes> bytes() const { return bytes_; }

 private:
  InstanceSecret() = default;
  InstanceSecretBytes bytes_{};
};

}  // namespace abox::broker
