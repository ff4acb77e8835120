// Credentials: the real keys, read once at startup from the operator's
// credentials file, indexed like the policy's [[broker]] bindings.
//
//   [credentials]
//   anthropic = "sk-ant-..."     # names as in the bindings' `credential`
//
// The file is read by CredentialFile (credential_file.h), whose rules are
// the store's: a regular file (symlinks refused) owned by the user running
// the broker, neither readable nor writable by group or others, every key
// 1-4096 visible ASCII bytes other than '*'. Every binding's credential must
// be present; names no binding uses are ignored (one file may serve several
// policies).
// Keys are wiped from memory when the table is destroyed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "broker/credential_file.h"
#include "policy/policy.h"

namespace abox::broker {

class Credentials {
 public:
  static base::Result<Credentials, std::string> load(const std::string& path, const policy::Policy& policy);
  // For tests: parses text as if it came from a checked file.
  static base::Result<Credentials, std::string> parse(std::string_view text, const std::string& source,
                                                      const policy::Policy& policy);

  Credentials(Credentials&&) = default;
  Credentials& operator=(Credentials&&) = default;
  Credentials(const Credentials&) = delete;
  Credentials& operator=(const Credentials&) = delete;
  ~Credentials();

  // The key of binding `index` (policy brokers() order).
  std::string_view key_for(std::size_t index) const { return keys_.at(index); }
  // Every key, for the gate's condition 5 (views stay valid while this lives).
  const std::vector<std::string_view>& all_keys() const { return views_; }

 private:
  Credentials() = default;
  static base::Result<Credentials, std::string> from_file(const CredentialFile& file,
                                                          const std::string& source,
                                                          const policy::Policy& policy);
  std::vector<std::string> keys_;
  std::vector<std::string_view> views_;
};

}  // namespace abox::broker
