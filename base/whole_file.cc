#include "base/whole_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::base {

namespace {

std::string size_text(std::size_t bytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

Err<WholeFileError> fail(WholeFileError::Kind kind, std::string message) {
  return Err{WholeFileError{kind, std::move(message)}};
}

}  // namespace

base::Result<std::string, WholeFileError> read_whole_fd(int fd, std::size_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(WholeFileError::Kind::kCannotRead, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return fail(WholeFileError::Kind::kFolder, "it is a folder, not a file");
  if (!S_ISREG(st.st_mode)) return fail(WholeFileError::Kind::kNotRegular, "it is not a regular file");
  const std::string too_large = "larger than " + size_text(max_bytes);
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return fail(WholeFileError::Kind::kTooLarge, too_large);
  std::string text;
  char buf[16384];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(WholeFileError::Kind::kCannotRead, std::strerror(errno));
    }
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (text.size() > max_bytes) return fail(WholeFileError::Kind::kTooLarge, too_large);
  }
}

base::Result<std::string, WholeFileError> read_whole_file(const std::string& path, std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return fail(WholeFileError::Kind::kCannotOpen, std::strerror(errno));
  return read_whole_fd(fd.get(), max_bytes);
}

}  // namespace abox::base
