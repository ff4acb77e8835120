// The Link contract: one typed suite that every Link implementation joins
// with a factory returning the link and a peer for its far end (LinkPeer in
// link_test_support.h). The tap joins twice (create_in_netns and from_fd,
// each in a namespace of the test's own: skipped when not root, a failure
// where every test must run, tests/support/needs_root.h); the
// QEMU stream link joins over a real unix socket, a StreamListener at a path
// of the test's own with the test as the VMM.
//
// What every link must do: frames arrive whole and counted both ways, in
// order; many waiting frames are handed out without waiting; a frame cut
// across reads arrives whole; oversize and undersize frames are dropped and
// counted while the next good frame still arrives (a send of one returns
// EMSGSIZE, which does not end the link); a link that says tx_tso() takes
// a TCP frame over the MTU, IPv4 or IPv6, as one GSO packet the peer gets
// whole, and one that does not refuses it as oversize; a gone peer wakes the
// loop and is an error, not EAGAIN. The tap joins twice more and the stream
// link once more, read through an event loop's ring (RingRead: GuestStack's
// way, link.h), and the recording link (--pcap) joins around a stream link.
// Sent frames are checked after flush() (the end of the
// sender's turn): a link may batch its output until then.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/link/pcap_writer.h"
#include "netstack/link/recording_link.h"
#include "netstack/link/stream_link.h"
#include "netstack/link/tap_link.h"
#include "tests/netstack/link/link_test_support.h"
#include "tests/support/needs_root.h"
#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

using namespace link_test;  // NOLINT(google-build-using-namespace): the helpers of these tests

constexpr std::size_t kContractMtu = 1500;

struct TapInNetnsFactory {
  static constexpr const char* kName = "TapInNetns";
  static const char* skip_reason() { return is_root() ? nullptr : kNeedRoot; }
  static std::uint64_t runts(const Link& link) { return static_cast<const TapLink&>(link).dropped_runt(); }
  static LinkUnderTest make() {
    auto ns = std::make_unique<ScopedNetns>();
    GuestNetConfig config;
    config.mtu = kContractMtu;
    auto link = TapLink::create_in_netns(ns->name(), config);
    if (!link) {
      ADD_FAILURE() << link.error();
      return {};
    }
    LinkUnderTest out;
    out.peer = std::make_unique<TapPeer>(std::move(ns), config.ifname, kContractMtu);
    out.link = std::move(link).value();
    return out;
  }
};

struct TapFromFdFactory {
  static constexpr const char* kName = "TapFromFd";
  static const char* skip_reason() { return is_root() ? nullptr : kNeedRoot; }
  static std::uint64_t runts(const Link& link) { return static_cast<const TapLink&>(link).dropped_runt(); }
  static LinkUnderTest make() {
    auto ns = std::make_unique<ScopedNetns>();
    base::UniqueFd tap = open_tap_in(ns->path(), "eth0", IFF_TAP | IFF_NO_PI);
    if (!tap) {
      ADD_FAILURE() << "cannot open a tap in " << ns->name();
      return {};
    }
    auto link = TapLink::from_fd(std::move(tap), kContractMtu);
    if (!link) {
      ADD_FAILURE() << link.error();
      return {};
    }
    LinkUnderTest out;
    out.peer = std::make_unique<TapPeer>(std::move(ns), "eth0", kContractMtu);
    out.link = std::move(link).value();
    return out;
  }
};

// A link read through an event loop's ring, as GuestStack reads it: each
// receive() first takes a whole frame a read already brought
// (receive_buffered(), a stream's), else keeps one read posted
// (ring_receive_iovecs()) and turns the loop once without waiting; a
// completed read goes through finish_ring_receive() and its frame is copied
// out. So every case of the contract also holds for ring reads.
template <class L>
class RingRead final : public Link, io::EventLoop::Completion {
 public:
  explicit RingRead(std::unique_ptr<L> link) : link_(std::move(link)), buf_(link_->max_receive_size()) {}
  ~RingRead() override { loop_.cancel_all(this, in_flight_); }
  RingRead(const RingRead&) = delete;
  RingRead& operator=(const RingRead&) = delete;

