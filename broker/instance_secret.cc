// Instance secret file. How this works: open without following symlinks,
// check what fstat says about the open file (not the path, so nothing can be
// swapped in between), read exactly 32 bytes. A missing file is created with
// O_EXCL from RAND_bytes, written and fsync'd before it is read back the same
// way; if another process created it first, its file is the one read.
#include "broker/instance_secret.h"

#include <fcntl.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::broker {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

base::Result<void, std::string> create_secret_file(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    if (errno == EEXIST) return {};  // created meanwhile by another process: read theirs
    return base::Err{path + ": cannot create: " + errno_text()};
  }
  InstanceSecretBytes bytes{};
  RAND_bytes(bytes.data(), bytes.size());
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      OPENSSL_cleanse(bytes.data(), bytes.size());
      ::unlink(path.c_str());
      return base::Err{path + ": cannot write: " + errno_text()};
    }
    done += static_cast<std::size_t>(n);
  }
  OPENSSL_cleanse(bytes.data(), bytes.size());
  if (::fsync(fd.get()) != 0) return base::Err{path + ": cannot sync: " + errno_text()};
  return {};
}

}  // namespace

base::Result<InstanceSecret, std::string> InstanceSecret::load_or_create(const std::string& state_dir) {
  const std::string path = state_dir + "/" + kFileName;
  if (auto created = create_secret_file(path); !created) return base::Err{created.error()};

  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return base::Err{path + ": " + errno_text()};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return base::Err{path + ": " + errno_text()};
  if (!S_ISREG(st.st_mode)) return base::Err{path + ": not a regular file"};
  if (st.st_uid != ::geteuid()) return base::Err{path + ": owned by another user"};
  if ((st.st_mode & 077) != 0)
    return base::Err{path + ": readable or writable by group or others: chmod 600 it"};
  if (st.st_size != static_cast<off_t>(kInstanceSecretBytes)) {
    return base::Err{path + ": not " + std::to_string(kInstanceSecretBytes) + " bytes long"};
  }
  InstanceSecret secret;
  std::size_t done = 0;
  while (done < secret.bytes_.size()) {
    ssize_t n = ::read(fd.get(), secret.bytes_.data() + done, secret.bytes_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::Err{path + ": short read"};
    done += static_cast<std::size_t>(n);
  }
  return secret;
}

InstanceSecret InstanceSecret::from_bytes(const InstanceSecretBytes& bytes) {
  InstanceSecret secret;
  secret.bytes_ = bytes;
  return secret;
}

InstanceSecret::InstanceSecret(InstanceSecret&& other) noexcept : bytes_(other.bytes_) {
  OPENSSL_cleanse(other.bytes_.data(), other.bytes_.size());
}

InstanceSecret& InstanceSecret::operator=(InstanceSecret&& other) noexcept {
  if (this != &other) {
    bytes_ = other.bytes_;
    OPENSSL_cleanse(other.bytes_.data(), other.bytes_.size());
  }
  return *this;
}

InstanceSecret::~InstanceSecret() {
  OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

}  // namespace abox::broker
