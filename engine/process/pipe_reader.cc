#include "engine/process/pipe_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/error.hpp>
#include <cerrno>
#include <system_error>

namespace abox::engine {

PipeReader::PipeReader(boost::asio::io_context& io, base::UniqueFd read_end, DataHandler on_data,
                       EofHandler on_eof)
    : pipe_(io), on_data_(std::move(on_data)), on_eof_(std::move(on_eof)), buffer_(16 * 1024) {
  pipe_.assign(read_end.release());
  read_more();
}

PipeReader::~PipeReader() {
  *alive_ = false;
  boost::system::error_code ignored;
  pipe_.close(ignored);
}

void PipeReader::resume() {
  paused_ = false;
  if (!reading_ && !eof_) read_more();
}

void PipeReader::read_more() {
  if (paused_ || eof_) return;
  reading_ = true;
  pipe_.async_read_some(boost::asio::buffer(buffer_),
                        [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
                          if (!*alive) return;
                          reading_ = false;
                          if (n > 0) on_data_(std::span(buffer_.data(), n));
                          if (!*alive) return;
                          if (ec) {
                            if (ec == boost::asio::error::operation_aborted) return;
                            eof_ = true;
                            if (on_eof_) on_eof_();
                            return;
                          }
                          read_more();
                        });
}

void LineSplitter::feed(std::span<const std::uint8_t> bytes) {
  for (std::uint8_t b : bytes) {
    if (b == '\n') {
      if (!cutting_) on_line_(partial_);
      partial_.clear();
      cutting_ = false;
      continue;
    }
    if (cutting_) continue;
    if (partial_.size() == max_line_) {
      ++lines_cut_;
      on_line_(partial_);
      partial_.clear();
      cutting_ = true;
      continue;
    }
    partial_.push_back(static_cast<char>(b));
  }
}

void LineSplitter::finish() {
  if (!partial_.empty() && !cutting_) on_line_(partial_);
  partial_.clear();
  cutting_ = false;
}

TailLog::TailLog(const std::string& path, std::uint64_t max_file_bytes, std::size_t tail_bytes)
    : max_file_bytes_(max_file_bytes), tail_bytes_(tail_bytes) {
  if (!path.empty())
    file_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
}

void TailLog::write(std::span<const std::uint8_t> bytes) {
  if (file_) {
    std::uint64_t room = written_ < max_file_bytes_ ? max_file_bytes_ - written_ : 0;
    std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(room, bytes.size()));
    std::size_t done = 0;
    while (done < take) {
      ssize_t n = ::write(file_.get(), bytes.data() + done, take - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    written_ += done;
    dropped_ += bytes.size() - done;
  }
  tail_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (tail_.size() > tail_bytes_) tail_.erase(0, tail_.size() - tail_bytes_);
}

std::string TailLog::tail() const {
  return tail_;
}

PipeEnds make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
}

base::UniqueFd open_dev_null() {
  base::UniqueFd fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!fd) throw std::system_error(errno, std::generic_category(), "/dev/null");
  return fd;
}

}  // namespace abox::engine