  const L& inner() const { return *link_; }
  int fd() const override { return link_->fd(); }
  std::size_t mtu() const override { return link_->mtu(); }
  std::size_t max_receive_size() const override { return link_->max_receive_size(); }
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> out) override {
    // What the last read brought may hold more frames (never a system call).
    if (auto b = link_->receive_buffered(out); !b.ok() || *b != 0 || link_->last_oversize_head()) return b;
    for (int dropped = 0; dropped < 1000; ++dropped) {
      if (in_flight_ == 0) post();
      done_.reset();
      loop_.run_once(base::Millis(0));
      if (!done_) return std::size_t{0};
      auto r = link_->finish_ring_receive(*done_);
      if (!r.ok() || *r == 0) {
        if (!r.ok()) return r;
        // An oversize frame's head (in buf_): the caller's turn.
        if (link_->last_oversize_head()) return r;
        // Dropped and counted, or nothing whole yet: a stream's read may
        // still hold a frame behind a dropped one.
        auto b = link_->receive_buffered(out);
        if (!b.ok() || *b != 0 || link_->last_oversize_head()) return b;
        continue;
      }
      if (*r > out.size()) return base::Err{EMSGSIZE};  // the contract's buffers always fit
      std::copy_n(buf_.begin(), *r, out.begin());
      return *r;
    }
    return std::size_t{0};
  }
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override { return link_->send(frame); }
  base::Result<void, int> send_frame(const OutFrame& frame) override { return link_->send_frame(frame); }
  std::optional<OversizeHead> last_oversize_head() const override { return link_->last_oversize_head(); }
  bool tx_checksum_offload() const override { return link_->tx_checksum_offload(); }
  bool tx_tso() const override { return link_->tx_tso(); }
  bool output_pending() const override { return link_->output_pending(); }
  base::Result<void, int> flush() override { return link_->flush(); }
  const LinkCounters& counters() const override { return link_->counters(); }

 private:
  void on_complete(int res, std::uint32_t /*cqe_flags*/) override {
    --in_flight_;
    done_ = res;
  }
  void post() {
    const auto iov = link_->ring_receive_iovecs(buf_);
    ASSERT_FALSE(iov.empty()) << "the link is read on the ring";
    io_uring_sqe* s = loop_.request(this);
    io_uring_prep_readv(s, link_->fd(), iov.data(), static_cast<unsigned>(iov.size()), ~std::uint64_t{0});
    ++in_flight_;
  }

  std::unique_ptr<L> link_;
  Frame buf_;
  io::EventLoop loop_;
  std::size_t in_flight_ = 0;
  std::optional<int> done_;
};

template <class Factory, class L>
struct RingReadFactory {
  static const char* skip_reason() { return Factory::skip_reason(); }
  static std::uint64_t runts(const Link& link) {
    return static_cast<const RingRead<L>&>(link).inner().dropped_runt();
  }
  static LinkUnderTest make() {
    LinkUnderTest out = Factory::make();
    if (out.link) {
      out.link = std::make_unique<RingRead<L>>(std::unique_ptr<L>(static_cast<L*>(out.link.release())));
    }
    return out;
  }
};
struct TapInNetnsRingFactory : RingReadFactory<TapInNetnsFactory, TapLink> {
  static constexpr const char* kName = "TapInNetnsRing";
};
struct TapFromFdRingFactory : RingReadFactory<TapFromFdFactory, TapLink> {
  static constexpr const char* kName = "TapFromFdRing";
};

// The peer of a stream link: the VMM's end of the unix socket, connected to
// a StreamListener at a path of the test's own. It writes and reads QEMU's
// framing (4-byte big-endian length, then the frame).
class StreamPeer final : public LinkPeer {
 public:
  explicit StreamPeer(base::UniqueFd socket) : socket_(std::move(socket)) {}

