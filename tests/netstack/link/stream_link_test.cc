// StreamLink and StreamListener beyond the Link contract (which is in
// link_contract_test.cc): the socket file (mode, stale and live paths), the
// framing's nasty cases (zero lengths, a 4 GiB length, lengths cut
// anywhere), the bounded output queue, batched output (a burst costs a few
// writes, not one per frame) and a peer that goes away.
//
// Each test's socket is in a directory of its own (tests/support/temp_dir.h),
// removed with it; the peer is the test itself, over a real unix socket.
// The last test puts a StreamLink under a GuestStack on an io::EventLoop, to
// check that output queued while the VMM does not read is flushed when it
// does.
#include "netstack/link/stream_link.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/event_log.h"
#include "base/random.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"
#include "tests/netstack/lwip/lwip_test_state.h"
#include "tests/netstack/stack/stream_stack_support.h"
#include "tests/support/alloc_counter.h"
#include "tests/support/temp_dir.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::size_t kMtu = 1500;

base::UniqueFd connect_to(const std::string& path) {
  base::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (!s || ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  return s;
}

void put32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

// A frame of `size` bytes whose byte 14 is `tag` (a tag the test can find).
Bytes frame(std::size_t size, std::uint8_t tag) {
  Bytes f(size);
  for (std::size_t i = 0; i < size; ++i) f[i] = static_cast<std::uint8_t>(i * 13 + tag);
  if (size > 14) f[14] = tag;
  return f;
}
// Big-endian v at b[at..at+3], which must exist.
void set32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) b.at(at + i) = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}

// Sized once and filled, not grown: growing made GCC 12 at -O3 report false
// -Wstringop-overflow/-overread in vector's insert.
Bytes record(const Bytes& f) {
  Bytes r(4 + f.size());
  set32(r, 0, static_cast<std::uint32_t>(f.size()));
  std::copy(f.begin(), f.end(), r.begin() + 4);
  return r;
}

using stream_stack_test::write_all;

// A listener at a fresh path, the test connected as the VMM, the link. The
// listener, its socket file and the directory go when this returns; the
// connection stays.
struct Pair {
  base::UniqueFd vmm;
  std::unique_ptr<StreamLink> link;
};
Pair connected_pair(std::size_t mtu = kMtu) {
  const abox::testing::TempDir dir("abox-stream-test");
  const std::string path = dir.file("s.sock");
  Pair p;
  auto listener = StreamListener::listen(path);
  if (!listener) {
    ADD_FAILURE() << listener.error();
    return p;
  }
  p.vmm = connect_to(path);
  auto link = (*listener)->accept(mtu);
  if (!link || !*link) {
    ADD_FAILURE() << "no peer accepted";
    return p;
  }
  p.link = std::move(link).value();
  return p;
}

// receive() until a frame comes or `tries` polls of 1 s found nothing.
std::optional<Bytes> next_frame(StreamLink& link, int tries = 2) {
  Bytes buf(link.max_frame_size());
  for (int i = 0; i <= tries; ++i) {
    auto r = link.receive(buf);
    if (!r.ok()) return std::nullopt;
    if (*r > 0) return Bytes(buf.begin(), buf.begin() + static_cast<long>(*r));
    pollfd p{link.fd(), POLLIN, 0};
    ::poll(&p, 1, 1000);
  }
  return std::nullopt;
}

TEST(StreamListenerTest, SocketIsMode0600AndGoesWithTheListener) {
  const abox::testing::TempDir dir("abox-stream-test");
  const std::string path = dir.file("s.sock");
  {
    auto listener = StreamListener::listen(path);
    ASSERT_TRUE(listener) << listener.error();
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ((*listener)->path(), path);
  }
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0) << "the socket file outlived its listener";
}

TEST(StreamListenerTest, NoPeerYetIsNotAnError) {
  const abox::testing::TempDir dir("abox-stream-test");
  auto listener = StreamListener::listen(dir.file("s.sock"));
  ASSERT_TRUE(listener) << listener.error();
  auto link = (*listener)->accept(kMtu);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_FALSE(*link);
}

