// Credentials: the real keys, read once at startup from the operator's
// credentials file, indexed like the policy's [[broker]] bindings.
//
//   [credentials]
//   anthropic = "sk-ant-..."     # names as in the bindings' `credential`
//
// The file must be a regular file (symlinks refused), owned by the user
// running the broker, and neither readable nor writable by group or others;
// otherwise it is refused with a message naming the problem. Every binding's
// credential must be present; a key must be 1-4096 visible ASCII bytes
// (it goes into a header: no CR, LF, NUL or space) other than '*' (the
// scrubber's mask, key_scrubber.h). Names no binding uses
// are ignored (one file may serve several policies).
// Keys are wiped from memory when the table is destroyed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
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
  std::vector<std::string> keys_;
  std::vector<std::string_view> views_;
};

}  // namespace abox::broker