  void inject(std::span<const std::uint8_t> frame) override { write_all(record(frame)); }

  bool inject_in_pieces(std::span<const std::uint8_t> frame, const std::function<void()>& between) override {
    const Frame bytes = record(frame);
    // Inside the length prefix, then inside the frame, then the rest.
    const std::size_t cuts[] = {2, 4 + frame.size() / 3, bytes.size()};
    std::size_t from = 0;
    for (const std::size_t to : cuts) {
      write_all(std::span<const std::uint8_t>(bytes).subspan(from, to - from));
      from = to;
      if (to < bytes.size()) between();
    }
    return true;
  }

  void inject_batch(const std::vector<Frame>& frames) override {
    Frame all;
    for (const Frame& f : frames) {
      const Frame r = record(f);
      all.insert(all.end(), r.begin(), r.end());
    }
    write_all(all);
  }

  bool inject_runt(std::span<const std::uint8_t> frame) override {
    inject(frame);
    return true;
  }

  std::optional<Frame> next_sent(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      while (in_.size() >= 4) {
        const std::size_t n =
            (std::size_t{in_[0]} << 24) | (std::size_t{in_[1]} << 16) | (std::size_t{in_[2]} << 8) | in_[3];
        if (in_.size() < 4 + n) break;
        Frame f(in_.begin() + 4, in_.begin() + 4 + static_cast<long>(n));
        in_.erase(in_.begin(), in_.begin() + 4 + static_cast<long>(n));
        if (is_test_frame(f)) return f;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{socket_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max(left, 0ms).count())) <= 0) return std::nullopt;
      std::array<std::uint8_t, 64 * 1024> chunk{};
      const ssize_t got = ::recv(socket_.get(), chunk.data(), chunk.size(), 0);
      if (got <= 0) return std::nullopt;
      in_.insert(in_.end(), chunk.begin(), chunk.begin() + got);
    }
  }

  void kill() override { socket_.reset(); }

 private:
  // Sized once and filled, not grown (growing made GCC 12 at -O3 report
  // false -Wstringop-overflow in vector's insert).
  static Frame record(std::span<const std::uint8_t> frame) {
    Frame r(4 + frame.size());
    for (std::size_t i = 0; i < 4; ++i) r[i] = static_cast<std::uint8_t>(frame.size() >> (24 - 8 * i));
    std::copy(frame.begin(), frame.end(), r.begin() + 4);
    return r;
  }
  void write_all(std::span<const std::uint8_t> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(socket_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GT(n, 0) << "stream peer send: " << std::strerror(errno);
      done += static_cast<std::size_t>(n);
    }
  }

  base::UniqueFd socket_;
  Frame in_;
};

