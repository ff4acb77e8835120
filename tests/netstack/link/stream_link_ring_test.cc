// StreamLink read through the event loop's ring, as GuestStack reads it
// (link.h): one read into the link's own input buffer, then every whole
// frame that read completed, handed out without another system call. The
// framing's nasty cases on that path: a frame split across two ring reads
// at every byte of its length prefix, one read holding 100 frames, a zero
// length, lengths over the maximum and under an Ethernet header, a peer
// that closes in the middle of a frame. The Link contract on this path is
// in link_contract_test.cc (StreamRing).
//
// The peer is the test itself at the other end of a socketpair; every wait
// is bounded (Harness::read_once's deadline).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/link/stream_link.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::size_t kMtu = 1500;
constexpr std::size_t kMaxFrame = kMtu + 14;

Bytes frame(std::size_t size, std::uint8_t tag) {
  Bytes f(size);
  for (std::size_t i = 0; i < size; ++i) f[i] = static_cast<std::uint8_t>(i * 13 + tag);
  return f;
}
// Sized once and filled, not grown: growing made GCC 12 at -O3 report false
// -Wstringop-overread in vector's insert.
Bytes record(const Bytes& f) {
  Bytes r(4 + f.size());
  for (std::size_t i = 0; i < 4; ++i) r[i] = static_cast<std::uint8_t>(f.size() >> (24 - 8 * i));
  std::copy(f.begin(), f.end(), r.begin() + 4);
  return r;
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A StreamLink over a socketpair (the test is the VMM) and an event loop
// that reads it the way GuestStack does.
class Harness final : public io::EventLoop::Completion {
 public:
  struct Read {
    bool completed = false;     // the ring read's result came
    std::vector<Bytes> frames;  // every whole frame it brought, in order
    // The heads of the oversize frames it dropped (link.h), with their lengths.
    std::vector<std::pair<Bytes, std::size_t>> heads;
    int error = 0;  // the errno that ended the link, if it did
  };

  Harness() {
    std::array<int, 2> sv{};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()), 0);
    vmm_ = base::UniqueFd(sv[1]);
    auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), kMtu);
    EXPECT_TRUE(made.ok());
    link_ = std::move(made).value();
    buf_.resize(link_->max_receive_size());
  }
  ~Harness() override { loop_.cancel_all(this, in_flight_); }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  StreamLink& link() { return *link_; }
  int completions() const { return completions_; }
  void write(const Bytes& b) {
    std::size_t done = 0;
    while (done < b.size()) {
      const ssize_t n = ::send(vmm_.get(), b.data() + done, b.size() - done, MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << std::strerror(errno);
      done += static_cast<std::size_t>(n);
    }
  }
  void close_vmm() { vmm_.reset(); }

  // One ring read, as GuestStack::on_link_read takes it: posted (unless one
  // is still in flight), waited for up to a second, then
  // finish_ring_receive() and receive_buffered() until nothing whole is left.
  Read read_once() {
    Read out;
    if (in_flight_ == 0) {
      const auto iov = link_->ring_receive_iovecs(buf_);
      EXPECT_EQ(iov.size(), 1u);
      io_uring_prep_readv(loop_.request(this), link_->fd(), iov.data(), static_cast<unsigned>(iov.size()),
                          ~std::uint64_t{0});
      ++in_flight_;
    }
    done_.reset();
    for (int turn = 0; turn < 50 && !done_; ++turn) loop_.run_once(base::Millis(20));
    if (!done_) return out;
    out.completed = true;
    auto r = link_->finish_ring_receive(*done_);
    for (int i = 0; i < 10000; ++i) {  // bounded: a read of kReadChunk bytes holds fewer frames
      if (!r.ok()) {
        out.error = r.error();
        break;
      }
      if (*r == 0) {
        const auto head = link_->last_oversize_head();
        if (!head) break;
        out.heads.emplace_back(Bytes(head->head.begin(), head->head.end()), head->frame_size);
      } else {
        out.frames.emplace_back(buf_.begin(), buf_.begin() + static_cast<long>(*r));
        EXPECT_FALSE(link_->last_oversize_head()) << "a frame delivered leaves no head";
      }
      r = link_->receive_buffered(buf_);
    }
    return out;
  }

 private:
  void on_complete(int res, std::uint32_t /*cqe_flags*/) override {
    --in_flight_;
    ++completions_;
    done_ = res;
  }

  base::UniqueFd vmm_;
  std::unique_ptr<StreamLink> link_;
  Bytes buf_;
  io::EventLoop loop_;
  std::size_t in_flight_ = 0;
  std::optional<int> done_;
  int completions_ = 0;
};