TEST(StreamListenerTest, AStaleSocketFileIsReplaced) {
  const abox::testing::TempDir dir("abox-stream-test");
  const std::string path = dir.file("s.sock");
  {
    // A socket file nobody listens on any more, as a killed abox-net leaves.
    base::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  auto listener = StreamListener::listen(path);
  ASSERT_TRUE(listener) << listener.error();
  base::UniqueFd vmm = connect_to(path);
  EXPECT_TRUE(vmm);
}

TEST(StreamListenerTest, ALivePathIsRefusedAndItsListenerKeepsWaitingForItsVmm) {
  const abox::testing::TempDir dir("abox-stream-test");
  const std::string path = dir.file("s.sock");
  auto first = StreamListener::listen(path);
  ASSERT_TRUE(first) << first.error();
  auto second = StreamListener::listen(path);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("already listening on " + path), std::string::npos) << second.error();
  // The check did not connect: nothing is waiting to be taken for the VMM.
  auto none = (*first)->accept(kMtu);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  // and the file is still the first listener's.
  base::UniqueFd vmm = connect_to(path);
  ASSERT_TRUE(vmm);
  auto link = (*first)->accept(kMtu);
  ASSERT_TRUE(link.ok());
  EXPECT_TRUE(*link);
}

TEST(StreamListenerTest, APathThatIsNotASocketIsRefusedAndKept) {
  const abox::testing::TempDir dir("abox-stream-test");
  const std::string path = dir.file("s.sock");
  { std::ofstream(path) << "not a socket\n"; }
  auto listener = StreamListener::listen(path);
  ASSERT_FALSE(listener.ok());
  EXPECT_NE(listener.error().find("is not a socket"), std::string::npos) << listener.error();
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
}

TEST(StreamListenerTest, BadPathsAreClearErrors) {
  auto empty = StreamListener::listen("");
  ASSERT_FALSE(empty.ok());
  auto long_path = StreamListener::listen("/tmp/" + std::string(200, 'x'));
  ASSERT_FALSE(long_path.ok());
  EXPECT_NE(long_path.error().find("longer than"), std::string::npos) << long_path.error();
  auto no_dir = StreamListener::listen("/nonexistent-abox-dir/s.sock");
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.error().find("No such file or directory"), std::string::npos) << no_dir.error();
}

TEST(StreamLinkTest, FromConnectedChecksTheMtu) {
  std::array<int, 2> sv{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv.data()), 0);
  base::UniqueFd other(sv[1]);
  EXPECT_FALSE(StreamLink::from_connected(base::UniqueFd(sv[0]), 67).ok());
  EXPECT_FALSE(StreamLink::from_connected(base::UniqueFd(), 1500).ok());
}

TEST(StreamLinkTest, ZeroLengthRecordsAreSkippedAndCounted) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  Bytes b;
  put32(b, 0);
  put32(b, 0);
  const Bytes good = record(frame(100, 7));
  b.insert(b.end(), good.begin(), good.end());
  put32(b, 0);
  write_all(p.vmm.get(), b);
  auto got = next_frame(*p.link);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, frame(100, 7));
  EXPECT_EQ(p.link->dropped_zero_length(), 2u);  // the third waits behind the frame
  Bytes buf(p.link->max_frame_size());
  auto none = p.link->receive(buf);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);
  EXPECT_EQ(p.link->dropped_zero_length(), 3u);
  EXPECT_EQ(p.link->counters().frames_in, 1u);
}

