#include "base/private_file.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::base {

namespace {

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// Reads fd into `text` until EOF or until it holds `cap` bytes. False on a
// read error (errno kept).
bool read_up_to(int fd, std::string& text, std::size_t cap) {
  // One allocation of the whole cap (no growing: a reallocation would leave
  // a copy of the secret in freed memory).
  text.assign(cap, '\0');
  std::size_t done = 0;
  while (done < cap) {
    const ssize_t n = ::read(fd, text.data() + done, cap - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      wipe(text);
      text.clear();
      errno = saved;
      return false;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return true;
}

}  // namespace

void wipe(std::string& s) {
  if (!s.empty()) ::explicit_bzero(s.data(), s.size());
}

Result<std::string, PrivateFileError> read_private_file(const std::string& path, std::size_t max_bytes,
                                                        Readers readers) {
  using Fault = PrivateFileError::Fault;
  auto refuse = [&](Fault f, std::string what) {
    return Err{PrivateFileError{f, path + ": " + std::move(what)}};
  };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (!fd) {
    if (errno == ENOENT) return refuse(Fault::missing, std::strerror(errno));
    if (errno == ELOOP) return refuse(Fault::symlink, "is a symlink: give the file itself");
    return refuse(Fault::unreadable, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return refuse(Fault::unreadable, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return refuse(Fault::not_regular, "not a regular file");
  if (readers == Readers::owner_only) {
    if (st.st_uid != ::geteuid()) {
      return refuse(Fault::wrong_owner, "owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
                                            std::to_string(::geteuid()) + ")");
    }
    if ((st.st_mode & 077) != 0)
      return refuse(Fault::too_open, "group or others may read or write it: chmod 600 " + path);
  }
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return refuse(Fault::too_large, "larger than " + size_text(max_bytes));
  std::string text;
  // One byte past the size fstat() gave shows a file that grew meanwhile.
  const std::size_t cap = static_cast<std::size_t>(st.st_size) + 1;
  if (!read_up_to(fd.get(), text, cap)) return refuse(Fault::unreadable, std::strerror(errno));
  if (text.size() > max_bytes) {
    wipe(text);
    return refuse(Fault::too_large, "larger than " + size_text(max_bytes));
  }
  if (text.size() == cap) {
    wipe(text);
    return refuse(Fault::unreadable, "changed while it was read: try again");
  }
  return text;
}

Result<std::string, PrivateFileError> read_all_bounded(int fd, std::size_t max_bytes) {
  using Fault = PrivateFileError::Fault;
  std::string text;
  if (!read_up_to(fd, text, max_bytes + 1))
    return Err{PrivateFileError{Fault::unreadable, std::strerror(errno)}};
  if (text.size() > max_bytes) {
    wipe(text);
    return Err{PrivateFileError{Fault::too_large, "more than " + std::to_string(max_bytes) + " bytes"}};
  }
  return text;
}

}  // namespace abox::base