struct StreamFactory {
  static constexpr const char* kName = "Stream";
  static const char* skip_reason() { return nullptr; }
  static std::uint64_t runts(const Link& link) { return static_cast<const StreamLink&>(link).dropped_runt(); }
  static LinkUnderTest make() {
    const abox::testing::TempDir dir("abox-stream-contract");
    const std::string path = dir.file("s.sock");
    auto listener = StreamListener::listen(path);
    if (!listener) {
      ADD_FAILURE() << listener.error();
      return {};
    }
    base::UniqueFd vmm(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    if (!vmm || ::connect(vmm.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "cannot connect to " << path << ": " << std::strerror(errno);
      return {};
    }
    auto link = (*listener)->accept(kContractMtu);
    if (!link || !*link) {
      ADD_FAILURE() << "no peer accepted on " << path << ": " << (link ? "none waiting" : link.error());
      return {};
    }
    LinkUnderTest out;
    out.peer = std::make_unique<StreamPeer>(std::move(vmm));
    out.link = std::move(link).value();
    return out;  // the listener goes now, its socket file with it, then the directory
  }
};

// RecordingLink (--pcap) around a stream link: it must keep every promise
// of the link it wraps. The peer owns what the wrapper borrows (the stream
// link, the pcap writer and its folder), and outlives the wrapper.
class RecordingPeer final : public LinkPeer {
 public:
  RecordingPeer(LinkUnderTest inner, abox::testing::TempDir dir, PcapWriter writer)
      : dir_(std::move(dir)), writer_(std::move(writer)), inner_(std::move(inner)) {}

  void inject(std::span<const std::uint8_t> frame) override { inner_.peer->inject(frame); }
  std::optional<Frame> next_sent(std::chrono::milliseconds timeout) override {
    return inner_.peer->next_sent(timeout);
  }
  void kill() override { inner_.peer->kill(); }
  bool inject_in_pieces(std::span<const std::uint8_t> frame, const std::function<void()>& between) override {
    return inner_.peer->inject_in_pieces(frame, between);
  }
  void inject_batch(const std::vector<Frame>& frames) override { inner_.peer->inject_batch(frames); }
  bool inject_runt(std::span<const std::uint8_t> frame) override { return inner_.peer->inject_runt(frame); }

  Link& inner_link() { return *inner_.link; }
  PcapWriter& writer() { return writer_; }

 private:
  abox::testing::TempDir dir_;
  PcapWriter writer_;
  LinkUnderTest inner_;
};

struct RecordingStreamFactory {
  static constexpr const char* kName = "RecordingStream";
  static const char* skip_reason() { return nullptr; }
  // The stream link inside the wrapper made last (one test at a time).
  static inline const StreamLink* inner = nullptr;
  static std::uint64_t runts(const Link&) { return inner->dropped_runt(); }
  static LinkUnderTest make() {
    LinkUnderTest stream = StreamFactory::make();
    if (!stream.link) return {};
    abox::testing::TempDir dir("abox-rec-contract");
    auto writer = PcapWriter::create(dir.file("c.pcap"), 1 << 20);
    if (!writer.ok()) {
      ADD_FAILURE() << writer.error();
      return {};
    }
    auto peer = std::make_unique<RecordingPeer>(std::move(stream), std::move(dir), std::move(writer).value());
    inner = static_cast<const StreamLink*>(&peer->inner_link());
    LinkUnderTest out;
    out.link = std::make_unique<RecordingLink>(peer->inner_link(), peer->writer());
    out.peer = std::move(peer);
    return out;
  }
};

template <class Factory>
class LinkContract : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* reason = Factory::skip_reason()) ABOX_NEEDS_ROOT(reason);
    pair_ = Factory::make();
    ASSERT_TRUE(pair_.link && pair_.peer);
  }
  Link& link() { return *pair_.link; }
  LinkPeer& peer() { return *pair_.peer; }
  std::size_t max_frame() { return link().mtu() + 14; }

  std::optional<Frame> next_received(std::chrono::milliseconds timeout = 2s) {
    return wait_frame(link(), is_test_frame, timeout);
  }

  LinkUnderTest pair_;
};

struct FactoryNames {
  template <class Factory>
  static std::string GetName(int) {
    return Factory::kName;
  }
};
struct StreamRingFactory : RingReadFactory<StreamFactory, StreamLink> {
  static constexpr const char* kName = "StreamRing";
};

using LinkFactories =
    ::testing::Types<TapInNetnsFactory, TapFromFdFactory, TapInNetnsRingFactory, TapFromFdRingFactory,
                     StreamFactory, StreamRingFactory, RecordingStreamFactory>;
TYPED_TEST_SUITE(LinkContract, LinkFactories, FactoryNames);

