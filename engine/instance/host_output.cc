#include "engine/instance/host_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <string>

namespace abox::engine {
namespace {

// A non-blocking file description of our own for a pipe or terminal, or -1.
int reopen_nonblocking(int fd, int access) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) return -1;
  if (S_ISCHR(st.st_mode) && ::isatty(fd) == 0) return -1;  // /dev/null and friends: plain I/O never waits
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  return ::open(path.c_str(), access | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
}

}  // namespace

HostOutput::HostOutput(boost::asio::io_context& io, int fd) : fd_(fd), async_(io) {
  int own = reopen_nonblocking(fd, O_WRONLY);
  if (own >= 0) async_.assign(own);
}

HostOutput::~HostOutput() {
  *alive_ = false;
  boost::system::error_code ignored;
  async_.close(ignored);
}

void HostOutput::write(std::span<const std::uint8_t> bytes, std::function<void()> done) {
  queue_.push_back({std::vector<std::uint8_t>(bytes.begin(), bytes.end()), std::move(done)});
  if (!writing_) write_more();
}

void HostOutput::mark_broken() {
  if (broken_) return;
  broken_ = true;
  if (on_broken_) on_broken_();
}

void HostOutput::finish_front() {
  auto done = std::move(queue_.front().done);
  queue_.pop_front();
  if (done) done();
}

void HostOutput::write_more() {
  while (!queue_.empty()) {
    if (broken_) {
      finish_front();
      continue;
    }
    if (async_.is_open()) {
      writing_ = true;
      boost::asio::async_write(async_, boost::asio::buffer(queue_.front().bytes),
                               [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
                                 if (!*alive) return;
                                 written_ += n;
                                 writing_ = false;
                                 if (ec) mark_broken();
                                 finish_front();
                                 if (*alive && !writing_) write_more();
                               });
      return;
    }
    // A regular file: plain writes.
    const auto& bytes = queue_.front().bytes;
    std::size_t at = 0;
    while (at < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + at, bytes.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        mark_broken();
        break;
      }
      at += static_cast<std::size_t>(n);
    }
    written_ += at;
    finish_front();
  }
}

HostInput::HostInput(boost::asio::io_context& io, int fd, DataHandler on_data, EofHandler on_eof)
    : io_(io),
      fd_(fd),
      async_(io),
      on_data_(std::move(on_data)),
      on_eof_(std::move(on_eof)),
      buffer_(64 * 1024) {
  int own = reopen_nonblocking(fd, O_RDONLY);
  if (own >= 0) async_.assign(own);
}

HostInput::~HostInput() {
  *alive_ = false;
  boost::system::error_code ignored;
  async_.close(ignored);
}

void HostInput::read(std::size_t max) {
  if (reading_ || eof_ || max == 0) return;
  max = std::min(max, buffer_.size());
  reading_ = true;
  auto complete = [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
    if (!*alive) return;
    reading_ = false;
    if (n > 0) on_data_(std::span(buffer_.data(), n));
    if (!*alive) return;
    if (ec || n == 0) {
      eof_ = true;
      if (on_eof_) on_eof_();
    }
  };
  if (async_.is_open()) {
    async_.async_read_some(boost::asio::buffer(buffer_.data(), max), complete);
    return;
  }
  // A regular file (or /dev/null): a read never waits; finish on the loop, not inside the caller.
  ssize_t n;
  do {
    n = ::read(fd_, buffer_.data(), max);
  } while (n < 0 && errno == EINTR);
  boost::system::error_code ec;
  if (n < 0) ec = boost::system::error_code(errno, boost::system::system_category());
  boost::asio::post(io_,
                    [complete, ec, got = n < 0 ? 0 : static_cast<std::size_t>(n)] { complete(ec, got); });
}

}  // namespace abox::engine
