// Loading a policy file: TOML text -> a validated, immutable Policy.
//
// Either the whole file is valid and a Policy comes back, or nothing does and
// the error lists every problem found, each with file, line, column and what
// was expected. Unknown keys, duplicates and contradictions are errors: a typo
// must never silently widen or narrow what an instance may reach.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace abox::policy {

struct PolicyDiagnostic {
  std::string file;
  std::uint32_t line = 0;  // 1-based; 0 when the problem is the file itself
  std::uint32_t column = 0;
  std::string message;
  std::string to_string() const;  // "file:line:column: message"
};

struct PolicyError {
  std::vector<PolicyDiagnostic> diagnostics;  // never empty
  // One line per diagnostic.
  std::string to_string() const;
};

// `source` names the text in messages (a path, or "<stdin>").
base::Result<Policy, PolicyError> parse_policy(std::string_view text, std::string_view source);

// Reads and parses a file; an unreadable file is a diagnostic with line 0.
base::Result<Policy, PolicyError> load_policy(const std::filesystem::path& path);

// Warnings about a valid policy a person should still look at (an [unsafe]
// setting, a wildcard directly under a public suffix, broad port ranges).
std::vector<PolicyDiagnostic> policy_warnings(const Policy& policy);

}  // namespace abox::policy