// A 4 GiB length: the link skips what follows as it arrives and never
// buffers it (no allocation while skipping), and a frame written inside the
// skipped span is part of it, not a frame.
TEST(StreamLinkTest, AHugeLengthIsSkippedWithoutBuffering) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  Bytes b;
  put32(b, 0xFFFF'FFFF);
  write_all(p.vmm.get(), b);
  // Less than the socket holds per round, so that the test can write and
  // then read on one thread.
  const Bytes junk(32 * 1024, 0xAB);
  const Bytes hidden = record(frame(100, 1));
  Bytes buf(p.link->max_frame_size());
  abox::testing::AllocationCounter allocations;
  for (int i = 0; i < 128; ++i) {  // 4 MiB into the skip
    write_all(p.vmm.get(), junk);
    write_all(p.vmm.get(), hidden);
    auto r = p.link->receive(buf);  // reads until the socket is empty
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, 0u) << "a frame came out of a skipped span";
    pollfd pf{p.link->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 0), 0) << "receive() returned 0 with bytes still waiting";
  }
  EXPECT_EQ(allocations.count(), 0);
  EXPECT_EQ(p.link->counters().dropped_oversize, 1u);
  EXPECT_EQ(p.link->counters().frames_in, 0u);
}

TEST(StreamLinkTest, AnOversizeFrameIsSkippedAcrossManyReadsThenTheNextArrives) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  const std::size_t big = 3 * StreamLink::kReadChunk + 5;
  Bytes b(4 + big, 0x55);
  set32(b, 0, static_cast<std::uint32_t>(big));
  const Bytes good = record(frame(300, 9));
  b.insert(b.end(), good.begin(), good.end());
  std::thread writer([&] { write_all(p.vmm.get(), b); });  // more than the socket holds
  std::optional<Bytes> got;
  for (int i = 0; i < 50 && !got; ++i) got = next_frame(*p.link, 0);
  writer.join();
  if (!got) got = next_frame(*p.link);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, frame(300, 9));
  EXPECT_EQ(p.link->counters().dropped_oversize, 1u);
}

TEST(StreamLinkTest, LengthsAndFramesCutAtEveryByteArriveWhole) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  Bytes all;
  for (std::uint8_t i = 0; i < 5; ++i) {
    const Bytes r = record(frame(20 + i, i));
    all.insert(all.end(), r.begin(), r.end());
  }
  Bytes buf(p.link->max_frame_size());
  std::vector<Bytes> got;
  for (const std::uint8_t byte : all) {  // one byte per write, one receive per byte
    write_all(p.vmm.get(), Bytes{byte});
    pollfd pf{p.link->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 2000), 1);
    auto r = p.link->receive(buf);
    ASSERT_TRUE(r.ok());
    if (*r > 0) got.emplace_back(buf.begin(), buf.begin() + static_cast<long>(*r));
  }
  ASSERT_EQ(got.size(), 5u);
  for (std::uint8_t i = 0; i < 5; ++i) EXPECT_EQ(got[i], frame(20 + i, i));
}

// The input buffer a maker may shrink (the framing fuzzer does) is never
// less than four records of the largest frame, and frames cut anywhere
// across its refills (make_room() moving a torn rest to the front) still
// arrive whole and in order. The default stays kReadChunk.
TEST(StreamLinkTest, TheSmallestInputBufferHandsOutFramesThatStraddleItsRefills) {
  std::array<int, 2> sv{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()), 0);
  base::UniqueFd vmm(sv[1]);
  auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), 68, 0);
  ASSERT_TRUE(made.ok());
  StreamLink& link = **made;
  EXPECT_EQ(link.input_bytes(), StreamLink::kMinInputRecords * (68 + 14 + 4));
  std::array<int, 2> sv2{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2.data()), 0);
  base::UniqueFd other(sv2[1]);
  auto plain = StreamLink::from_connected(base::UniqueFd(sv2[0]), kMtu);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->input_bytes(), StreamLink::kReadChunk);

  Bytes all;
  std::vector<Bytes> sent;
  for (std::uint8_t i = 0; i < 60; ++i) {
    sent.push_back(frame(14 + (i * 11) % 69, i));  // 14..82 bytes: up to the largest frame
    const Bytes r = record(sent.back());
    all.insert(all.end(), r.begin(), r.end());
  }
  Bytes buf(link.max_frame_size());
  std::vector<Bytes> got;
  for (std::size_t at = 0; at < all.size(); at += 37) {  // 37: prime to every record size
    write_all(vmm.get(), Bytes(all.begin() + static_cast<long>(at),
                               all.begin() + static_cast<long>(std::min(all.size(), at + 37))));
    for (int i = 0; i < 100; ++i) {
      auto r = link.receive(buf);
      ASSERT_TRUE(r.ok());
      if (*r == 0) break;
      got.emplace_back(buf.begin(), buf.begin() + static_cast<long>(*r));
    }
  }
  EXPECT_EQ(got, sent);
  EXPECT_EQ(link.counters().frames_in, sent.size());
}

