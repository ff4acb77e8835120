#include "broker/credentials.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  std::string text;
  struct Wiper {
    std::string& s;
    ~Wiper() { wipe(s); }
  } wiper{text};
  text.reserve(4096);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::memset(buf, 0, sizeof buf);
      return base::Err{std::string("reading the credentials fd: ") + std::strerror(errno)};
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxCredentialFile) {
      std::memset(buf, 0, sizeof buf);
      return base::Err{"the credentials fd holds more than " + std::to_string(kMaxCredentialFile) + " bytes"};
    }
  }
  std::memset(buf, 0, sizeof buf);
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
