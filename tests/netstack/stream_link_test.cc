// StreamLink and StreamListener beyond the Link contract (which is in
// link_contract_test.cc): the socket file (mode, stale and live paths), the
// framing's nasty cases (zero lengths, a 4 GiB length, lengths cut
// anywhere), the bounded output queue and a peer that goes away.
//
// Each test uses its own path under /tmp (abox-stream-test-<pid>-<n>) and
// removes it; the peer is the test itself, over a real unix socket.
#include "netstack/stream_link.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "tests/support/alloc_counter.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::size_t kMtu = 1500;

std::string test_path() {
  static int next = 0;
  return "/tmp/abox-stream-test-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + ".sock";
}

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
Bytes record(const Bytes& f) {
  Bytes r;
  put32(r, static_cast<std::uint32_t>(f.size()));
  r.insert(r.end(), f.begin(), f.end());
  return r;
}

void write_all(int fd, const Bytes& b) {
  std::size_t done = 0;
  while (done < b.size()) {
    const ssize_t n = ::send(fd, b.data() + done, b.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<std::size_t>(n);
  }
}

// A listener at a fresh path, the test connected as the VMM, the link.
struct Pair {
  std::string path;
  base::UniqueFd vmm;
  std::unique_ptr<StreamLink> link;
};
Pair connected_pair(std::size_t mtu = kMtu) {
  Pair p;
  p.path = test_path();
  auto listener = StreamListener::listen(p.path);
  if (!listener) {
    ADD_FAILURE() << listener.error();
    return p;
  }
  p.vmm = connect_to(p.path);
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
  const std::string path = test_path();
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
  auto listener = StreamListener::listen(test_path());
  ASSERT_TRUE(listener) << listener.error();
  auto link = (*listener)->accept(kMtu);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_FALSE(*link);
}

TEST(StreamListenerTest, AStaleSocketFileIsReplaced) {
  const std::string path = test_path();
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
  const std::string path = test_path();
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
  const std::string path = test_path();
  { std::ofstream(path) << "not a socket\n"; }
  auto listener = StreamListener::listen(path);
  ASSERT_FALSE(listener.ok());
  EXPECT_NE(listener.error().find("is not a socket"), std::string::npos) << listener.error();
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  ::unlink(path.c_str());
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
  Bytes b;
  put32(b, static_cast<std::uint32_t>(big));
  b.resize(4 + big, 0x55);
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
  EXPECT_EQ(p.link->counters().frames_out, accepted);
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
  auto s = p.link->send(frame(64, 3));  // MSG_NOSIGNAL: an error, not SIGPIPE
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error(), EAGAIN);
}

}  // namespace
}  // namespace abox::netstack
