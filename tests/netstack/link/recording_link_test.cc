// RecordingLink on the ring (abox-net run --pcap with the tap read and
// written through the event loop's ring, as GuestStack does): frames read
// and written on the ring are in the file; a ring write whose result is an
// error, and a frame the inner link drops before the write, are not. The
// file then holds exactly frames_in + frames_out frames, in order. The
// tap cases run a real tap in a namespace of the test's own (root only,
// as CI runs); the failed-write cases use a link that fakes its results.
// What the decorator records off the ring is in pcap_writer_test.cc.
#include "netstack/link/recording_link.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/event_loop.h"
#include "io/ring_writer.h"
#include "netstack/link/pcap_writer.h"
#include "netstack/link/tap_link.h"
#include "tests/netstack/link/link_test_support.h"
#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

using namespace link_test;  // NOLINT(google-build-using-namespace): the helpers of these tests
using Bytes = std::vector<std::uint8_t>;

constexpr std::size_t kMtu = 1500;

// The records of a pcap file: each one's bytes.
std::vector<Bytes> records_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const Bytes b{std::istreambuf_iterator<char>(in), {}};
  std::vector<Bytes> out;
  std::size_t at = PcapWriter::kFileHeaderBytes;
  while (at + 16 <= b.size()) {
    std::uint32_t len = 0;
    std::memcpy(&len, b.data() + at + 8, 4);
    if (at + 16 + len > b.size()) break;
    out.emplace_back(b.begin() + static_cast<long>(at + 16), b.begin() + static_cast<long>(at + 16 + len));
    at += 16 + len;
  }
  return out;
}

class RecordingLinkRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = PcapWriter::create(path_, 1 << 20);
    ASSERT_TRUE(w.ok()) << w.error();
    writer_.emplace(std::move(w).value());
  }
  std::vector<Bytes> records() {
    writer_->flush();
    return records_of(path_);
  }

  abox::testing::TempDir dir_{"abox-recording-ring"};
  std::string path_ = dir_.file("ring.pcap");
  std::optional<PcapWriter> writer_;
};

// A tap read and written through the ring behind a RecordingLink, as
// GuestStack does it with --pcap.
TEST_F(RecordingLinkRingTest, TapRingReadsAndWritesAreRecordedInOrder) {
  ABOX_NEEDS_ROOT(kNeedRoot);
  auto ns = std::make_unique<ScopedNetns>();
  base::UniqueFd fd = open_tap_in(ns->path(), "eth0", IFF_TAP | IFF_NO_PI);
  ASSERT_TRUE(fd);
  auto tap = TapLink::from_fd(std::move(fd), kMtu);
  ASSERT_TRUE(tap.ok()) << tap.error();
  TapPeer peer(std::move(ns), "eth0", kMtu);
  RecordingLink link(**tap, *writer_);
  ASSERT_FALSE(link.ring_receive_iovecs({}).empty()) << "the tap's ring read passes through";
  ASSERT_TRUE(link.ring_send_supported()) << "the tap's ring write passes through";

  io::EventLoop loop;
  struct Reader final : io::EventLoop::Completion {
    std::optional<int> res;
    std::size_t in_flight = 0;
    void on_complete(int r, std::uint32_t /*cqe_flags*/) override {
      --in_flight;
      res = r;
    }
  } reader;
  Bytes buf(link.max_receive_size());
  std::vector<Bytes> expect;

  // From the guest: one frame through a ring read (the peer's own traffic,
  // if any, is recorded too and skipped here).
  const Frame in = test_frame(100, 1);
  const auto iov = link.ring_receive_iovecs(buf);
  io_uring_prep_readv(loop.request(&reader), link.fd(), iov.data(), static_cast<unsigned>(iov.size()),
                      ~std::uint64_t{0});
  ++reader.in_flight;
  peer.inject(in);
  std::optional<std::size_t> got;
  for (int turn = 0; turn < 200 && !got; ++turn) {
    loop.run_once(base::Millis(20));
    if (!reader.res) continue;
    auto r = link.finish_ring_receive(*std::exchange(reader.res, std::nullopt));
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    if (*r != 0 && is_test_frame(Bytes(buf.begin(), buf.begin() + static_cast<long>(*r)))) {
      got = *r;
    } else {
      const auto again = link.ring_receive_iovecs(buf);
      io_uring_prep_readv(loop.request(&reader), link.fd(), again.data(), static_cast<unsigned>(again.size()),
                          ~std::uint64_t{0});
      ++reader.in_flight;
    }
  }
  ASSERT_TRUE(got) << "the frame never came through the ring read";
  EXPECT_EQ(Bytes(buf.begin(), buf.begin() + static_cast<long>(*got)), in);

  // To the guest: two frames through ring writes, in pieces, and one the
  // tap drops as oversize before any write.
  io::RingWriter ring_writer(loop, link.fd(), [&](int res, std::size_t size) {
    EXPECT_TRUE(link.finish_ring_send(res, size).ok());
  });
  auto ring_send = [&](const Frame& f) {
    const std::array<std::span<const std::uint8_t>, 2> pieces = {std::span(f).first(20),
                                                                 std::span(f).subspan(20)};
    const OutFrame frame{pieces};
    std::array<std::uint8_t, Link::kRingSendHeaderMax> header{};
    const auto header_size = link.ring_send_header(frame, header);
    if (!header_size) return false;
    const std::array<std::span<const std::uint8_t>, 3> parts = {std::span(header).first(*header_size),
                                                                pieces[0], pieces[1]};
    EXPECT_TRUE(ring_writer.write(parts, frame.size()));
    return true;
  };
  const Frame out1 = test_frame(200, 2);
  const Frame out2 = test_frame(kMtu + 14, 3);  // the largest frame; it fits a ring slot
  EXPECT_TRUE(ring_send(out1));
  EXPECT_FALSE(ring_send(test_frame(kMtu + 15, 4))) << "oversize: dropped before the write";
  EXPECT_TRUE(ring_send(out2));
  EXPECT_EQ(link.ring_sends_pending(), 2u);
  for (int turn = 0; turn < 200 && ring_writer.in_flight() != 0; ++turn) loop.run_once(base::Millis(20));
  EXPECT_EQ(link.ring_sends_pending(), 0u);
  for (const Frame* f : {&out1, &out2}) {
    auto sent = peer.next_sent(2s);
    ASSERT_TRUE(sent) << "a ring write never reached the guest";
    EXPECT_EQ(*sent, *f);
  }

  // The file: exactly frames_in + frames_out frames; ours in order.
  const auto recs = records();
  EXPECT_EQ(recs.size(), link.counters().frames_in + link.counters().frames_out);
  EXPECT_EQ(link.counters().frames_out, 2u);
  EXPECT_EQ(link.counters().dropped_oversize, 1u);
  std::vector<Bytes> ours;
  for (const Bytes& r : recs) {
    if (is_test_frame(r)) ours.push_back(r);
  }
  ASSERT_EQ(ours.size(), 3u);
  EXPECT_EQ(ours[0], in);
  EXPECT_EQ(ours[1], out1);
  EXPECT_EQ(ours[2], out2);
  loop.cancel_all(&reader, reader.in_flight);
}

