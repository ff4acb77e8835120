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
  std::uint32_t line = 0;  // 1-based; 0 for a problem of the file as a whole
  std::uint32_t column = 0;
  std::string message;
  // A problem with no place in the text: the file cannot be read, is too
  // large, or allows nothing. It has no line and column, and says so.
  bool file_level() const { return line == 0; }
  // "file:line:column: message", or "file: message" for a file-level one.
  std::string to_string() const;
};

// At most this many problems are listed; past it they are only counted.
inline constexpr std::size_t kMaxPolicyDiagnostics = 50;

struct PolicyError {
  std::vector<PolicyDiagnostic> diagnostics;  // never empty; at most kMaxPolicyDiagnostics
  std::size_t total = 0;    // every problem found: more than diagnostics.size() when the list was cut
  bool unreadable = false;  // the file could not be read at all (missing, a folder, no permission, too large)

  std::size_t omitted() const { return total > diagnostics.size() ? total - diagnostics.size() : 0; }
  // One line per diagnostic, then, when the list was cut, a line saying how
  // many more there are.
  std::string to_string() const;
};

// The largest policy file read: a policy is a page or two; absurd files are
// refused (by load_policy() and every other reader of a policy's text).
inline constexpr std::size_t kMaxPolicyFileBytes = 4u << 20;

// `source` names the text in messages (a path, or "<stdin>").
base::Result<Policy, PolicyError> parse_policy(std::string_view text, std::string_view source);

// Reads and parses a file. A file that cannot be read (missing, a folder or
// anything but a regular file, no permission, over 4 MiB) is an error with
// `unreadable` set and one file-level diagnostic naming the reason (the
// errno text where there is one). One run reports every problem: syntax
// stops the walk, but every key's own problems and the rules' conflicts
// with each other are all reported together.
base::Result<Policy, PolicyError> load_policy(const std::filesystem::path& path);

// Warnings about a valid policy a person should still look at (an [unsafe]
// setting, a wildcard directly under a public suffix, broad port ranges).
std::vector<PolicyDiagnostic> policy_warnings(const Policy& policy);

}  // namespace abox::policy
