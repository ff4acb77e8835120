// StreamLink both ways: frames/s of Ethernet frames through a unix
// socketpair, the test's thread as the VMM (QEMU's netdev stream).
//
// Send: a peer that reads as fast as it can (a thread draining the other
// end). Each "turn" sends frames_per_turn frames in two pieces (headers and
// payload, like an lwIP pbuf chain) and then calls flush(), as GuestStack
// does at the end of a loop turn; the link's own counter says how many send
// system calls that took.
//
// Receive: a peer (a thread) that writes records as fast as the socket
// takes them, 64 KiB at a time. Each iteration takes kReceiveBatch frames of
// the given size, two ways: on readiness (receive() until it returns 0,
// then poll, as GuestStack did before the ring: reads/frame counts read()
// and poll() calls, the reads that found nothing included), and through the
// event loop's ring as GuestStack does now (one READV into the link's
// buffer, then finish_ring_receive() and receive_buffered(): reads/frame
// counts ring reads, each one io_uring_enter at most).
//
// Run (Release build):
//   cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target stream_link_bench
//   build/bench/stream_link_bench
// Read frames/s and the bits/s counter of the _median rows; sends/frame and
// reads/frame are system calls per frame.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/link/stream_link.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kMtu = 1500;
constexpr std::size_t kFrame = kMtu + 14;
constexpr std::size_t kHeaders = 54;  // Ethernet + IPv4 + TCP

// A StreamLink on one end of a socketpair, the VMM's end in `peer`; null
// (and the benchmark skipped) if either cannot be made.
std::unique_ptr<StreamLink> connected_link(benchmark::State& state, base::UniqueFd& peer) {
  std::array<int, 2> sv{};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()) != 0) {
    state.SkipWithError("socketpair");
    return nullptr;
  }
  peer = base::UniqueFd(sv[1]);
  auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), kMtu);
  if (!made.ok()) {
    state.SkipWithError("link");
    return nullptr;
  }
  return std::move(made).value();
}

// The counters every benchmark here reports: frames/s, and `calls` system
// calls as `calls_name` per frame.
void count_frames(benchmark::State& state, double frames, double calls, const char* calls_name) {
  state.counters["frames/s"] = benchmark::Counter(frames, benchmark::Counter::kIsRate);
  state.counters[calls_name] = calls / (frames > 0 ? frames : 1);
}

void BM_StreamLinkSend(benchmark::State& state) {
  const auto frames_per_turn = static_cast<std::size_t>(state.range(0));
  base::UniqueFd peer;
  auto made = connected_link(state, peer);
  if (!made) return;
  StreamLink& link = *made;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    std::vector<std::uint8_t> buf(1 << 20);
    while (!stop.load(std::memory_order_relaxed)) {
      pollfd p{peer.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (::read(peer.get(), buf.data(), buf.size()) <= 0) return;
    }
  });
  std::vector<std::uint8_t> headers(kHeaders, 0x11);
  std::vector<std::uint8_t> payload(kFrame - kHeaders, 0x22);
  const std::array<std::span<const std::uint8_t>, 2> pieces = {std::span<const std::uint8_t>(headers),
                                                               std::span<const std::uint8_t>(payload)};
  const OutFrame frame{pieces};
  const std::uint64_t out_before = link.counters().frames_out;
  const std::uint64_t calls_before = link.send_calls();
  for (auto _ : state) {
    for (std::size_t i = 0; i < frames_per_turn; ++i) {
      // A full queue: wait until the socket takes some, as the loop would.
      while (link.queued() + kFrame + 4 > StreamLink::kMaxQueued) {
        pollfd p{link.fd(), POLLOUT, 0};
        ::poll(&p, 1, 100);
        if (!link.flush().ok()) state.SkipWithError("flush");
      }
      if (!link.send_frame(frame).ok()) state.SkipWithError("send");
    }
    if (!link.flush().ok()) state.SkipWithError("flush");
  }
  const auto frames = static_cast<double>(link.counters().frames_out - out_before);
  count_frames(state, frames, static_cast<double>(link.send_calls() - calls_before), "sends/frame");
  state.counters["bits/s"] = benchmark::Counter(frames * kFrame * 8, benchmark::Counter::kIsRate);
  stop = true;
  ::shutdown(peer.get(), SHUT_RDWR);
  reader.join();
}
BENCHMARK(BM_StreamLinkSend)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();

constexpr std::size_t kReceiveBatch = 4096;