TYPED_TEST(LinkContract, PeerFramesArriveWholeAndCounted) {
  const std::vector<Frame> frames = {test_frame(60, 1), test_frame(1000, 2),
                                     test_frame(this->max_frame(), 3)};
  for (const Frame& f : frames) this->peer().inject(f);
  std::uint64_t bytes = 0;
  for (const Frame& f : frames) {
    auto got = this->next_received();
    ASSERT_TRUE(got) << "frame of " << f.size() << " bytes never arrived";
    EXPECT_EQ(*got, f);
    bytes += f.size();
  }
  EXPECT_EQ(this->link().counters().frames_in, frames.size());
  EXPECT_EQ(this->link().counters().bytes_in, bytes);
  EXPECT_EQ(this->link().counters().dropped_oversize, 0u);
}

TYPED_TEST(LinkContract, SentFramesReachThePeerWholeAndCounted) {
  const std::vector<Frame> frames = {test_frame(60, 1), test_frame(1000, 2),
                                     test_frame(this->max_frame(), 3)};
  std::uint64_t bytes = 0;
  for (const Frame& f : frames) {
    auto r = this->link().send(f);
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    bytes += f.size();
  }
  ASSERT_TRUE(this->link().flush().ok());  // the end of the sender's turn
  for (const Frame& f : frames) {
    auto got = this->peer().next_sent(2s);
    ASSERT_TRUE(got) << "frame of " << f.size() << " bytes never reached the peer";
    EXPECT_EQ(*got, f);
  }
  EXPECT_EQ(this->link().counters().frames_out, frames.size());
  EXPECT_EQ(this->link().counters().bytes_out, bytes);
}

// send_frame(): a frame in pieces (a pbuf chain) arrives whole, however it
// is cut: one piece, many small ones, more pieces than one writev takes,
// empty pieces between; checked like send() (too big: dropped and counted).
TYPED_TEST(LinkContract, FramesSentInPiecesArriveWhole) {
  const Frame big = test_frame(this->max_frame(), 1);
  const Frame small = test_frame(300, 2);
  const Frame many = test_frame(600, 3);
  auto cut = [](const Frame& f, std::vector<std::size_t> sizes) {
    std::vector<std::span<const std::uint8_t>> pieces;
    std::size_t at = 0;
    for (std::size_t n : sizes) {
      pieces.emplace_back(f.data() + at, n);
      at += n;
    }
    pieces.emplace_back(f.data() + at, f.size() - at);
    return pieces;
  };
  std::vector<std::size_t> thirty(30, 20);  // 31 pieces of 20 bytes and the rest
  const std::vector<std::vector<std::span<const std::uint8_t>>> sends = {
      cut(big, {14, 20, 32}), cut(small, {}), cut(small, {0, 14, 0, 100}), cut(many, thirty)};
  const std::vector<const Frame*> expect = {&big, &small, &small, &many};
  for (const auto& pieces : sends) {
    auto r = this->link().send_frame(OutFrame{pieces});
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
  }
  ASSERT_TRUE(this->link().flush().ok());
  for (const Frame* f : expect) {
    auto got = this->peer().next_sent(2s);
    ASSERT_TRUE(got) << "a frame of " << f->size() << " bytes sent in pieces never reached the peer";
    EXPECT_EQ(*got, *f);
  }
  EXPECT_EQ(this->link().counters().frames_out, expect.size());
  const Frame too_big = test_frame(this->max_frame() + 1, 4);
  const auto pieces = cut(too_big, {100});
  auto r = this->link().send_frame(OutFrame{pieces});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), EMSGSIZE);
  EXPECT_EQ(this->link().counters().dropped_oversize, 1u);
  EXPECT_EQ(this->link().counters().frames_out, expect.size());
}

TYPED_TEST(LinkContract, ReceiveReturnsZeroWhenNothingWaits) {
  Frame buf(this->max_frame());
  int drained = 0;
  for (; drained < 100; ++drained) {  // whatever the peer sent on its own
    auto r = this->link().receive(buf);
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    if (*r == 0) break;
  }
  ASSERT_LT(drained, 100);
  for (int i = 0; i < 3; ++i) {
    auto r = this->link().receive(buf);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 0u);
  }
}