TEST(StreamLinkTest, OutputIsQueuedWhileThePeerDoesNotReadBoundedAndFlushedInOrder) {
  Pair p = connected_pair(65520);
  ASSERT_TRUE(p.link);
  int sndbuf = 64 * 1024;  // a small socket, so the queue fills soon
  ASSERT_EQ(::setsockopt(p.link->fd(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
  std::uint32_t accepted = 0;
  bool refused = false;
  for (int i = 0; i < 1000 && !refused; ++i) {
    Bytes f = frame(9000, static_cast<std::uint8_t>(i));
    f[15] = static_cast<std::uint8_t>(i >> 8);
    auto r = p.link->send(f);
    if (r.ok()) {
      ++accepted;
      EXPECT_LE(p.link->queued(), StreamLink::kMaxQueued);
    } else {
      ASSERT_EQ(r.error(), EAGAIN);
      refused = true;
    }
  }
  ASSERT_TRUE(refused) << "the queue never filled";
  EXPECT_TRUE(p.link->output_pending());
  EXPECT_EQ(p.link->counters().dropped_send, 1u);
  // frames_out counts what the socket took; the rest waits, counted apart.
  EXPECT_LT(p.link->counters().frames_out, accepted);
  EXPECT_EQ(p.link->counters().frames_out + p.link->queued_frames(), accepted);
  EXPECT_GT(p.link->queued(), StreamLink::kMaxQueued - 9004 - 1);

  // The peer reads; the link flushes when writable; every accepted frame
  // arrives whole and in order.
  Bytes in;
  std::uint32_t seen = 0;
  for (int rounds = 0; rounds < 10000 && seen < accepted; ++rounds) {
    ASSERT_TRUE(p.link->flush().ok());
    std::array<std::uint8_t, 65536> chunk{};
    pollfd pf{p.vmm.get(), POLLIN, 0};
    if (::poll(&pf, 1, 1000) != 1) break;
    const ssize_t n = ::recv(p.vmm.get(), chunk.data(), chunk.size(), 0);
    ASSERT_GT(n, 0);
    in.insert(in.end(), chunk.begin(), chunk.begin() + n);
    while (in.size() >= 4) {
      const std::size_t len =
          (std::size_t{in[0]} << 24) | (std::size_t{in[1]} << 16) | (std::size_t{in[2]} << 8) | in[3];
      if (in.size() < 4 + len) break;
      Bytes want = frame(9000, static_cast<std::uint8_t>(seen));
      want[15] = static_cast<std::uint8_t>(seen >> 8);
      ASSERT_EQ(Bytes(in.begin() + 4, in.begin() + 4 + static_cast<long>(len)), want) << "frame " << seen;
      in.erase(in.begin(), in.begin() + 4 + static_cast<long>(len));
      ++seen;
    }
  }
  EXPECT_EQ(seen, accepted);
  EXPECT_FALSE(p.link->output_pending());
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(p.link->counters().frames_out, accepted);
  EXPECT_EQ(p.link->counters().bytes_out, std::uint64_t{accepted} * 9000);
  EXPECT_EQ(p.link->lost_unsent(), 0u);
}

// Frames queued when the VMM goes away are never written: they are counted
// in lost_unsent(), not in frames_out, and frames_out + lost_unsent() is
// every frame send() took.
TEST(StreamLinkTest, FramesStillQueuedWhenTheVmmLeavesAreCountedLostNotSent) {
  Pair p = connected_pair(65520);
  ASSERT_TRUE(p.link);
  int sndbuf = 64 * 1024;
  ASSERT_EQ(::setsockopt(p.link->fd(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
  std::uint64_t accepted = 0;
  for (int i = 0; i < 1000; ++i) {
    auto r = p.link->send(frame(9000, static_cast<std::uint8_t>(i)));
    if (!r.ok()) break;
    ++accepted;
  }
  ASSERT_TRUE(p.link->flush().ok());
  ASSERT_GT(p.link->queued_frames(), 0u) << "the VMM reads nothing: output must be held back";
  const std::uint64_t written = p.link->counters().frames_out;
  EXPECT_GT(written, 0u) << "the socket took some";
  p.vmm.reset();
  auto s = p.link->flush();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(send_error_ends_link(s.error()));
  EXPECT_EQ(p.link->counters().frames_out, written);
  EXPECT_EQ(p.link->counters().frames_out + p.link->lost_unsent(), accepted);
  EXPECT_GT(p.link->lost_unsent(), 0u);
  EXPECT_FALSE(p.link->output_pending()) << "a dead link holds nothing back";
}

TEST(StreamLinkTest, FramesSentBeforeThePeerLeftAreDeliveredThenTheLinkIsDead) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  Bytes b = record(frame(64, 1));
  const Bytes second = record(frame(64, 2));
  b.insert(b.end(), second.begin(), second.end());
  b.push_back(0);  // a length cut short by the exit
  write_all(p.vmm.get(), b);
  p.vmm.reset();
  auto one = next_frame(*p.link);
  auto two = next_frame(*p.link);
  ASSERT_TRUE(one && two);
  EXPECT_EQ((*one)[14], 1);
  EXPECT_EQ((*two)[14], 2);
  Bytes buf(p.link->max_frame_size());
  auto r = p.link->receive(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), ECONNRESET);
  auto s = p.link->send(frame(64, 3));  // receive() found the link dead
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error(), EAGAIN);
}

// A peer that leaves while nothing is read: the frame is queued (written at
// the end of the turn), and the write finds the peer gone, without SIGPIPE.
TEST(StreamLinkTest, APeerGoneIsFoundByTheFlushAtTheEndOfTheTurn) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  p.vmm.reset();
  ASSERT_TRUE(p.link->send(frame(64, 1)).ok());
  EXPECT_TRUE(p.link->output_pending());
  auto s = p.link->flush();  // MSG_NOSIGNAL: an error, not SIGPIPE
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error(), EAGAIN);
  EXPECT_EQ(p.link->counters().frames_out, 0u) << "queued, never written";
  EXPECT_EQ(p.link->lost_unsent(), 1u);
  EXPECT_FALSE(p.link->send(frame(64, 2)).ok());  // dead from then on
}

// A turn that emits many frames costs a few system calls, not one each:
// 1,000 small frames (in two pieces, as lwIP hands them over) arrive whole
// and in order, written in batches of StreamLink::kBatchFrames and a final
// flush().
TEST(StreamLinkTest, ABurstOfSmallFramesIsWrittenInBatchesWholeAndInOrder) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.link);
  int big = 4 << 20;  // the whole burst fits: this counts batching, not a full socket
  ::setsockopt(p.link->fd(), SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  ::setsockopt(p.vmm.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  constexpr int kFrames = 1000;
  for (int i = 0; i < kFrames; ++i) {
    Bytes f = frame(60 + i % 7, static_cast<std::uint8_t>(i));
    f[15] = static_cast<std::uint8_t>(i >> 8);
    const std::array<std::span<const std::uint8_t>, 2> pieces = {
        std::span<const std::uint8_t>(f).first(14), std::span<const std::uint8_t>(f).subspan(14)};
    ASSERT_TRUE(p.link->send_frame(OutFrame{pieces}).ok()) << "frame " << i;
  }
  ASSERT_TRUE(p.link->flush().ok());
  EXPECT_FALSE(p.link->output_pending());
  EXPECT_EQ(p.link->counters().frames_out, std::uint64_t{kFrames});
  EXPECT_LE(p.link->send_calls(), std::uint64_t{kFrames / StreamLink::kBatchFrames + 2});

  Bytes in;
  int seen = 0;
  for (int reads = 0; reads < 10000 && seen < kFrames; ++reads) {
    pollfd pf{p.vmm.get(), POLLIN, 0};
    if (::poll(&pf, 1, 2000) != 1) break;
    std::array<std::uint8_t, 65536> chunk{};
    const ssize_t n = ::recv(p.vmm.get(), chunk.data(), chunk.size(), 0);
    ASSERT_GT(n, 0);
    in.insert(in.end(), chunk.begin(), chunk.begin() + n);
    std::size_t at = 0;
    while (in.size() - at >= 4) {
      const std::size_t len = (std::size_t{in[at]} << 24) | (std::size_t{in[at + 1]} << 16) |
                              (std::size_t{in[at + 2]} << 8) | in[at + 3];
      if (in.size() - at < 4 + len) break;
      Bytes want = frame(60 + seen % 7, static_cast<std::uint8_t>(seen));
      want[15] = static_cast<std::uint8_t>(seen >> 8);
      ASSERT_EQ(Bytes(in.begin() + static_cast<long>(at) + 4, in.begin() + static_cast<long>(at + 4 + len)),
                want)
          << "frame " << seen;
      at += 4 + len;
      ++seen;
    }
    in.erase(in.begin(), in.begin() + static_cast<long>(at));
  }
  EXPECT_EQ(seen, kFrames);
  EXPECT_TRUE(in.empty());
}

// ---------------------------------------------------------------------------
// Under a GuestStack: the loop watches POLLOUT while output is queued.

std::uint16_t inet_checksum(const Bytes& b, std::size_t from, std::size_t n) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < n; i += 2)
    sum += static_cast<std::uint32_t>((b[from + i] << 8) | b[from + i + 1]);
  if (n % 2 != 0) sum += static_cast<std::uint32_t>(b[from + n - 1] << 8);
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

