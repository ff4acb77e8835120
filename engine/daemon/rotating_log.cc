#include "engine/daemon/rotating_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace abox::engine {

RotatingLog::RotatingLog(std::string path, std::uint64_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes) {
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  struct stat st {};
  if (fd_ && ::fstat(fd_.get(), &st) == 0) size_ = static_cast<std::uint64_t>(st.st_size);
}

void RotatingLog::open_fresh() {
  std::string older = path_ + ".1";
  ::rename(path_.c_str(), older.c_str());
  ++rotations_;
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  size_ = 0;
}

void RotatingLog::write(std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    if (size_ >= max_bytes_) open_fresh();
    if (!fd_) {
      dropped_ += bytes.size();
      return;
    }
    std::size_t room = static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes_ - size_, bytes.size()));
    ssize_t n = ::write(fd_.get(), bytes.data(), room);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      dropped_ += bytes.size();
      return;
    }
    size_ += static_cast<std::uint64_t>(n);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

}  // namespace abox::engine
