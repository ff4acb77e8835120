#include "netstack/link/pcap_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace abox::netstack {

namespace {

constexpr std::uint32_t kMagicNanoseconds = 0xa1b23c4d;
constexpr std::uint32_t kLinktypeEthernet = 1;

// pcap is written in the writer's byte order; readers look at the magic.
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  std::uint8_t b[4];
  std::memcpy(b, &v, sizeof b);
  out.insert(out.end(), b, b + sizeof b);
}
void put_u16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  std::uint8_t b[2];
  std::memcpy(b, &v, sizeof b);
  out.insert(out.end(), b, b + sizeof b);
}

// Writes all of bytes; false on any error (ENOSPC included).
bool write_all(int fd, std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

base::Result<PcapWriter, std::string> PcapWriter::create(const std::string& path, std::uint64_t max_bytes) {
  if (max_bytes < kFileHeaderBytes) {
    return base::Err{std::string("the pcap size cap must be at least ") + std::to_string(kFileHeaderBytes) +
                     " bytes"};
  }
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return base::Err{"cannot create " + path + ": " + std::strerror(errno)};
  // An existing file keeps its mode through O_CREAT: make it 0600 as
  // promised. Only a regular file: a FIFO or device is the operator's.
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return base::Err{"cannot stat " + path + ": " + std::strerror(errno)};
  if (S_ISREG(st.st_mode) && ::fchmod(fd.get(), 0600) != 0) {
    return base::Err{"cannot chmod " + path + ": " + std::strerror(errno)};
  }
  std::vector<std::uint8_t> header;
  put_u32(header, kMagicNanoseconds);
  put_u16(header, 2);  // version 2.4
  put_u16(header, 4);
  put_u32(header, 0);  // thiszone: timestamps are UTC
  put_u32(header, 0);  // sigfigs
  put_u32(header, kSnapLen);
  put_u32(header, kLinktypeEthernet);
  if (!write_all(fd.get(), header)) return base::Err{"cannot write " + path + ": " + std::strerror(errno)};
  PcapWriter w(std::move(fd), max_bytes);
  w.counters_.bytes_written = header.size();
  return w;
}

PcapWriter::PcapWriter(base::UniqueFd fd, std::uint64_t max_bytes)
    : fd_(std::move(fd)), max_bytes_(max_bytes) {
  buffer_.reserve(kBufferBytes);
}

PcapWriter::~PcapWriter() {
  flush();
}

void PcapWriter::record(std::span<const std::uint8_t> frame) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  record(frame,
         static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec));
}

void PcapWriter::record(std::span<const std::uint8_t> frame, std::uint64_t unix_ns) {
  if (!fd_) return;  // moved from
  if (stopped_) {
    ++counters_.frames_over_cap;
    return;
  }
  const std::size_t kept = std::min<std::size_t>(frame.size(), kSnapLen);
  const std::uint64_t record_bytes = kRecordHeaderBytes + kept;
  if (counters_.bytes_written + record_bytes > max_bytes_) {
    // The cap is reached: stop here, so the file ends on a whole record.
    stopped_ = true;
    ++counters_.frames_over_cap;
    flush();
    return;
  }
  if (buffer_.size() + record_bytes > kBufferBytes) {
    flush();
    if (stopped_) {
      ++counters_.frames_over_cap;
      return;
    }
  }
  put_u32(buffer_, static_cast<std::uint32_t>(unix_ns / 1'000'000'000u));
  put_u32(buffer_, static_cast<std::uint32_t>(unix_ns % 1'000'000'000u));
  put_u32(buffer_, static_cast<std::uint32_t>(kept));
  put_u32(buffer_, static_cast<std::uint32_t>(frame.size()));
  buffer_.insert(buffer_.end(), frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(kept));
  ++counters_.frames_written;
  counters_.bytes_written += record_bytes;
}

void PcapWriter::flush() {
  if (!fd_ || buffer_.empty()) return;
  if (!write_all(fd_.get(), buffer_)) stop_with_error();
  buffer_.clear();
}

void PcapWriter::stop_with_error() {
  ++counters_.write_errors;
  stopped_ = true;
}

}  // namespace abox::netstack
