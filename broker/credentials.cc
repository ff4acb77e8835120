#include "broker/credentials.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/private_file.h"
#include "broker/credential_file.h"

namespace abox::broker {

Credentials::~Credentials() {
  for (auto& k : keys_) wipe(k);
}

base::Result<Credentials, std::string> Credentials::load(const std::string& path,
                                                         const policy::Policy& policy) {
  auto file = CredentialFile::read(path);
  if (!file.ok()) return base::Err{file.error().message};
  return from_file(*file, path, policy);
}

base::Result<Credentials, std::string> Credentials::parse(std::string_view text, const std::string& source,
                                                          const policy::Policy& policy) {
  auto file = CredentialFile::parse(text, source);
  if (!file.ok()) return base::Err{file.error()};
  return from_file(*file, source, policy);
}

base::Result<Credentials, std::string> Credentials::from_file(const CredentialFile& file,
                                                              const std::string& source,
                                                              const policy::Policy& policy) {
  Credentials c;
  for (const auto& b : policy.brokers()) {
    const std::string* key = file.find(b.credential);
    if (key == nullptr) {
      return base::Err{source + ": no key for credential '" + b.credential + "' (binding " + b.name + ":" +
                       std::to_string(b.port) + ")"};
    }
    c.keys_.push_back(*key);
  }
  for (const auto& k : c.keys_) c.views_.push_back(k);
  return c;
}

base::Result<Credentials, std::string> Credentials::read_fd(int fd, const policy::Policy& policy) {
  auto read = base::read_all_bounded(fd, kMaxCredentialFile);
  if (!read.ok()) {
    const bool too_large = read.error().fault == base::PrivateFileError::Fault::too_large;
    return base::Err{(too_large ? "the credentials fd holds " : "reading the credentials fd: ") +
                     read.error().message};
  }
  std::string& text = *read;
  struct Wiper {
    std::string& s;
    ~Wiper() { wipe(s); }
  } wiper{text};
  return parse_instance_text(text, policy);
}

base::Result<Credentials, std::string> Credentials::parse_instance_text(std::string_view text,
                                                                        const policy::Policy& policy) {
  const std::string source = "the credentials fd";
  auto file = CredentialFile::parse(text, source);
  if (!file.ok()) return base::Err{file.error()};
  for (const auto& [name, key] : file->entries()) {
    bool bound = false;
    for (const auto& b : policy.brokers()) bound = bound || b.credential == name;
    if (!bound) {
      return base::Err{source + " holds '" + name +
                       "', which no [[broker]] binding of the policy uses: an instance's broker gets its own "
                       "bindings' keys and nothing more"};
    }
  }
  return from_file(*file, source, policy);
}

base::Result<std::string, std::string> Credentials::text_for_instance(const CredentialFile& store,
                                                                      const std::string& source,
                                                                      const policy::Policy& policy) {
  CredentialFile mine;
  for (const auto& b : policy.brokers()) {
    const std::string* key = store.find(b.credential);
    if (key == nullptr) {
      return base::Err{source + ": no key for credential '" + b.credential + "' (binding " + b.name + ":" +
                       std::to_string(b.port) + "): abox credentials set " + b.credential};
    }
    if (auto set = mine.set(b.credential, *key); !set.ok()) return base::Err{source + ": " + set.error()};
  }
  return mine.format();
}

}  // namespace abox::broker
