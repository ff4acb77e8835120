// Fuzz target: StreamLink's framing (netstack/link/stream_link), read the way
// GuestStack reads it: through ring_receive_iovecs(), finish_ring_receive()
// and receive_buffered(). The "kernel" is this driver: it copies the input
// into the link's iovec in reads of a size the first byte picks, so no
// system call runs per input. Whatever the bytes: no crash, no read past
// the input, and the frames handed out, in order, and the link's counters
// (frames_in, dropped_oversize, dropped_runt(), dropped_zero_length()) are
// exactly those of an independent parse of the same bytes; a read of 0
// bytes (the VMM closed) ends the link with ECONNRESET once every whole
// frame was handed out, a torn one never. The link's input buffer is the
// smallest it allows (four records of the largest frame, not 256 KiB): each
// input costs little to set up, and frames straddle the buffer's refills
// (make_room()) every few reads. Every oversize frame whose head the link
// hands over (Link::last_oversize_head()) is one the parse found, in order,
// with its real length and exactly its first bytes (as many as the head
// should hold); a head the link does not keep (cut by a read) is allowed.
// Input: byte 0 = MTU (bit 0: 68, else 1500) and read size (1 + byte0 / 2),
// then the stream bytes. Seeds: fuzz/corpus/stream_framing/.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/link/stream_link.h"

namespace {

using namespace abox::netstack;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
using Bytes = std::vector<std::uint8_t>;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// What the stream holds, parsed without StreamLink: the whole frames and the
// records refused, as the framing (stream_link.h) defines them.
struct Expected {
  std::vector<Bytes> frames;
  std::uint64_t oversize = 0, runts = 0, zero = 0;
  // Records over the maximum: where each frame starts in the stream, and
  // its length.
  std::vector<std::pair<std::size_t, std::uint64_t>> oversize_at;
};
Expected parse(std::span<const std::uint8_t> s, std::size_t max_frame) {
  Expected e;
  std::size_t at = 0;
  while (s.size() - at >= 4) {
    const std::uint64_t len = (std::uint64_t{s[at]} << 24) | (std::uint64_t{s[at + 1]} << 16) |
                              (std::uint64_t{s[at + 2]} << 8) | s[at + 3];
    at += 4;
    if (len == 0) {
      ++e.zero;
      continue;
    }
    if (len < 14 || len > max_frame) {
      ++(len < 14 ? e.runts : e.oversize);
      if (len > max_frame) e.oversize_at.emplace_back(at, len);
      at += static_cast<std::size_t>(std::min<std::uint64_t>(len, s.size() - at));
      continue;
    }
    if (s.size() - at < len) break;  // torn by the close
    e.frames.emplace_back(s.begin() + static_cast<long>(at), s.begin() + static_cast<long>(at + len));
    at += len;
  }
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t mtu = (data[0] & 1) != 0 ? 68 : 1500;
  const std::size_t read_size = 1 + data[0] / 2;
  const std::span<const std::uint8_t> stream(data + 1, size - 1);

  std::array<int, 2> sv{};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv.data()) != 0) return 0;
  abox::base::UniqueFd peer(sv[1]);
  auto made = StreamLink::from_connected(abox::base::UniqueFd(sv[0]), mtu, 0);
  check(made.ok());
  StreamLink& link = **made;
  const Expected want = parse(stream, link.max_frame_size());

  Bytes buf(link.max_receive_size());
  std::vector<Bytes> got;
  std::size_t next_oversize = 0;  // the first of want.oversize_at a head may be of
  auto take_head = [&] {
    const auto head = link.last_oversize_head();
    if (!head) return false;
    check(head->head.data() == buf.data());
    // The next expected one it is (a head not kept is skipped over): the
    // same length, its size, its bytes.
    auto is_this = [&](const std::pair<std::size_t, std::uint64_t>& o) {
      const auto wanted =
          static_cast<std::size_t>(std::min<std::uint64_t>(o.second, Link::kOversizeHeadBytes));
      return o.second == head->frame_size && head->head.size() == std::min(wanted, buf.size()) &&
             o.first + head->head.size() <= stream.size() &&
             std::equal(head->head.begin(), head->head.end(), stream.begin() + static_cast<long>(o.first));
    };
    std::size_t i = next_oversize;
    while (i < want.oversize_at.size() && !is_this(want.oversize_at[i])) ++i;
    check(i < want.oversize_at.size());
    next_oversize = i + 1;
    return true;
  };
  auto take = [&](abox::base::Result<std::size_t, int> r) {
    for (int i = 0; r.ok() && (*r != 0 || take_head()); ++i) {
      check(i < 100000);
      if (*r != 0) {
        check(*r >= 14 && *r <= link.max_frame_size());
        check(!link.last_oversize_head());
        got.emplace_back(buf.begin(), buf.begin() + static_cast<long>(*r));
      }
      r = link.receive_buffered(buf);
    }
    return r;
  };
  std::size_t at = 0;
  while (at < stream.size()) {
    const auto iov = link.ring_receive_iovecs(buf);
    check(iov.size() == 1 && iov[0].iov_len > link.max_frame_size());
    const std::size_t n = std::min({read_size, iov[0].iov_len, stream.size() - at});
    std::memcpy(iov[0].iov_base, stream.data() + at, n);
    at += n;
    auto r = take(link.finish_ring_receive(static_cast<int>(n)));
    check(r.ok() && *r == 0);
  }
  // The VMM closes: a read of 0 bytes.
  (void)link.ring_receive_iovecs(buf);
  auto end = take(link.finish_ring_receive(0));
  check(!end.ok() && end.error() == ECONNRESET);
  check(!link.receive_buffered(buf).ok());

  check(got == want.frames);
  check(link.counters().frames_in == want.frames.size());
  check(link.counters().dropped_oversize == want.oversize);
  check(link.dropped_runt() == want.runts);
  check(link.dropped_zero_length() == want.zero);
  return 0;
}
