#include "broker/credentials.h"

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

}  // namespace abox::broker