TYPED_TEST(LinkContract, FdPollsReadableWhenAFrameWaits) {
  this->peer().inject(test_frame(100, 9));
  pollfd p{this->link().fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  EXPECT_TRUE(this->next_received());
}

TYPED_TEST(LinkContract, FramesKeepTheirOrderBothWays) {
  constexpr std::uint16_t kCount = 100;
  for (std::uint16_t i = 0; i < kCount; ++i) this->peer().inject(test_frame(64 + i, i));
  for (std::uint16_t i = 0; i < kCount; ++i) {
    auto got = this->next_received();
    ASSERT_TRUE(got) << "frame " << i << " never arrived";
    EXPECT_EQ(get16(*got, 14), i);
  }
  for (std::uint16_t i = 0; i < kCount; ++i) ASSERT_TRUE(this->link().send(test_frame(64 + i, i)).ok());
  ASSERT_TRUE(this->link().flush().ok());
  for (std::uint16_t i = 0; i < kCount; ++i) {
    auto got = this->peer().next_sent(2s);
    ASSERT_TRUE(got) << "frame " << i << " never reached the peer";
    EXPECT_EQ(get16(*got, 14), i);
  }
}

TYPED_TEST(LinkContract, OversizeFromPeerIsDroppedAndCounted) {
  this->peer().inject(test_frame(this->max_frame() + 1, 1));
  this->peer().inject(test_frame(this->max_frame() + kPeerSlack, 2));
  this->peer().inject(test_frame(200, 3));
  auto got = this->next_received();
  ASSERT_TRUE(got);
  EXPECT_EQ(get16(*got, 14), 3);  // the oversize ones were skipped, not truncated
  EXPECT_EQ(got->size(), 200u);
  EXPECT_EQ(this->link().counters().dropped_oversize, 2u);
  EXPECT_EQ(this->link().counters().frames_in, 1u);
}

// A frame over the MTU is still dropped and counted, but the link hands
// over its head (link.h): the receive call that dropped it returns 0 with
// last_oversize_head() set, its bytes the frame's first ones (at least
// kOversizeHeadBytes of them here), its length the frame's real one. The
// next frame arrives, and a frame delivered leaves no head.
TYPED_TEST(LinkContract, OversizeFromPeerLeavesItsHead) {
  const Frame big = test_frame(this->max_frame() + 600, 1);
  this->peer().inject(big);
  this->peer().inject(test_frame(200, 2));
  Frame buf(this->max_frame());
  std::optional<Frame> head;
  std::size_t head_frame_size = 0;
  std::optional<Frame> next;
  const auto deadline = Clock::now() + 2s;
  while (!next && Clock::now() < deadline) {
    auto r = this->link().receive(buf);
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    if (*r != 0) {
      EXPECT_FALSE(this->link().last_oversize_head()) << "a frame delivered leaves no head";
      Frame got(buf.begin(), buf.begin() + static_cast<long>(*r));
      if (is_test_frame(got)) next = got;
      continue;
    }
    if (const auto h = this->link().last_oversize_head()) {
      EXPECT_FALSE(head) << "one oversize frame, one head";
      head = Frame(h->head.begin(), h->head.end());
      head_frame_size = h->frame_size;
      continue;
    }
    pollfd p{this->link().fd(), POLLIN, 0};
    ::poll(&p, 1, 50);
  }
  ASSERT_TRUE(head) << "the oversize frame's head never came";
  EXPECT_EQ(head_frame_size, big.size());
  ASSERT_GE(head->size(), Link::kOversizeHeadBytes);
  EXPECT_TRUE(std::equal(head->begin(), head->end(), big.begin()));
  ASSERT_TRUE(next) << "the frame after the oversize one never came";
  EXPECT_EQ(get16(*next, 14), 2);
  EXPECT_EQ(this->link().counters().dropped_oversize, 1u);
  EXPECT_EQ(this->link().counters().frames_in, 1u);
}

TYPED_TEST(LinkContract, OversizeSendIsDroppedAndCounted) {
  auto r = this->link().send(test_frame(this->max_frame() + 1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), EMSGSIZE) << "an oversize frame is dropped and counted";
  EXPECT_FALSE(send_error_ends_link(r.error())) << "an oversize frame is dropped, not a dead link";
  ASSERT_TRUE(this->link().send(test_frame(300, 2)).ok());
  ASSERT_TRUE(this->link().flush().ok());
  auto got = this->peer().next_sent(2s);
  ASSERT_TRUE(got);
  EXPECT_EQ(get16(*got, 14), 2);
  EXPECT_EQ(this->link().counters().dropped_oversize, 1u);
  EXPECT_EQ(this->link().counters().frames_out, 1u);
}

// TSO the other way (OutFrame's gso fields), for both families: a link
// that offers it hands the peer each 20,000-byte TCP frame whole (the
// peer's kernel cuts it into gso_size segments later, if at all); a link
// that does not drops it as oversize and goes on.
TYPED_TEST(LinkContract, GsoFramesOfBothFamiliesAreSentWholeOrRefusedAsOversize) {
  const Mac guest{0x02, 0, 0, 0, 0, 0x15};
  const Mac gateway{0x02, 0, 0, 0, 0, 0x02};
  const Frame v4 = big_tcp_frame({.dst_mac = guest,
                                  .src_mac = gateway,
                                  .src_ip = {192, 0, 2, 80},
                                  .dst_ip = {10, 0, 2, 15},
                                  .ip_id = 3,
                                  .src_port = 80,
                                  .dst_port = 40004,
                                  .payload = 20000});
  const Frame v6 = big_tcp6_frame({.dst_mac = guest,
                                   .src_mac = gateway,
                                   .src_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80},
                                   .dst_ip = {0xfd, 0, 0xab, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x15},
                                   .src_port = 80,
                                   .dst_port = 40006,
                                   .payload = 20000});
  struct Case {
    const Frame& frame;
    std::uint16_t ip_header;
    bool ipv6;
  };
  const bool tso = this->link().tx_tso();
  std::uint64_t refused = 0;
  for (const Case& c : {Case{v4, 20, false}, Case{v6, 40, true}}) {
    const std::array<std::span<const std::uint8_t>, 1> one = {std::span<const std::uint8_t>(c.frame)};
    OutFrame out{one};
    out.checksum_start = static_cast<std::uint16_t>(14 + c.ip_header);
    out.checksum_offset = 16;
    out.gso_size = static_cast<std::uint16_t>(kContractMtu - c.ip_header - 20);
    out.gso_header_size = static_cast<std::uint16_t>(14 + c.ip_header + 20);
    out.gso_tcp_ipv6 = c.ipv6;
    auto r = this->link().send_frame(out);
    ASSERT_TRUE(this->link().flush().ok());
    if (!tso) {
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error(), EMSGSIZE);
      EXPECT_EQ(this->link().counters().dropped_oversize, ++refused);
      continue;
    }
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    const std::uint16_t port = get16(c.frame, 14 + c.ip_header + 2);
    auto got = this->peer().next_sent_where(2s, [&](const Frame& f) {
      return f.size() > 14 + c.ip_header + 20u && get16(f, 12) == get16(c.frame, 12) &&
             get16(f, 14 + c.ip_header + 2) == port;
    });
    ASSERT_TRUE(got) << (c.ipv6 ? "the TCP/IPv6" : "the TCP/IPv4") << " GSO frame never reached the peer";
    EXPECT_EQ(got->size(), c.frame.size()) << "one frame, whole";
    EXPECT_TRUE(
        std::equal(c.frame.begin() + out.gso_header_size, c.frame.end(), got->begin() + out.gso_header_size));
  }
  if (tso) {
    EXPECT_EQ(this->link().counters().dropped_oversize, 0u);
  }
  // The link goes on.
  const Frame after = test_frame(100, 42);
  ASSERT_TRUE(this->link().send(after).ok());
  ASSERT_TRUE(this->link().flush().ok());
  auto got = this->peer().next_sent(2s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, after);
}

