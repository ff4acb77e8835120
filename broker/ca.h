// InstanceCa: one instance's certificate authority, and the leaves it mints.
//
// The CA is an ECDSA P-256 key and a self-signed certificate kept in the
// instance's state folder:
//   DIR/           mode 0700, created on first use; refused if group/others
//                  can reach it or another user owns it
//   DIR/ca.key     PKCS#8 PEM, mode 0600, written once (O_EXCL, then rename)
//   DIR/ca.pem     the certificate the guest trusts (abox broker ca)
// The key never leaves the host and never goes where the guest can read it.
//
// A leaf is minted per TLS SNI name: a fresh P-256 key, SAN = the name (DNS),
// serverAuth only, valid from 5 minutes before `now` for kLeafLifetime,
// signed by the CA. Callers cache leaves (leaf_cache.h); the CA keeps none.
//
// Startup code (load_or_create) reports failures as text for the CLI;
// mint_leaf() is on the data path and returns null only when the library
// fails (out of memory).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "broker/tls.h"

namespace abox::broker {

struct LeafCertificate {
  EvpPkeyPtr key;
  X509Ptr certificate;
  std::int64_t not_after_unix = 0;
};

class InstanceCa {
 public:
  static constexpr std::chrono::seconds kLeafLifetime{24 * 3600};
  static constexpr std::chrono::seconds kLeafBackdate{5 * 60};

  // Loads DIR/ca.key and DIR/ca.pem, or creates the folder, key and
  // certificate when none exist. `instance` names the CA's subject.
  // Error: a message naming the file and the problem.
  static base::Result<std::unique_ptr<InstanceCa>, std::string> load_or_create(const std::string& state_dir,
                                                                               std::string_view instance,
                                                                               std::int64_t now_unix);
  // Loads an existing CA; an error when there is none.
  static base::Result<std::unique_ptr<InstanceCa>, std::string> load(const std::string& state_dir);

  // A fresh leaf for `name` (canonical DNS name), valid from now - backdate
  // to now + kLeafLifetime. Null when the library fails.
  std::unique_ptr<LeafCertificate> mint_leaf(std::string_view name, std::int64_t now_unix) const;

  const std::string& certificate_pem() const { return certificate_pem_; }
  X509* certificate() const { return certificate_.get(); }

 private:
  InstanceCa(EvpPkeyPtr key, X509Ptr cert);

  EvpPkeyPtr key_;
  X509Ptr certificate_;
  std::string certificate_pem_;
};

// Makes sure `dir` exists with mode 0700 and belongs to this user; creates it
// (and nothing above it) when missing. Error: a message.
base::Result<void, std::string> ensure_private_dir(const std::string& dir);

}  // namespace abox::broker
