// The guest's side of the wire, written by hand, for tests that drive a
// GuestStack's flows over a StreamLink (stream_stack_support.h) as the VMM:
// Ethernet/IPv4/TCP/UDP frames from the guest with correct checksums, the
// stream link's length-prefixed records, and a reader of what the gateway
// sent back (TCP segments and UDP datagrams, everything else skipped).
//
// GuestTcp is a minimal guest TCP endpoint: it keeps its own sequence
// number and what it acknowledged, sends segments with the window the test
// chooses, and collects the gateway's bytes in order (a retransmission of
// bytes already taken is skipped). It never retransmits: the stream link
// loses nothing.
//
// Invariants: every read is non-blocking and bounded in count; a frame cut
// short stays buffered until the rest comes.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "netstack/stack/guest_frame.h"
#include "tests/support/big_endian.h"

namespace abox::netstack::guest_wire {

using Bytes = std::vector<std::uint8_t>;
using abox::testing::get16;
using abox::testing::get32;
using abox::testing::put16;
using abox::testing::put32;

constexpr std::array<std::uint8_t, 6> kGuestMac = {0x02, 0, 0, 0, 0, 0x15};
constexpr std::array<std::uint8_t, 6> kGatewayMac = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
constexpr std::uint32_t kGuest = 0x0A00'020F;  // GuestConfig's default, 10.0.2.15

inline Bytes bytes_of(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

// One stream link record: the frame's length (4 bytes, big endian), the frame.
inline Bytes record(const Bytes& f) {
  Bytes r;
  r.reserve(4 + f.size());  // one allocation (and GCC 12 -O3 sees no overread in the insert)
  put32(r, static_cast<std::uint32_t>(f.size()));
  r.insert(r.end(), f.begin(), f.end());
  return r;
}

inline Bytes ethernet(const std::array<std::uint8_t, 6>& dst, std::uint16_t type) {
  Bytes f(dst.begin(), dst.end());
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  put16(f, type);
  return f;
}

// The guest asks who has the gateway (so lwIP learns the guest's MAC).
inline Bytes arp_request() {
  Bytes f = ethernet({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0806);
  f.insert(f.end(), {0, 1, 8, 0, 6, 4, 0, 1});
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  f.insert(f.end(), {10, 0, 2, 15, 0, 0, 0, 0, 0, 0, 10, 0, 2, 2});
  f.resize(60, 0);
  return f;
}

// An IPv4 frame from the guest to `dst` carrying `l4` (protocol `proto`,
// its checksum at `sum_at`, filled in here), checksums right.
inline Bytes ipv4_frame(std::uint32_t dst, std::uint8_t proto, Bytes l4, std::size_t sum_at) {
  Bytes pseudo;
  put32(pseudo, kGuest);
  put32(pseudo, dst);
  put16(pseudo, proto);
  put16(pseudo, static_cast<std::uint16_t>(l4.size()));
  const std::uint16_t l4_sum = fold_checksum(sum16(l4, sum16(pseudo)));
  l4[sum_at] = static_cast<std::uint8_t>(l4_sum >> 8);
  l4[sum_at + 1] = static_cast<std::uint8_t>(l4_sum);
  Bytes f = ethernet(kGatewayMac, 0x0800);
  const std::size_t ip = f.size();
  f.insert(f.end(), {0x45, 0});
  put16(f, static_cast<std::uint16_t>(20 + l4.size()));
  put32(f, 0);
  f.insert(f.end(), {64, proto, 0, 0});
  put32(f, kGuest);
  put32(f, dst);
  const std::uint16_t ip_sum = fold_checksum(sum16(std::span<const std::uint8_t>(f).subspan(ip, 20)));
  f[ip + 10] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[ip + 11] = static_cast<std::uint8_t>(ip_sum);
  f.insert(f.end(), l4.begin(), l4.end());
  return f;
}

namespace tcp {
constexpr std::uint8_t kFin = 0x01;
constexpr std::uint8_t kSyn = 0x02;
constexpr std::uint8_t kRst = 0x04;
constexpr std::uint8_t kPsh = 0x08;
constexpr std::uint8_t kAck = 0x10;
}  // namespace tcp

// A TCP segment from the guest's `port` to dst:dst_port. A SYN carries an
// MSS option of 1460 (without it lwIP would send 536-byte segments).
// A SYN carries the MSS option (1460), and the window scale option when
// `window_scale` is set (as Linux sends it: NOP, then kind 3).
inline Bytes tcp_segment(std::uint16_t port, std::uint32_t dst, std::uint16_t dst_port, std::uint8_t flags,
                         std::uint32_t seq, std::uint32_t ack, std::uint16_t window,
                         const Bytes& payload = {}, std::optional<std::uint8_t> window_scale = std::nullopt) {
  const bool syn = (flags & tcp::kSyn) != 0;
  const bool scale = syn && window_scale.has_value();
  Bytes t;
  put16(t, port);
  put16(t, dst_port);
  put32(t, seq);
  put32(t, ack);
  t.push_back(static_cast<std::uint8_t>((syn ? (scale ? 7 : 6) : 5) << 4));
  t.push_back(flags);
  put16(t, window);
  put32(t, 0);  // checksum, urgent pointer
  if (syn) t.insert(t.end(), {2, 4, 0x05, 0xb4});
  if (scale) t.insert(t.end(), {1, 3, 3, *window_scale});
  t.insert(t.end(), payload.begin(), payload.end());
  return ipv4_frame(dst, 6, std::move(t), 16);
}

// A UDP datagram from the guest's `port` to dst:dst_port.
inline Bytes udp_datagram(std::uint16_t port, std::uint32_t dst, std::uint16_t dst_port,
                          const Bytes& payload) {
  Bytes u;
  put16(u, port);
  put16(u, dst_port);
  put16(u, static_cast<std::uint16_t>(8 + payload.size()));
  put16(u, 0);  // checksum
  u.insert(u.end(), payload.begin(), payload.end());
  return ipv4_frame(dst, 17, std::move(u), 6);
}

// What the gateway sent: a TCP segment or a UDP datagram to the guest.
struct Seen {
  std::uint8_t proto = 0;  // 6 or 17
  std::uint32_t src = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint8_t flags = 0;  // TCP
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint16_t window = 0;
  Bytes payload;
};

// Reads what the VMM's end of the stream link holds now (non-blocking,
// bounded) and returns its whole records' frames; `in` keeps a cut record.
inline std::vector<Bytes> read_frames(int vmm, Bytes& in) {
  for (int i = 0; i < 256; ++i) {
    std::array<std::uint8_t, 65536> chunk{};
    const ssize_t n = ::recv(vmm, chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    in.insert(in.end(), chunk.begin(), chunk.begin() + n);
  }
  std::vector<Bytes> out;
  std::size_t at = 0;
  while (in.size() - at >= 4) {
    const std::size_t len = get32(in, at);
    if (in.size() - at < 4 + len) break;
    out.emplace_back(in.begin() + static_cast<std::ptrdiff_t>(at + 4),
                     in.begin() + static_cast<std::ptrdiff_t>(at + 4 + len));
    at += 4 + len;
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
  return out;
}

// Reads what the VMM's end of the stream link holds now (non-blocking,
// bounded) and parses the whole records of it; `in` keeps a cut record.
inline std::vector<Seen> read_seen(int vmm, Bytes& in) {
  for (int i = 0; i < 256; ++i) {
    std::array<std::uint8_t, 65536> chunk{};
    const ssize_t n = ::recv(vmm, chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    in.insert(in.end(), chunk.begin(), chunk.begin() + n);
  }
  std::vector<Seen> out;
  std::size_t at = 0;
  while (in.size() - at >= 4) {
    const std::size_t len = get32(in, at);
    if (in.size() - at < 4 + len) break;
    const Bytes frame(in.begin() + static_cast<std::ptrdiff_t>(at + 4),
                      in.begin() + static_cast<std::ptrdiff_t>(at + 4 + len));
    at += 4 + len;
    if (frame.size() < 34 || get16(frame, 12) != 0x0800) continue;
    const std::size_t ihl = (frame[14] & 0x0f) * 4u;
    const std::size_t ip_end = 14 + std::min<std::size_t>(get16(frame, 16), frame.size() - 14);
    const std::size_t l4 = 14 + ihl;
    Seen s;
    s.proto = frame[23];
    s.src = get32(frame, 26);
    if (s.proto == 6 && ip_end >= l4 + 20) {
      s.src_port = get16(frame, l4);
      s.dst_port = get16(frame, l4 + 2);
      s.seq = get32(frame, l4 + 4);
      s.ack = get32(frame, l4 + 8);
      s.flags = frame[l4 + 13];
      s.window = get16(frame, l4 + 14);
      const std::size_t data = l4 + (frame[l4 + 12] >> 4) * 4u;
      if (data <= ip_end)
        s.payload.assign(frame.begin() + static_cast<std::ptrdiff_t>(data),
                         frame.begin() + static_cast<std::ptrdiff_t>(ip_end));
      out.push_back(std::move(s));
    } else if (s.proto == 17 && ip_end >= l4 + 8) {
      s.src_port = get16(frame, l4);
      s.dst_port = get16(frame, l4 + 2);
      s.payload.assign(frame.begin() + static_cast<std::ptrdiff_t>(l4 + 8),
                       frame.begin() + static_cast<std::ptrdiff_t>(ip_end));
      out.push_back(std::move(s));
    }
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
  return out;
}

// One guest TCP connection from `port` to dst:dst_port.
class GuestTcp {
 public:
  GuestTcp(std::uint16_t port, std::uint32_t dst, std::uint16_t dst_port)
      : port_(port), dst_(dst), dst_port_(dst_port) {}

  std::uint16_t port() const { return port_; }
  // The segment with `flags` and `payload` (seq and ack from the state;
  // SYN and FIN take a sequence number each).
  Bytes segment(std::uint8_t flags, const Bytes& payload = {}) {
    Bytes f = tcp_segment(port_, dst_, dst_port_, flags, seq_, ack_, window_, payload, window_scale_);
    seq_ += static_cast<std::uint32_t>(payload.size());
    if ((flags & (tcp::kSyn | tcp::kFin)) != 0) ++seq_;
    return f;
  }
  Bytes syn() {
    seq_ = 1000;
    return segment(tcp::kSyn);
  }
  Bytes ack() { return segment(tcp::kAck); }
  Bytes data(const Bytes& payload) { return segment(tcp::kAck | tcp::kPsh, payload); }
  Bytes fin() { return segment(tcp::kAck | tcp::kFin); }
  Bytes rst() { return segment(tcp::kRst | tcp::kAck); }
  // A zero-window probe as Linux sends it: an ACK one below the next
  // sequence number (outside the window), which the receiver answers with
  // an ACK carrying its window.
  Bytes probe() { return tcp_segment(port_, dst_, dst_port_, tcp::kAck, seq_ - 1, ack_, window_); }

  // Takes the gateway's segments for this connection: its bytes in order,
  // its FIN and RST, its window; acknowledges them in the next segment sent
  // (when `advance_ack`; otherwise what it acknowledges stays put, as a
  // guest that does not read).
  void take(const std::vector<Seen>& seen, bool advance_ack = true) {
    for (const Seen& s : seen) {
      if (s.proto != 6 || s.dst_port != port_ || s.src_port != dst_port_) continue;
      if ((s.flags & tcp::kRst) != 0) reset_ = true;
      if ((s.flags & tcp::kAck) != 0) {
        peer_acked_ = s.ack;
        // A SYN's window is never scaled (RFC 7323 2.2).
        peer_window_ = (s.flags & tcp::kSyn) != 0 ? s.window : std::uint32_t{s.window} << peer_scale_;
      }
      if ((s.flags & tcp::kSyn) != 0) {
        syn_ack_ = true;
        rcv_next_ = s.seq + 1;
        ack_ = rcv_next_;
        continue;
      }
      // Only what starts at or before rcv_next_ (lwIP sends in order; a
      // retransmission starts before it).
      const std::uint32_t start = s.seq;
      const auto len = static_cast<std::uint32_t>(s.payload.size());
      if (static_cast<std::int32_t>(start - rcv_next_) <= 0 &&
          static_cast<std::int32_t>(start + len - rcv_next_) > 0) {
        const std::uint32_t skip = rcv_next_ - start;
        received_.insert(received_.end(), s.payload.begin() + skip, s.payload.end());
        rcv_next_ = start + len;
      }
      if ((s.flags & tcp::kFin) != 0 && start + len == rcv_next_ && !fin_) {
        fin_ = true;
        ++rcv_next_;
      }
    }
    if (advance_ack) ack_ = rcv_next_;
  }

  bool syn_ack() const { return syn_ack_; }
  bool reset_seen() const { return reset_; }
  bool fin_seen() const { return fin_; }
  // The gateway's bytes so far; cleared by the caller when it wants.
  Bytes& received() { return received_; }
  // The gateway's window in bytes (scaled, once both SYNs agreed on it).
  std::uint32_t peer_window() const { return peer_window_; }
  // Window scaling both ways: the guest's SYN offers `ours`, and the
  // gateway's windows are read with `peers` (what its SYN-ACK says: lwIP's
  // TCP_RCV_SCALE). Call before syn().
  void use_window_scale(std::uint8_t ours, std::uint8_t peers) {
    window_scale_ = ours;
    peer_scale_ = peers;
  }
  // Guest bytes the gateway has not acknowledged yet.
  std::uint32_t unacked() const { return seq_ - peer_acked_; }
  void set_window(std::uint16_t w) { window_ = w; }
  // Acknowledges everything received (for the next segment).
  void ack_all() { ack_ = rcv_next_; }

 private:
  std::uint16_t port_;
  std::uint32_t dst_;
  std::uint16_t dst_port_;
  std::uint32_t seq_ = 1000;
  std::uint32_t ack_ = 0;
  std::uint32_t rcv_next_ = 0;
  std::uint32_t peer_acked_ = 1001;
  std::uint32_t peer_window_ = 0;
  std::uint16_t window_ = 65535;
  std::optional<std::uint8_t> window_scale_;
  std::uint8_t peer_scale_ = 0;
  bool syn_ack_ = false;
  bool reset_ = false;
  bool fin_ = false;
  Bytes received_;
};

}  // namespace abox::netstack::guest_wire
