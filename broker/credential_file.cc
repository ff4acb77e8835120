#include "broker/credential_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "broker/key_scrubber.h"
#include "policy/policy.h"

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
  volatile char* p = s.data();
  for (std::size_t i = 0; i < s.size(); ++i) p[i] = 0;
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
  auto refuse = [](std::string m) { return base::Err{CredentialFileError{false, std::move(m)}}; };
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    if (errno == ENOENT) return base::Err{CredentialFileError{true, errno_text(path)}};
    if (errno == ELOOP) return refuse(path + ": is a symlink: give the file itself");
    return refuse(errno_text(path));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return refuse(errno_text(path));
  if (!S_ISREG(st.st_mode)) return refuse(path + ": not a regular file");
  if (st.st_uid != ::geteuid()) {
    return refuse(path + ": owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
                  std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0)
    return refuse(path + ": group or others may read or write it: chmod 600 " + path);
  if (st.st_size > static_cast<off_t>(kMaxCredentialFile)) return refuse(path + ": larger than 1 MiB");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  auto parsed = parse(text, path);
  wipe(text);
  if (!parsed.ok()) return refuse(parsed.error());
  return std::move(*parsed);
}

base::Result<CredentialFile, std::string> CredentialFile::parse(std::string_view text,
                                                                const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    // The message quotes no value: toml++ reports position and reason only.
    return base::Err{source + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
  }
  CredentialFile file;
  for (auto& [k, v] : root) {
    if (k.str() != "credentials") return base::Err{source + ": unknown key '" + std::string(k.str()) + "'"};
    const toml::table* t = v.as_table();
    if (t == nullptr) return base::Err{source + ": [credentials] must be a table"};
    for (auto& [name, value] : *t) {
      const std::string n(name.str());
      if (!policy::valid_credential_name(n)) {
        return base::Err{source + ": credentials: the name '" + n +
                         "' is not 1 to 128 letters, digits, '-', '_' or '.'"};
      }
      auto s = value.value<std::string>();
      if (!s) return base::Err{source + ": credentials." + n + " must be a string"};
      if (!valid_credential_key(*s)) {
        wipe(*s);
        return base::Err{source + ": credentials." + n +
                         " is not 1-4096 visible ASCII characters other than '*'"};
      }
      file.entries_.emplace(n, std::move(*s));
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