// The VMM's side for the receive benchmarks: a thread writing records of
// frame_size-byte frames until stopped.
class Writer {
 public:
  Writer(int fd, std::size_t frame_size) : fd_(fd) {
    std::vector<std::uint8_t> chunk;
    while (chunk.size() + 4 + frame_size <= 64 * 1024) {
      const auto n = static_cast<std::uint32_t>(frame_size);
      chunk.insert(chunk.end(), {static_cast<std::uint8_t>(n >> 24), static_cast<std::uint8_t>(n >> 16),
                                 static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(n)});
      chunk.resize(chunk.size() + frame_size, 0x33);
    }
    thread_ = std::thread([this, chunk] {
      std::size_t at = 0;
      while (!stop_.load(std::memory_order_relaxed)) {
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = ::send(fd_, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN) return;
        if (n > 0) at = (at + static_cast<std::size_t>(n)) % chunk.size();
      }
    });
  }
  ~Writer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

 private:
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// GuestStack's way before the ring: receive() until it returns 0, then poll.
class ReadinessReceiver {
 public:
  explicit ReadinessReceiver(StreamLink& link)
      : link_(link), buf_(link.max_receive_size()), reads_before_(link.read_calls()) {}

  // Frames taken in one try (0: nothing came, and it polled); -1 on error.
  long turn() {
    auto r = link_.receive(buf_);
    if (!r.ok()) return -1;
    if (*r != 0) return 1;
    pollfd p{link_.fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    ++polls_;
    return 0;
  }
  // read() and poll() calls, the reads that found nothing included.
  std::uint64_t reads() const { return link_.read_calls() - reads_before_ + polls_; }

 private:
  StreamLink& link_;
  std::vector<std::uint8_t> buf_;
  std::uint64_t reads_before_;
  std::uint64_t polls_ = 0;
};

// GuestStack's way (on_link_read, take_buffered_frames, post_link_read).
class RingReceiver final : public io::EventLoop::Completion {
 public:
  explicit RingReceiver(StreamLink& link) : link_(link), buf_(link.max_receive_size()) {}
  ~RingReceiver() override { loop_.cancel_all(this, in_flight_); }
  RingReceiver(const RingReceiver&) = delete;
  RingReceiver& operator=(const RingReceiver&) = delete;

  // Frames taken in one turn of the loop (0: nothing came); -1 on error.
  long turn() {
    if (in_flight_ == 0) {
      const auto iov = link_.ring_receive_iovecs(buf_);
      io_uring_prep_readv(loop_.request(this), link_.fd(), iov.data(), static_cast<unsigned>(iov.size()),
                          ~std::uint64_t{0});
      ++in_flight_;
    }
    done_.reset();
    loop_.run_once(base::Millis(100));
    if (!done_) return 0;
    ++reads_;
    long frames = 0;
    for (auto r = link_.finish_ring_receive(*done_);; r = link_.receive_buffered(buf_)) {
      if (!r.ok()) return -1;
      if (*r == 0) return frames;
      ++frames;
    }
  }
  std::uint64_t reads() const { return reads_; }

 private:
  void on_complete(int res, std::uint32_t /*cqe_flags*/) override {
    --in_flight_;
    done_ = res;
  }
  StreamLink& link_;
  std::vector<std::uint8_t> buf_;
  io::EventLoop loop_;
  std::size_t in_flight_ = 0;
  std::optional<int> done_;
  std::uint64_t reads_ = 0;
};

// One receive benchmark: a Writer sending frames of state.range(0) bytes
// into the link, and each iteration taking kReceiveBatch of them through a
// `Receiver` (turn(): frames taken in one try, -1 on error; reads(): its
// system calls so far).
template <class Receiver>
void measure_receive(benchmark::State& state) {
  base::UniqueFd peer;
  auto link = connected_link(state, peer);
  if (!link) return;
  Writer writer(peer.get(), static_cast<std::size_t>(state.range(0)));
  Receiver receiver(*link);
  const std::uint64_t in_before = link->counters().frames_in;
  for (auto _ : state) {
    for (long got = 0; got < static_cast<long>(kReceiveBatch);) {
      const long n = receiver.turn();
      if (n < 0) {
        state.SkipWithError("receive");
        return;
      }
      got += n;
    }
  }
  count_frames(state, static_cast<double>(link->counters().frames_in - in_before),
               static_cast<double>(receiver.reads()), "reads/frame");
}

// Both receive benchmarks: frames of 60 and 1514 bytes, medians of 5 runs.
void receive_runs(benchmark::internal::Benchmark* b) {
  b->Arg(60)->Arg(1514)->Repetitions(5)->ReportAggregatesOnly(true)->UseRealTime();
}

void BM_StreamLinkReceiveReadiness(benchmark::State& state) {
  measure_receive<ReadinessReceiver>(state);
}
BENCHMARK(BM_StreamLinkReceiveReadiness)->Apply(receive_runs);

void BM_StreamLinkReceiveRing(benchmark::State& state) {
  measure_receive<RingReceiver>(state);
}
BENCHMARK(BM_StreamLinkReceiveRing)->Apply(receive_runs);

}  // namespace
}  // namespace abox::netstack

BENCHMARK_MAIN();
