// PcapWriter: frames to a classic pcap file (LINKTYPE_ETHERNET, nanosecond
// timestamps: magic 0xa1b23c4d), readable by tcpdump, tshark and Wireshark.
//
// How it works: record() appends a 16-byte record header and the frame to an
// in-memory buffer; the buffer goes to the file with one write() when it is
// full, when flush() is called (abox-net calls it from a timer about once a
// second) and when the writer is destroyed. So a busy link costs one write
// per kBufferBytes, not one per frame.
//
// Limits: the file never grows past max_bytes (the global header included).
// A frame that would cross the cap is not written, and neither is anything
// after it: recording stops for good and every later frame is counted in
// frames_over_cap. A write error stops recording too (counted once in
// write_errors); the data path never fails because of the capture.
// Frames longer than kSnapLen are cut to kSnapLen in the file (the record
// keeps the original length, as pcap does).
//
// The file is created 0600 (it holds every byte the guest sent and got), or
// made 0600 and truncated if it exists; a symlink is not followed. A FIFO
// works too (tcpdump -r - reading live), and keeps its mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::netstack {

struct PcapCounters {
  std::uint64_t frames_written = 0;  // in the buffer or the file
  std::uint64_t bytes_written = 0;   // file bytes, headers included (buffered too)
  std::uint64_t frames_over_cap = 0;
  std::uint64_t write_errors = 0;
};

class PcapWriter {
 public:
  static constexpr std::uint32_t kSnapLen = 65535 + 14;  // the largest frame a link delivers
  static constexpr std::size_t kBufferBytes = 256 * 1024;
  static constexpr std::size_t kFileHeaderBytes = 24;
  static constexpr std::size_t kRecordHeaderBytes = 16;

  // Creates (or truncates) path, 0600, and writes the global header.
  // max_bytes must leave room for the header. Startup: the error is a message.
  static base::Result<PcapWriter, std::string> create(const std::string& path, std::uint64_t max_bytes);

  PcapWriter(PcapWriter&&) = default;
  PcapWriter& operator=(PcapWriter&&) = default;
  ~PcapWriter();

  // Appends one frame stamped with the wall clock time (ns since the epoch).
  void record(std::span<const std::uint8_t> frame, std::uint64_t unix_ns);
  // Same, stamped with CLOCK_REALTIME now.
  void record(std::span<const std::uint8_t> frame);
  // Writes the buffered records to the file.
  void flush();

  bool stopped() const { return stopped_; }
  const PcapCounters& counters() const { return counters_; }

 private:
  PcapWriter(base::UniqueFd fd, std::uint64_t max_bytes);
  void stop_with_error();

  base::UniqueFd fd_;
  std::uint64_t max_bytes_;
  std::vector<std::uint8_t> buffer_;
  bool stopped_ = false;
  PcapCounters counters_;
};

}  // namespace abox::netstack
