// Credentials: the real keys, read once at startup, indexed like the
// policy's [[broker]] bindings. Two ways in:
//
//   read_fd()   what the engine (abox run, the daemon's shim) gives the
//               broker it starts: a memfd (or pipe) holding exactly the keys
//               of that instance's bindings, read once at start and closed.
//               No path to the store, nothing in argv or the environment.
//               A name no binding of the policy uses is refused: the fd
//               carries one instance's keys and nothing more.
//   load()      `abox broker --credentials FILE`, an operator's standalone
//               run: the file (the store, or one of the same format).
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
  // The broker's side of the fd: reads until EOF (at most
  // kMaxCredentialFile bytes), then parse_instance_text(). The bytes read are
  // wiped; the caller closes fd. Errors never quote a key.
  static base::Result<Credentials, std::string> read_fd(int fd, const policy::Policy& policy);
  // The rules of read_fd() on text: the store's format and key rules, every
  // binding's credential present, and no name that no binding uses.
  static base::Result<Credentials, std::string> parse_instance_text(std::string_view text,
                                                                    const policy::Policy& policy);
  // The engine's side: the text for an instance's broker, [credentials] with
  // exactly the names policy's bindings use (each once), their keys from
  // `store` (read from `source`, named in errors). Keys of other names never
  // enter it. Error: a name a binding uses that the store lacks. The caller
  // wipes the text once written.
  static base::Result<std::string, std::string> text_for_instance(const CredentialFile& store,
                                                                  const std::string& source,
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