// An inner link whose ring writes succeed or fail as the test says.
class FakeRingLink final : public Link {
 public:
  int fd() const override { return 7; }
  std::size_t mtu() const override { return kMtu; }
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> /*buf*/) override { return std::size_t{0}; }
  base::Result<void, int> send(std::span<const std::uint8_t> /*frame*/) override { return {}; }
  bool ring_send_supported() const override { return true; }
  std::optional<std::size_t> ring_send_header(const OutFrame& frame,
                                              std::span<std::uint8_t, kRingSendHeaderMax> header) override {
    if (frame.size() > mtu() + 14) {
      ++counters_.dropped_oversize;
      return std::nullopt;
    }
    header[0] = 0xEE;
    return 1;
  }
  base::Result<void, int> finish_ring_send(int res, std::size_t frame_size) override {
    if (res < 0) {
      ++counters_.dropped_send;
      return res == -EAGAIN ? base::Result<void, int>() : base::Result<void, int>(base::Err{-res});
    }
    ++counters_.frames_out;
    counters_.bytes_out += frame_size;
    return {};
  }
  const LinkCounters& counters() const override { return counters_; }

 private:
  LinkCounters counters_;
};

TEST_F(RecordingLinkRingTest, AFailedRingWriteIsNotRecorded) {
  FakeRingLink inner;
  RecordingLink link(inner, *writer_);
  const Bytes a(100, 0xA1), b(120, 0xB2), c(140, 0xC3);
  std::array<std::uint8_t, Link::kRingSendHeaderMax> header{};
  for (const Bytes* f : {&a, &b, &c}) {
    const std::array<std::span<const std::uint8_t>, 1> pieces = {*f};
    ASSERT_EQ(link.ring_send_header(OutFrame{pieces}, header), std::optional<std::size_t>(1));
  }
  EXPECT_EQ(header[0], 0xEE) << "the inner link's header";
  EXPECT_EQ(link.ring_sends_pending(), 3u);
  EXPECT_TRUE(link.finish_ring_send(-EAGAIN, a.size()).ok());  // a full tap: a never reached the guest
  EXPECT_TRUE(link.finish_ring_send(static_cast<int>(1 + b.size()), b.size()).ok());
  EXPECT_FALSE(link.finish_ring_send(-EIO, c.size()).ok());  // the inner link's errno comes back
  EXPECT_EQ(link.ring_sends_pending(), 0u);
  const auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0], b);
  EXPECT_EQ(recs.size(), inner.counters().frames_out);
}

TEST_F(RecordingLinkRingTest, AResultOutOfOrderFindsItsFrameBySize) {
  FakeRingLink inner;
  RecordingLink link(inner, *writer_);
  const Bytes a(100, 0xA1), b(120, 0xB2);
  std::array<std::uint8_t, Link::kRingSendHeaderMax> header{};
  for (const Bytes* f : {&a, &b}) {
    const std::array<std::span<const std::uint8_t>, 1> pieces = {*f};
    ASSERT_TRUE(link.ring_send_header(OutFrame{pieces}, header));
  }
  const Bytes big(kMtu + 15, 0xD4);
  const std::array<std::span<const std::uint8_t>, 1> big_pieces = {big};
  EXPECT_FALSE(link.ring_send_header(OutFrame{big_pieces}, header)) << "dropped by the inner link";
  EXPECT_EQ(link.ring_sends_pending(), 2u);
  EXPECT_TRUE(link.finish_ring_send(static_cast<int>(1 + b.size()), b.size()).ok());
  EXPECT_TRUE(link.finish_ring_send(static_cast<int>(1 + a.size()), a.size()).ok());
  const auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0], b);
  EXPECT_EQ(recs[1], a);
  EXPECT_EQ(inner.counters().dropped_oversize, 1u);
}

}  // namespace
}  // namespace abox::netstack