TYPED_TEST(LinkContract, UndersizeSendIsDroppedWithEmsgsizeAndTheLinkGoesOn) {
  const Frame runt(10, 0xff);
  auto r = this->link().send(runt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), EMSGSIZE);
  EXPECT_EQ(this->link().counters().dropped_send, 1u);
  ASSERT_TRUE(this->link().send(test_frame(300, 2)).ok());
  ASSERT_TRUE(this->link().flush().ok());
  auto got = this->peer().next_sent(2s);
  ASSERT_TRUE(got);
  EXPECT_EQ(get16(*got, 14), 2);
  EXPECT_EQ(this->link().counters().frames_out, 1u);
}

TYPED_TEST(LinkContract, DeadPeerWakesTheLoopAndIsAnError) {
  this->peer().kill();
  pollfd p{this->link().fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "the event loop must wake to notice";
  Frame buf(this->max_frame());
  auto r = this->link().receive(buf);
  ASSERT_FALSE(r.ok()) << "receive() after the peer went away returned " << r.value();
  EXPECT_NE(r.error(), EAGAIN);
  // A link that batches may take the frame and find the peer gone when it
  // writes: at flush() at the latest.
  auto s = this->link().send(test_frame(60, 1));
  if (s.ok()) s = this->link().flush();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error(), EAGAIN);
}

