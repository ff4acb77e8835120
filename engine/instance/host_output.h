// HostOutput: where the guest command's stdout or stderr goes on the host
// (this process's fd 1 or 2), written without ever blocking the io_context.
//
// A pipe or a terminal is opened again through /proc/self/fd/N, so that
// O_NONBLOCK is set on a file description of our own and not on the one the
// shell shares with us; writes then wait for room on the io_context. A
// regular file (or anything that cannot be reopened) gets plain writes, which
// do not wait on a reader. Each chunk's `done` runs once it is written: that
// is when the guest gets the credit back, so a slow reader of abox's stdout
// slows the command in the guest, and the host holds at most the credit.
// After a write error (EPIPE: the reader went away) output is discarded and
// `done` still runs, so the command is never stuck on a reader that left;
// on_broken runs once, so the owner can tell the command (a pipeline's
// writer gets SIGPIPE when its reader goes: `abox run -- yes | head -1` ends).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/unique_fd.h"

namespace abox::engine {

class HostOutput {
 public:
  HostOutput(boost::asio::io_context& io, int fd);
  HostOutput(const HostOutput&) = delete;
  HostOutput& operator=(const HostOutput&) = delete;
  ~HostOutput();

  void write(std::span<const std::uint8_t> bytes, std::function<void()> done);
  void on_broken(std::function<void()> f) { on_broken_ = std::move(f); }
  bool idle() const { return queue_.empty(); }
  std::uint64_t bytes_written() const { return written_; }
  bool broken() const { return broken_; }

 private:
  struct Chunk {
    std::vector<std::uint8_t> bytes;
    std::function<void()> done;
  };
  void write_more();
  void finish_front();
  void mark_broken();

  int fd_;
  boost::asio::posix::stream_descriptor async_;  // when the fd could be reopened non-blocking
  std::deque<Chunk> queue_;
  bool writing_ = false;
  bool broken_ = false;
  std::function<void()> on_broken_;
  std::uint64_t written_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// HostInput: reads this process's stdin for the guest command, only as much
// as the caller asks (the guest's stdin credit), on the io_context.
class HostInput {
 public:
  using DataHandler = std::function<void(std::span<const std::uint8_t>)>;
  using EofHandler = std::function<void()>;
  HostInput(boost::asio::io_context& io, int fd, DataHandler on_data, EofHandler on_eof);
  HostInput(const HostInput&) = delete;
  HostInput& operator=(const HostInput&) = delete;
  ~HostInput();

  // Reads once, at most max bytes (no-op while a read is pending or after EOF).
  void read(std::size_t max);
  bool reading() const { return reading_; }
  bool at_eof() const { return eof_; }

 private:
  boost::asio::io_context& io_;
  int fd_;
  boost::asio::posix::stream_descriptor async_;
  DataHandler on_data_;
  EofHandler on_eof_;
  std::vector<std::uint8_t> buffer_;
  bool reading_ = false;
  bool eof_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