constexpr std::array<std::uint8_t, 6> kGuestMac = {0x02, 0, 0, 0, 0, 0x15};
constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};

Bytes ethernet(const std::array<std::uint8_t, 6>& dst, std::uint16_t type) {
  Bytes f(dst.begin(), dst.end());
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  f.push_back(static_cast<std::uint8_t>(type >> 8));
  f.push_back(static_cast<std::uint8_t>(type));
  return f;
}

// The guest asks for the gateway's MAC (and so tells lwIP its own).
Bytes arp_request() {
  Bytes f = ethernet({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0806);
  const Bytes body = {0, 1, 8, 0, 6, 4, 0, 1};
  f.insert(f.end(), body.begin(), body.end());
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  f.insert(f.end(), {10, 0, 2, 15, 0, 0, 0, 0, 0, 0, 10, 0, 2, 2});
  f.resize(60, 0);
  return f;
}

// An echo request from the guest to the gateway with `payload` bytes.
Bytes echo_request(std::uint16_t seq, std::size_t payload) {
  Bytes f = ethernet(kGatewayMac, 0x0800);
  const std::size_t total = 20 + 8 + payload;
  f.insert(f.end(), {0x45,
                     0,
                     static_cast<std::uint8_t>(total >> 8),
                     static_cast<std::uint8_t>(total),
                     0,
                     0,
                     0,
                     0,
                     64,
                     1,
                     0,
                     0,
                     10,
                     0,
                     2,
                     15,
                     10,
                     0,
                     2,
                     2});
  const std::uint16_t ip_sum = inet_checksum(f, 14, 20);
  f[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[25] = static_cast<std::uint8_t>(ip_sum);
  f.insert(f.end(),
           {8, 0, 0, 0, 0x12, 0x34, static_cast<std::uint8_t>(seq >> 8), static_cast<std::uint8_t>(seq)});
  f.resize(f.size() + payload, 0x5A);
  const std::uint16_t icmp_sum = inet_checksum(f, 34, 8 + payload);
  f[36] = static_cast<std::uint8_t>(icmp_sum >> 8);
  f[37] = static_cast<std::uint8_t>(icmp_sum);
  return f;
}

TEST(StreamLinkInAGuestStackTest, OutputHeldWhileTheVmmDoesNotReadIsFlushedWhenItReads) {
  stream_stack_test::StreamStackRig rig(kMtu);
  ASSERT_TRUE(rig.link);
  io::EventLoop& loop = rig.loop;
  StreamLink& link = *rig.link;
  const base::UniqueFd& vmm = rig.vmm;
  int small = 32 * 1024;  // small socket buffers: the queue fills soon
  ASSERT_EQ(::setsockopt(link.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(::setsockopt(vmm.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  GuestConfig config;
  config.gateway_mac = kGatewayMac;
  GuestStack stack(loop, link, rig.policy, rig.upstreams, rig.events, rig.random, config);

  // The VMM only writes: an ARP request, then pings of 1400 bytes, which the
  // gateway answers into a socket nobody reads, until answers are dropped.
  auto run_until_read = [&] {
    for (int turns = 0; turns < 100; ++turns) {
      loop.run_once(base::Millis(0));
      pollfd p{link.fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return;
    }
  };
  write_all(vmm.get(), record(arp_request()));
  run_until_read();
  std::uint16_t sent = 0;
  for (int round = 0; round < 200 && link.counters().dropped_send == 0; ++round) {
    Bytes batch;
    for (int i = 0; i < 10; ++i) {
      const Bytes r = record(echo_request(sent++, 1400));
      batch.insert(batch.end(), r.begin(), r.end());
    }
    write_all(vmm.get(), batch);
    run_until_read();
  }
  ASSERT_GT(link.counters().dropped_send, 0u) << "the output queue never filled";
  EXPECT_TRUE(link.output_pending());
  EXPECT_LE(link.queued(), StreamLink::kMaxQueued);
  // Every frame the link took: written already, or still queued.
  const std::uint64_t accepted = link.counters().frames_out + link.queued_frames();

  // Now the VMM reads, and writes nothing: only POLLOUT can wake the loop to
  // flush, and every frame the link accepted must arrive, in order.
  Bytes in;
  std::uint64_t frames = 0;
  int last_seq = -1;
  bool in_order = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int rounds = 0; rounds < 5000 && frames < accepted && std::chrono::steady_clock::now() < deadline;
       ++rounds) {
    loop.run_once(base::Millis(10));
    std::array<std::uint8_t, 65536> chunk{};
    const ssize_t n = ::recv(vmm.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n > 0) in.insert(in.end(), chunk.begin(), chunk.begin() + n);
    std::size_t at = 0;
    while (in.size() - at >= 4) {
      const std::size_t len = (std::size_t{in[at]} << 24) | (std::size_t{in[at + 1]} << 16) |
                              (std::size_t{in[at + 2]} << 8) | in[at + 3];
      if (in.size() - at < 4 + len) break;
      const std::size_t f = at + 4;
      if (len >= 42 && in[f + 12] == 0x08 && in[f + 13] == 0x00 && in[f + 23] == 1 && in[f + 34] == 0) {
        const int seq = (in[f + 40] << 8) | in[f + 41];  // an echo reply
        in_order = in_order && seq > last_seq;
        last_seq = seq;
      }
      at = f + len;
      ++frames;
    }
    in.erase(in.begin(), in.begin() + static_cast<long>(at));
  }
  EXPECT_EQ(frames, accepted);
  EXPECT_EQ(link.counters().frames_out, accepted);
  EXPECT_TRUE(in_order);
  EXPECT_FALSE(link.output_pending());
  EXPECT_TRUE(in.empty());
  EXPECT_TRUE(stack.link_alive());
}

// GuestStack::poll_link() takes what the link has waiting now, without a
// loop turn, whether the link is read on the ring (the read in flight, once
// the kernel has finished it) or on readiness: every whole frame is handled
// (the gateway answers the pings), a frame torn across writes waits for its
// rest, a call with nothing waiting returns at once, and the loop reads the
// link as before afterwards.
class PollLinkTest : public ::testing::TestWithParam<bool> {};

TEST_P(PollLinkTest, TakesWhatWaitsNowWithoutTurningTheLoop) {
  auto parsed = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.com\"]\nports = [443]\n",
      "stream-test.toml");
  ASSERT_TRUE(parsed.ok());
  const policy::Policy policy = std::move(parsed).value();
  base::EventLog events = base::EventLog::discard();
  base::SeededRandom random(1);
  io::EventLoop loop;
  lwip_test::reset_lwip_state();
  std::array<int, 2> sv{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()), 0);
  base::UniqueFd vmm(sv[1]);
  auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), kMtu);
  ASSERT_TRUE(made.ok());
  StreamLink& link = **made;
  GuestConfig config;
  config.gateway_mac = kGatewayMac;
  config.link_on_ring = GetParam();
  GuestStack stack(loop, link, policy, {policy::Endpoint{policy::IpAddress::v4(0x7F00'0001), 9}}, events,
                   random, config);
  ASSERT_EQ(stack.link_read_on_ring(), GetParam());

  stack.poll_link();  // nothing waits
  EXPECT_EQ(stack.counters().frames_in, 0u);
  Bytes burst = record(arp_request());
  for (std::uint16_t seq = 0; seq < 3; ++seq) {
    const Bytes r = record(echo_request(seq, 100));
    burst.insert(burst.end(), r.begin(), r.end());
  }
  const Bytes torn = record(echo_request(3, 100));
  burst.insert(burst.end(), torn.begin(), torn.begin() + 30);
  write_all(vmm.get(), burst);
  stack.poll_link();
  EXPECT_EQ(stack.counters().frames_in, 4u);
  write_all(vmm.get(), Bytes(torn.begin() + 30, torn.end()));
  stack.poll_link();
  EXPECT_EQ(stack.counters().frames_in, 5u);

  // Answered: one echo reply per ping, in order.
  ASSERT_TRUE(link.flush().ok());
  std::array<std::uint8_t, 65536> in{};
  const ssize_t n = ::recv(vmm.get(), in.data(), in.size(), MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  std::vector<int> replies;
  for (std::size_t at = 0; static_cast<std::size_t>(n) - at >= 4;) {
    const std::size_t len = (std::size_t{in[at]} << 24) | (std::size_t{in[at + 1]} << 16) |
                            (std::size_t{in[at + 2]} << 8) | in[at + 3];
    const std::size_t f = at + 4;
    ASSERT_LE(f + len, static_cast<std::size_t>(n));
    if (len >= 42 && in[f + 12] == 0x08 && in[f + 13] == 0x00 && in[f + 23] == 1 && in[f + 34] == 0)
      replies.push_back((in[f + 40] << 8) | in[f + 41]);
    at = f + len;
  }
  EXPECT_EQ(replies, (std::vector<int>{0, 1, 2, 3}));

  // The loop goes on reading the link.
  write_all(vmm.get(), record(echo_request(4, 100)));
  for (int turn = 0; turn < 100 && stack.counters().frames_in < 6; ++turn) loop.run_once(base::Millis(10));
  EXPECT_EQ(stack.counters().frames_in, 6u);
  EXPECT_TRUE(stack.link_alive());
}

INSTANTIATE_TEST_SUITE_P(RingAndReadiness, PollLinkTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Ring" : "Readiness";
                         });

}  // namespace
}  // namespace abox::netstack
