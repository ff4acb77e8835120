// CredentialFile: the operator's credentials file (the credential store),
// read and written under one set of rules. The broker's Credentials::load()
// and `abox credentials` (engine/cli/credentials_command) both read it here,
// so there is one parser and one set of refusals.
//
//   [credentials]
//   anthropic = "sk-ant-..."     # names as in the policies' [[broker]] `credential`
//
// read(): the file must be a regular file (a symlink is refused), owned by
// the effective uid, with no permission bit for group or others, at most
// 1 MiB; otherwise it is refused with a message naming the problem and the
// fix. Its text must be TOML with one table, [credentials], of strings. Every
// name follows policy::valid_credential_name(); every key is 1-4096 visible
// ASCII bytes (it goes into a header: no CR, LF, NUL or space) other than '*'
// (the scrubber's mask, key_scrubber.h). No message ever quotes a key.
//
// write(): the whole file anew, atomically: a new file (mode 0600, O_EXCL)
// beside it, written and fsync'd, renamed over the old one, the folder
// fsync'd. A reader sees the old file or the new one, never a part. Comments
// of a hand-written file are not kept.
//
// Keys are wiped from memory when they are replaced or removed and when the
// object is destroyed.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::broker {

inline constexpr std::size_t kMaxCredentialKey = 4096;
inline constexpr std::size_t kMaxCredentialFile = 1 << 20;

// 1-4096 visible ASCII bytes, none of them '*'.
bool valid_credential_key(std::string_view key);

struct CredentialFileError {
  bool missing = false;  // the file does not exist (the message says so too)
  std::string message;
};

class CredentialFile {
 public:
  CredentialFile() = default;  // no credentials
  static base::Result<CredentialFile, CredentialFileError> read(const std::string& path);
  // The text as if it came from a file that passed read()'s checks.
  static base::Result<CredentialFile, std::string> parse(std::string_view text, const std::string& source);

  CredentialFile(CredentialFile&&) = default;
  CredentialFile& operator=(CredentialFile&&) = default;
  CredentialFile(const CredentialFile&) = delete;
  CredentialFile& operator=(const CredentialFile&) = delete;
  ~CredentialFile();

  // Name -> key, sorted by name.
  const std::map<std::string, std::string, std::less<>>& entries() const { return entries_; }
  const std::string* find(std::string_view name) const;

  // Adds or replaces (the old key wiped). The error names the rule broken, never the key.
  base::Result<void, std::string> set(std::string_view name, std::string_view key);
  // false when there was no such name.
  bool remove(std::string_view name);

  // The file's text: [credentials] and one line per name, in name order.
  std::string format() const;
  base::Result<void, std::string> write(const std::string& path) const;

 private:
  std::map<std::string, std::string, std::less<>> entries_;
};

// Overwrites s's bytes with zeros (not optimised away), then clears it.
void wipe(std::string& s);

}  // namespace abox::broker
