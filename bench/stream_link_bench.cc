// StreamLink output: frames/s and Gb/s of Ethernet frames sent to a peer
// that reads as fast as it can (a thread draining the other end of a unix
// socketpair, as QEMU's netdev stream would). Each "turn" sends
// frames_per_turn frames in two pieces (headers and payload, like an lwIP
// pbuf chain) and then calls flush(), as GuestStack does at the end of a
// loop turn; the link's own counter says how many send system calls that
// took.
//
// Run (Release build):
//   cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target stream_link_bench
//   build/bench/stream_link_bench
// Read frames/s and the bits/s counter of the _median rows; sends/frame is
// the system calls per frame.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/stream_link.h"

namespace abox::netstack {
namespace {

constexpr std::size_t kMtu = 1500;
constexpr std::size_t kFrame = kMtu + 14;
constexpr std::size_t kHeaders = 54;  // Ethernet + IPv4 + TCP

void BM_StreamLinkSend(benchmark::State& state) {
  const auto frames_per_turn = static_cast<std::size_t>(state.range(0));
  std::array<int, 2> sv{};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()) != 0) {
    state.SkipWithError("socketpair");
    return;
  }
  base::UniqueFd peer(sv[1]);
  auto made = StreamLink::from_connected(base::UniqueFd(sv[0]), kMtu);
  if (!made.ok()) {
    state.SkipWithError("link");
    return;
  }
  StreamLink& link = **made;
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
  state.counters["frames/s"] = benchmark::Counter(frames, benchmark::Counter::kIsRate);
  state.counters["bits/s"] = benchmark::Counter(frames * kFrame * 8, benchmark::Counter::kIsRate);
  state.counters["sends/frame"] =
      static_cast<double>(link.send_calls() - calls_before) / (frames > 0 ? frames : 1);
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

}  // namespace
}  // namespace abox::netstack

BENCHMARK_MAIN();