TEST(StreamLinkRingTest, AFrameSplitAcrossTwoReadsAtEveryByteOfItsLengthPrefix) {
  for (std::size_t cut = 1; cut <= StreamLink::kLengthPrefix; ++cut) {
    SCOPED_TRACE("cut after byte " + std::to_string(cut) + " of the length prefix");
    Harness h;
    const Bytes a = frame(60, 1);
    const Bytes b = frame(700, 2);
    const Bytes rb = record(b);
    h.write(cat({record(a), Bytes(rb.begin(), rb.begin() + static_cast<long>(cut))}));
    auto first = h.read_once();
    ASSERT_TRUE(first.completed);
    ASSERT_EQ(first.frames.size(), 1u) << "the whole frame before it, and nothing of the torn one";
    EXPECT_EQ(first.frames[0], a);
    EXPECT_EQ(first.error, 0);
    h.write(Bytes(rb.begin() + static_cast<long>(cut), rb.end()));
    auto second = h.read_once();
    ASSERT_TRUE(second.completed);
    ASSERT_EQ(second.frames.size(), 1u);
    EXPECT_EQ(second.frames[0], b);
    EXPECT_EQ(h.link().counters().frames_in, 2u);
    EXPECT_EQ(h.completions(), 2);
  }
}

TEST(StreamLinkRingTest, OneReadHoldingAHundredFramesDeliversThemAllWithoutAnotherRead) {
  Harness h;
  Bytes all;
  std::vector<Bytes> frames;
  for (std::uint8_t i = 0; i < 100; ++i) {
    frames.push_back(frame(60 + i, i));
    const Bytes r = record(frames.back());
    all.insert(all.end(), r.begin(), r.end());
  }
  h.write(all);
  auto read = h.read_once();
  ASSERT_TRUE(read.completed);
  EXPECT_EQ(h.completions(), 1) << "one read";
  EXPECT_EQ(read.frames, frames);
  EXPECT_EQ(h.link().counters().frames_in, 100u);
  // Nothing whole is left: the next call says so without a system call.
  Bytes buf(kMaxFrame);
  auto more = h.link().receive_buffered(buf);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(*more, 0u);
}

TEST(StreamLinkRingTest, AZeroLengthIsSkippedAndCounted) {
  Harness h;
  const Bytes a = frame(80, 3);
  h.write(cat({Bytes{0, 0, 0, 0}, record(a), Bytes{0, 0, 0, 0}}));
  auto read = h.read_once();
  ASSERT_EQ(read.frames.size(), 1u);
  EXPECT_EQ(read.frames[0], a);
  EXPECT_EQ(h.link().dropped_zero_length(), 2u);
  EXPECT_EQ(read.error, 0);
}

TEST(StreamLinkRingTest, LengthsOverTheMaximumAndRuntsAreSkippedAcrossReads) {
  Harness h;
  const Bytes big = frame(kMaxFrame + 1, 4);
  const Bytes rbig = record(big);
  const Bytes a = frame(kMaxFrame, 5);
  // The oversize frame's body is cut across two reads: the link skips it
  // as it arrives, then delivers what follows.
  h.write(Bytes(rbig.begin(), rbig.begin() + 100));
  auto first = h.read_once();
  ASSERT_TRUE(first.completed);
  EXPECT_TRUE(first.frames.empty());
  EXPECT_EQ(first.error, 0);
  h.write(cat({Bytes(rbig.begin() + 100, rbig.end()), record(frame(5, 6)), record(a)}));
  auto second = h.read_once();
  ASSERT_EQ(second.frames.size(), 1u);
  EXPECT_EQ(second.frames[0], a);
  EXPECT_EQ(h.link().counters().dropped_oversize, 1u);
  EXPECT_EQ(h.link().dropped_runt(), 1u);
  // A 4 GiB length costs no memory: skipped as it arrives, the link lives.
  h.write(Bytes{0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3});
  auto third = h.read_once();
  ASSERT_TRUE(third.completed);
  EXPECT_TRUE(third.frames.empty());
  EXPECT_EQ(third.error, 0);
  EXPECT_EQ(h.link().counters().dropped_oversize, 2u);
}

