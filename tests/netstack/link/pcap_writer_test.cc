// PcapWriter and RecordingLink: the file layout a pcap reader expects
// (global header, records with nanosecond stamps), buffering (nothing but
// the header reaches the file before a flush), the size cap (the file ends
// on a whole record and recording stops for good), snap length, file mode,
// and what the decorator records. tcpdump reading a real capture is in
// tests/e2e/ops_e2e.py.
#include "netstack/link/pcap_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "netstack/link/recording_link.h"
#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;

class PcapWriterTest : public ::testing::Test {
 protected:
  Bytes file() const {
    std::ifstream in(path_, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }
  static std::uint32_t u32(const Bytes& b, std::size_t at) {
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  }
  static std::uint16_t u16(const Bytes& b, std::size_t at) {
    std::uint16_t v = 0;
    std::memcpy(&v, b.data() + at, 2);
    return v;
  }
  static Bytes frame(std::size_t n, std::uint8_t fill) { return Bytes(n, fill); }

  abox::testing::TempDir dir_{"abox-pcap-test"};
  std::string path_ = dir_.file("cap.pcap");
};

TEST_F(PcapWriterTest, HeaderIsClassicPcapEthernetWithNanoseconds) {
  auto w = PcapWriter::create(path_, 1 << 20);
  ASSERT_TRUE(w.ok()) << w.error();
  Bytes b = file();
  ASSERT_EQ(b.size(), PcapWriter::kFileHeaderBytes);
  EXPECT_EQ(u32(b, 0), 0xa1b23c4du);
  EXPECT_EQ(u16(b, 4), 2);
  EXPECT_EQ(u16(b, 6), 4);
  EXPECT_EQ(u32(b, 8), 0u);
  EXPECT_EQ(u32(b, 12), 0u);
  EXPECT_EQ(u32(b, 16), PcapWriter::kSnapLen);
  EXPECT_EQ(u32(b, 20), 1u);  // LINKTYPE_ETHERNET
}

TEST_F(PcapWriterTest, RecordsAreBufferedUntilFlushThenWrittenInOrder) {
  auto w = PcapWriter::create(path_, 1 << 20);
  ASSERT_TRUE(w.ok());
  w->record(frame(60, 0xaa), 1'700'000'000'123'456'789ull);
  w->record(frame(1514, 0xbb), 1'700'000'001'000'000'001ull);
  EXPECT_EQ(file().size(), PcapWriter::kFileHeaderBytes) << "one write per buffer, not per frame";
  w->flush();
  Bytes b = file();
  ASSERT_EQ(b.size(), 24u + 16 + 60 + 16 + 1514);
  EXPECT_EQ(u32(b, 24), 1'700'000'000u);
  EXPECT_EQ(u32(b, 28), 123'456'789u);
  EXPECT_EQ(u32(b, 32), 60u);
  EXPECT_EQ(u32(b, 36), 60u);
  EXPECT_EQ(b[40], 0xaa);
  EXPECT_EQ(b[40 + 59], 0xaa);
  const std::size_t second = 40 + 60;
  EXPECT_EQ(u32(b, second), 1'700'000'001u);
  EXPECT_EQ(u32(b, second + 4), 1u);
  EXPECT_EQ(u32(b, second + 8), 1514u);
  EXPECT_EQ(b[second + 16], 0xbb);
  EXPECT_EQ(w->counters().frames_written, 2u);
  EXPECT_EQ(w->counters().bytes_written, b.size());
}

TEST_F(PcapWriterTest, DestructionFlushes) {
  {
    auto w = PcapWriter::create(path_, 1 << 20);
    ASSERT_TRUE(w.ok());
    w->record(frame(42, 1));
  }
  EXPECT_EQ(file().size(), 24u + 16 + 42);
}

TEST_F(PcapWriterTest, AFullBufferGoesToTheFileWithoutAFlush) {
  auto w = PcapWriter::create(path_, 1 << 30);
  ASSERT_TRUE(w.ok());
  const std::size_t per = 16 + 1514;
  const std::size_t n = PcapWriter::kBufferBytes / per + 2;
  for (std::size_t i = 0; i < n; ++i) w->record(frame(1514, static_cast<std::uint8_t>(i)));
  const std::size_t on_disk = file().size();
  EXPECT_GT(on_disk, PcapWriter::kFileHeaderBytes);
  EXPECT_LE(on_disk, 24 + n * per);
  EXPECT_EQ((on_disk - 24) % per, 0u) << "the buffer is written on record boundaries";
}

TEST_F(PcapWriterTest, TheCapStopsOnAWholeRecordAndForGood) {
  const std::uint64_t cap = 24 + 2 * (16 + 100) + 50;  // room for two records and a bit
  auto w = PcapWriter::create(path_, cap);
  ASSERT_TRUE(w.ok());
  w->record(frame(100, 1));
  w->record(frame(100, 2));
  w->record(frame(100, 3));  // crosses the cap
  w->record(frame(10, 4));   // would fit, but recording has stopped
  EXPECT_TRUE(w->stopped());
  w->flush();
  Bytes b = file();
  EXPECT_EQ(b.size(), 24u + 2 * (16 + 100));
  EXPECT_LE(b.size(), cap);
  EXPECT_EQ(w->counters().frames_written, 2u);
  EXPECT_EQ(w->counters().frames_over_cap, 2u);
  EXPECT_EQ(w->counters().write_errors, 0u);
}

TEST_F(PcapWriterTest, ACapBelowTheHeaderIsRefused) {
  auto w = PcapWriter::create(path_, 23);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().find("at least 24"), std::string::npos) << w.error();
}

TEST_F(PcapWriterTest, FramesLongerThanTheSnapLengthAreCut) {
  auto w = PcapWriter::create(path_, 1 << 20);
  ASSERT_TRUE(w.ok());
  w->record(frame(PcapWriter::kSnapLen + 100, 7));
  w->flush();
  Bytes b = file();
  ASSERT_EQ(b.size(), 24u + 16 + PcapWriter::kSnapLen);
  EXPECT_EQ(u32(b, 32), PcapWriter::kSnapLen);
  EXPECT_EQ(u32(b, 36), PcapWriter::kSnapLen + 100);
}

TEST_F(PcapWriterTest, TheFileIsMode0600EvenWhenItExisted) {
  {
    std::ofstream old(path_);
    old << "old contents that must go";
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  auto w = PcapWriter::create(path_, 1 << 20);
  ASSERT_TRUE(w.ok());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(file().size(), PcapWriter::kFileHeaderBytes) << "truncated";
}

TEST_F(PcapWriterTest, ASymlinkIsNotFollowed) {
  const std::string link = dir_.file("link");
  ASSERT_EQ(::symlink(path_.c_str(), link.c_str()), 0);
  auto w = PcapWriter::create(link, 1 << 20);
  EXPECT_FALSE(w.ok());
  struct stat st {};
  EXPECT_NE(::stat(path_.c_str(), &st), 0) << "the symlink's target was created";
}

TEST_F(PcapWriterTest, AFileThatCannotBeWrittenIsAStartupError) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/full", &before), 0);
  auto w = PcapWriter::create("/dev/full", 1 << 20);
  EXPECT_FALSE(w.ok());
  struct stat after {};
  ASSERT_EQ(::stat("/dev/full", &after), 0);
  EXPECT_EQ(before.st_mode, after.st_mode) << "a device's mode is not ours to change";
}

// A link that hands out queued frames and takes frames until told it is full.
class QueueLink final : public Link {
 public:
  int fd() const override { return 42; }
  std::size_t mtu() const override { return 1500; }
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) override {
    if (incoming.empty()) return std::size_t{0};
    Bytes f = std::move(incoming.front());
    incoming.pop_front();
    std::memcpy(buf.data(), f.data(), f.size());
    return f.size();
  }
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override {
    if (full) return base::Err{EAGAIN};
    if (frame.size() > 1514) return base::Err{EMSGSIZE};  // dropped and counted, as a tap does
    sent.emplace_back(frame.begin(), frame.end());
    ++counters_.frames_out;
    return {};
  }
  const LinkCounters& counters() const override { return counters_; }

  std::deque<Bytes> incoming;
  std::vector<Bytes> sent;
  bool full = false;
  LinkCounters counters_;
};

TEST_F(PcapWriterTest, RecordingLinkRecordsWhatCrossesTheLinkAndNothingElse) {
  auto w = PcapWriter::create(path_, 1 << 20);
  ASSERT_TRUE(w.ok());
  QueueLink inner;
  inner.counters_.frames_in = 1234;
  RecordingLink link(inner, *w);
  EXPECT_EQ(link.fd(), 42);
  EXPECT_EQ(link.mtu(), 1500u);
  EXPECT_EQ(link.counters().frames_in, 1234u);

  inner.incoming.push_back(frame(64, 0x11));
  Bytes buf(1514);
  auto got = link.receive(buf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 64u);
  auto none = link.receive(buf);  // nothing waiting: nothing recorded
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);

  Bytes out = frame(70, 0x22);
  ASSERT_TRUE(link.send(out).ok());
  inner.full = true;
  Bytes dropped = frame(80, 0x33);
  EXPECT_FALSE(link.send(dropped).ok());  // EAGAIN: never reached the guest
  inner.full = false;
  Bytes oversize = frame(2000, 0x44);
  EXPECT_FALSE(link.send(oversize).ok());  // EMSGSIZE: dropped by the link, not in the file either
  ASSERT_EQ(inner.sent.size(), 1u);

  w->flush();
  Bytes b = file();
  ASSERT_EQ(b.size(), 24u + 16 + 64 + 16 + 70);
  EXPECT_EQ(u32(b, 32), 64u);
  EXPECT_EQ(b[40], 0x11);
  EXPECT_EQ(u32(b, 40 + 64 + 8), 70u);
  EXPECT_EQ(b[40 + 64 + 16], 0x22);
}

}  // namespace
}  // namespace abox::netstack
