#include "broker/credential_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/private_file.h"
#include "base/unique_fd.h"
#include "broker/key_scrubber.h"
#include "policy/policy.h"
#include "policy/toml_tables.h"

namespace abox::broker {

namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A bare TOML key holds A-Z a-z 0-9 _ -; a credential name may also hold
// '.', which TOML would read as a dotted key: such a name is quoted (a
// valid name needs no escape inside quotes).
bool bare_key(std::string_view name) {
  for (char c : name) {
    if (c == '.') return false;
  }
  return true;
}

bool write_all(int fd, std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

void wipe(std::string& s) {
  base::wipe(s);
  s.clear();
}

bool valid_credential_key(std::string_view k) {
  if (k.empty() || k.size() > kMaxCredentialKey) return false;
  for (char c : k) {
    // Visible ASCII (the key goes into a header), and not the scrubber's mask:
    // masking an echoed key must not be able to make a new occurrence of it.
    if (c <= 0x20 || c >= 0x7F || c == KeyScrubber::kMask) return false;
  }
  return true;
}

CredentialFile::~CredentialFile() {
  for (auto& [name, key] : entries_) wipe(key);
}

base::Result<CredentialFile, CredentialFileError> CredentialFile::read(const std::string& path) {
  auto read = base::read_private_file(path, kMaxCredentialFile);
  if (!read.ok()) {
    return base::Err{CredentialFileError{read.error().fault == base::PrivateFileError::Fault::missing,
                                         std::move(read.error().message)}};
  }
  std::string& text = *read;
  auto parsed = parse(text, path);
  wipe(text);
  if (!parsed.ok()) return base::Err{CredentialFileError{false, std::move(parsed.error())}};
  return std::move(*parsed);
}

base::Result<CredentialFile, std::string> CredentialFile::parse(std::string_view text,
                                                                const std::string& source) {
  auto tables = policy::read_toml_tables(text, source);
  if (!tables.ok()) return base::Err{std::move(tables.error())};
  // Every key read is wiped wherever this returns: the file keeps copies
  // (a move would leave a short key's bytes in the moved-from string).
  struct Wiper {
    std::vector<policy::TomlTable>& tables;
    ~Wiper() {
      for (auto& t : tables) {
        for (auto& e : t.entries) {
          if (e.text) wipe(*e.text);
        }
      }
    }
  } wiper{*tables};
  CredentialFile file;
  for (auto& t : *tables) {
    if (t.name != "credentials") return base::Err{source + ": unknown key '" + t.name + "'"};
    if (!t.is_table) return base::Err{source + ": [credentials] must be a table"};
    for (auto& [n, value] : t.entries) {
      if (!policy::valid_credential_name(n)) {
        return base::Err{source + ": credentials: the name '" + n +
                         "' is not 1 to 128 letters, digits, '-', '_' or '.'"};
      }
      if (!value) return base::Err{source + ": credentials." + n + " must be a string"};
      if (!valid_credential_key(*value)) {
        return base::Err{source + ": credentials." + n +
                         " is not 1-4096 visible ASCII characters other than '*'"};
      }
      file.entries_.emplace(n, *value);
    }
  }
  return file;
}

const std::string* CredentialFile::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

base::Result<void, std::string> CredentialFile::set(std::string_view name, std::string_view key) {
  if (!policy::valid_credential_name(name)) {
    return base::Err{"the name '" + std::string(name) + "' is not 1 to 128 letters, digits, '-', '_' or '.'"};
  }
  if (!valid_credential_key(key)) {
    return base::Err{"the key is not 1-4096 visible ASCII characters other than '*' (" +
                     std::to_string(key.size()) + " bytes given)"};
  }
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    entries_.emplace(std::string(name), std::string(key));
  } else {
    wipe(it->second);
    it->second.assign(key);
  }
  return {};
}

bool CredentialFile::remove(std::string_view name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  wipe(it->second);
  entries_.erase(it);
  return true;
}

std::string CredentialFile::format() const {
  std::string out = "[credentials]\n";
  for (const auto& [name, key] : entries_) {
    out += bare_key(name) ? name : "\"" + name + "\"";
    out += " = \"";
    for (char c : key) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += "\"\n";
  }
  return out;
}

base::Result<void, std::string> CredentialFile::write(const std::string& path) const {
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string temp = path + ".new-" + std::to_string(::getpid());
  base::UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return base::Err{errno_text(temp)};
  std::string text = format();
  const bool written = ::fchmod(fd.get(), 0600) == 0 && write_all(fd.get(), text) && ::fsync(fd.get()) == 0;
  const int err = errno;
  wipe(text);
  if (!written) {
    ::unlink(temp.c_str());
    errno = err;
    return base::Err{errno_text("writing " + temp)};
  }
  fd.reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    auto e = errno_text("renaming " + temp + " to " + path);
    ::unlink(temp.c_str());
    return base::Err{e};
  }
  if (base::UniqueFd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); dir) ::fsync(dir.get());
  return {};
}

}  // namespace abox::broker