// An oversize frame whose head a read brought whole: the head (the first
// Link::kOversizeHeadBytes bytes) and the real length come out, the frames
// around it still arrive, and its body is skipped across reads.
TEST(StreamLinkRingTest, AnOversizeFrameLeavesItsHeadAndTheFramesAroundItArrive) {
  Harness h;
  const Bytes a = frame(100, 1);
  const Bytes big = frame(kMaxFrame + 700, 2);
  const Bytes rbig = record(big);
  const Bytes b = frame(kMaxFrame, 3);
  // The head and some of the body in the first read, the rest in the second.
  h.write(cat({record(a), Bytes(rbig.begin(), rbig.begin() + 4 + 1800)}));
  auto first = h.read_once();
  ASSERT_EQ(first.frames.size(), 1u);
  EXPECT_EQ(first.frames[0], a);
  ASSERT_EQ(first.heads.size(), 1u);
  EXPECT_EQ(first.heads[0].second, big.size());
  EXPECT_EQ(first.heads[0].first, Bytes(big.begin(), big.begin() + Link::kOversizeHeadBytes));
  h.write(cat({Bytes(rbig.begin() + 4 + 1800, rbig.end()), record(b)}));
  auto second = h.read_once();
  ASSERT_EQ(second.frames.size(), 1u);
  EXPECT_EQ(second.frames[0], b);
  EXPECT_TRUE(second.heads.empty());
  EXPECT_EQ(h.link().counters().dropped_oversize, 1u);
  EXPECT_EQ(h.link().counters().frames_in, 2u);
}

// A head cut by the end of a read is not kept (the link never waits for the
// rest of it): the frame is dropped and counted as before, no head comes out
// later, and the next frame arrives.
TEST(StreamLinkRingTest, AnOversizeHeadSplitAcrossReadsIsNotKept) {
  Harness h;
  const Bytes big = frame(kMaxFrame + 1, 4);
  const Bytes rbig = record(big);
  const Bytes a = frame(64, 5);
  h.write(Bytes(rbig.begin(), rbig.begin() + 4 + 600));
  auto first = h.read_once();
  ASSERT_TRUE(first.completed);
  EXPECT_TRUE(first.frames.empty());
  EXPECT_TRUE(first.heads.empty());
  EXPECT_EQ(h.link().counters().dropped_oversize, 1u);
  h.write(cat({Bytes(rbig.begin() + 4 + 600, rbig.end()), record(a)}));
  auto second = h.read_once();
  ASSERT_EQ(second.frames.size(), 1u);
  EXPECT_EQ(second.frames[0], a);
  EXPECT_TRUE(second.heads.empty());
}

// A head is at most kOversizeHeadBytes, for a frame one byte over the
// maximum and for a 4 GiB length alike (whose skip then goes on).
TEST(StreamLinkRingTest, AnOversizeHeadIsAtMostKOversizeHeadBytes) {
  Harness h;
  const Bytes big = frame(kMaxFrame + 1, 6);  // 1515 > kOversizeHeadBytes: cut
  Bytes huge = {0xFF, 0xFF, 0xFF, 0xFF};
  const Bytes body = frame(2000, 7);
  huge.insert(huge.end(), body.begin(), body.end());
  h.write(cat({record(big), huge}));
  auto r = h.read_once();
  ASSERT_EQ(r.heads.size(), 2u);
  EXPECT_EQ(r.heads[0].first.size(), Link::kOversizeHeadBytes);
  EXPECT_EQ(r.heads[1].second, 0xFFFF'FFFFu);
  EXPECT_EQ(r.heads[1].first, Bytes(body.begin(), body.begin() + Link::kOversizeHeadBytes));
  EXPECT_EQ(r.error, 0);
}

TEST(StreamLinkRingTest, APeerClosingMidFrameEndsTheLinkAfterTheWholeFrames) {
  Harness h;
  const Bytes a = frame(90, 7);
  const Bytes rb = record(frame(500, 8));
  h.write(cat({record(a), Bytes(rb.begin(), rb.begin() + 200)}));
  h.close_vmm();
  std::vector<Bytes> got;
  int error = 0;
  for (int reads = 0; reads < 5 && error == 0; ++reads) {
    auto r = h.read_once();
    ASSERT_TRUE(r.completed);
    got.insert(got.end(), r.frames.begin(), r.frames.end());
    error = r.error;
  }
  ASSERT_EQ(got.size(), 1u) << "the torn frame is never handed out";
  EXPECT_EQ(got[0], a);
  EXPECT_EQ(error, ECONNRESET);
  EXPECT_EQ(h.link().counters().frames_in, 1u);
  // Dead from then on, on every path.
  Bytes buf(kMaxFrame);
  EXPECT_FALSE(h.link().receive_buffered(buf).ok());
  EXPECT_FALSE(h.link().receive(buf).ok());
}

}  // namespace
}  // namespace abox::netstack
