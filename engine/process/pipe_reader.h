// PipeReader: reads one pipe (a child's stdout, stderr or event stream) on
// the io_context until end of file, handing each chunk to its owner as it
// comes. The read buffer is fixed (16 KiB): a child that writes without end
// costs a bounded amount of memory here; what the owner keeps is its choice.
//
// LineSplitter turns such chunks into lines of at most max_line bytes (a
// longer line is cut there and counted), for the ready lines and JSON events
// of abox-net and the broker. TailLog writes chunks to a file up to a cap and
// keeps the last few KiB in memory, for a child's stderr or the guest console:
// what a crash report shows.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"

namespace abox::engine {

class PipeReader {
 public:
  using DataHandler = std::function<void(std::span<const std::uint8_t>)>;
  using EofHandler = std::function<void()>;
  PipeReader(boost::asio::io_context& io, base::UniqueFd read_end, DataHandler on_data, EofHandler on_eof);
  PipeReader(const PipeReader&) = delete;
  PipeReader& operator=(const PipeReader&) = delete;
  ~PipeReader();

  bool at_eof() const { return eof_; }
  // Stops reading after the read in flight (the pipe fills and its writer
  // waits), and starts again: the owner's backpressure.
  void pause() { paused_ = true; }
  void resume();

 private:
  void read_more();
  boost::asio::posix::stream_descriptor pipe_;
  DataHandler on_data_;
  EofHandler on_eof_;
  std::vector<std::uint8_t> buffer_;
  bool eof_ = false;
  bool paused_ = false;
  bool reading_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class LineSplitter {
 public:
  using LineHandler = std::function<void(std::string_view line)>;
  LineSplitter(std::size_t max_line, LineHandler on_line)
      : max_line_(max_line), on_line_(std::move(on_line)) {}
  void feed(std::span<const std::uint8_t> bytes);
  void finish();  // a last line without its newline
  std::uint64_t lines_cut() const { return lines_cut_; }

 private:
  std::size_t max_line_;
  LineHandler on_line_;
  std::string partial_;
  bool cutting_ = false;  // dropping the rest of a line that was too long
  std::uint64_t lines_cut_ = 0;
};

class TailLog {
 public:
  // path "" keeps only the tail in memory.
  TailLog(const std::string& path, std::uint64_t max_file_bytes, std::size_t tail_bytes = 4096);
  void write(std::span<const std::uint8_t> bytes);
  // The last tail_bytes written, as text.
  std::string tail() const;
  std::uint64_t dropped_bytes() const { return dropped_; }

 private:
  base::UniqueFd file_;
  std::uint64_t max_file_bytes_;
  std::uint64_t written_ = 0;
  std::uint64_t dropped_ = 0;
  std::size_t tail_bytes_;
  std::string tail_;
};

// A pipe whose ends are close-on-exec (pass an end to a child through ChildSpec::fds).
struct PipeEnds {
  base::UniqueFd read;
  base::UniqueFd write;
};
PipeEnds make_pipe();  // throws std::system_error (startup only)

// /dev/null opened read-write, close-on-exec.
base::UniqueFd open_dev_null();

}  // namespace abox::engine
