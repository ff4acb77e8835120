#include "broker/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/unique_fd.h"
#include "broker/key_scrubber.h"

namespace abox::broker {

namespace {

void wipe(std::string& s) {
  volatile char* p = s.data();
  for (std::size_t i = 0; i < s.size(); ++i) p[i] = 0;
  s.clear();
}

// Visible ASCII (the key goes into a header), and not the scrubber's mask:
// masking an echoed key must not be able to make a new occurrence of it.
bool valid_key(std::string_view k) {
  if (k.empty() || k.size() > 4096) return false;
  for (char c : k) {
    if (c <= 0x20 || c >= 0x7F || c == KeyScrubber::kMask) return false;
  }
  return true;
}

}  // namespace

Credentials::~Credentials() {
  for (auto& k : keys_) wipe(k);
}

base::Result<Credentials, std::string> Credentials::load(const std::string& path,
                                                         const policy::Policy& policy) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    if (errno == ELOOP) return base::Err{path + ": is a symlink: give the file itself"};
    return base::Err{path + ": " + std::strerror(errno)};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return base::Err{path + ": " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode)) return base::Err{path + ": not a regular file"};
  if (st.st_uid != ::geteuid()) {
    return base::Err{path + ": owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
                     std::to_string(::geteuid()) + ")"};
  }
  if ((st.st_mode & 077) != 0) {
    return base::Err{path + ": group or others may read or write it: chmod 600 " + path};
  }
  if (st.st_size > 1 << 20) return base::Err{path + ": larger than 1 MiB"};
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  auto result = parse(text, path, policy);
  wipe(text);
  return result;
}

base::Result<Credentials, std::string> Credentials::parse(std::string_view text, const std::string& source,
                                                          const policy::Policy& policy) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    // The message quotes no value: toml++ reports position and reason only.
    return base::Err{source + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
  }
  std::map<std::string, std::string> by_name;
  for (auto& [k, v] : root) {
    if (k.str() != "credentials") return base::Err{source + ": unknown key '" + std::string(k.str()) + "'"};
    const toml::table* t = v.as_table();
    if (t == nullptr) return base::Err{source + ": [credentials] must be a table"};
    for (auto& [name, value] : *t) {
      auto s = value.value<std::string>();
      if (!s) return base::Err{source + ": credentials." + std::string(name.str()) + " must be a string"};
      if (!valid_key(*s)) {
        return base::Err{source + ": credentials." + std::string(name.str()) +
                         " is not 1-4096 visible ASCII characters other than '*'"};
      }
      by_name.emplace(std::string(name.str()), std::move(*s));
    }
  }
  Credentials c;
  for (const auto& b : policy.brokers()) {
    auto it = by_name.find(b.credential);
    if (it == by_name.end()) {
      return base::Err{source + ": no key for credential '" + b.credential + "' (binding " + b.name + ":" +
                       std::to_string(b.port) + ")"};
    }
    c.keys_.push_back(it->second);
  }
  for (auto& [name, key] : by_name) wipe(key);
  for (const auto& k : c.keys_) c.views_.push_back(k);
  return c;
}

}  // namespace abox::broker