TYPED_TEST(LinkContract, ManyFramesSentAtOnceAllArriveWithoutWaiting) {
  constexpr std::uint16_t kCount = 200;
  std::vector<Frame> frames;
  for (std::uint16_t i = 0; i < kCount; ++i) frames.push_back(test_frame(60 + i % 40, i));
  this->peer().inject_batch(frames);
  pollfd p{this->link().fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  // Every frame is waiting now: receive() hands them out one per call, with
  // no poll in between, until none is left.
  Frame buf(this->max_frame());
  std::uint16_t next = 0;
  for (int calls = 0; calls < 4 * kCount && next < kCount; ++calls) {
    auto r = this->link().receive(buf);
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    if (*r == 0) break;
    const Frame got(buf.begin(), buf.begin() + static_cast<long>(*r));
    if (!is_test_frame(got)) continue;
    ASSERT_EQ(got, frames[next]);
    ++next;
  }
  EXPECT_EQ(next, kCount);
}

TYPED_TEST(LinkContract, AFrameCutAcrossReadsArrivesWhole) {
  const Frame frame = test_frame(700, 5);
  Frame buf(this->max_frame());
  int pauses = 0;
  const bool cut = this->peer().inject_in_pieces(frame, [&] {
    ++pauses;
    // A piece of a frame is waiting: the fd wakes, nothing whole is handed out.
    pollfd p{this->link().fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 2000), 1);
    auto r = this->link().receive(buf);
    ASSERT_TRUE(r.ok()) << std::strerror(r.error());
    EXPECT_EQ(*r, 0u) << "a part of a frame was handed out";
  });
  EXPECT_EQ(pauses, cut ? 2 : 0);
  auto got = this->next_received();
  ASSERT_TRUE(got) << "the frame never arrived whole";
  EXPECT_EQ(*got, frame);
  EXPECT_EQ(this->link().counters().frames_in, 1u);
}

TYPED_TEST(LinkContract, UndersizeFromPeerIsDroppedAndCounted) {
  const Frame runt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const bool sent = this->peer().inject_runt(runt);
  this->peer().inject(test_frame(200, 3));
  auto got = this->next_received();
  ASSERT_TRUE(got);
  EXPECT_EQ(get16(*got, 14), 3);
  EXPECT_EQ(got->size(), 200u);
  EXPECT_EQ(TypeParam::runts(this->link()), sent ? 1u : 0u);
  EXPECT_EQ(this->link().counters().frames_in, 1u);
}

}  // namespace
}  // namespace abox::netstack
