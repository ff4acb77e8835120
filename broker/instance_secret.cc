// Instance secret file. How this works: read it as a private file
// (base/private_file.h: no symlink, a regular file, the owner's alone, what
// fstat says about the open file, not the path), exactly 32 bytes. A missing file is created with
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

#include "base/private_file.h"
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

  auto read = base::read_private_file(path, kInstanceSecretBytes);
  if (!read.ok()) return base::Err{std::move(read.error().message)};
  std::string& text = *read;
  if (text.size() != kInstanceSecretBytes) {
    base::wipe(text);
    return base::Err{path + ": not " + std::to_string(kInstanceSecretBytes) + " bytes long"};
  }
  InstanceSecret secret;
  std::memcpy(secret.bytes_.data(), text.data(), kInstanceSecretBytes);
  base::wipe(text);
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
