// Helpers for the link tests (tap_link_test.cc, link_contract_test.cc):
// network namespaces made and removed by the test, contract frames, and the
// far end of a link under test (LinkPeer; TapPeer for a tap).
//
// Invariants: every namespace a ScopedNetns makes is named
// abox-tap-test-<pid>-<n> and deleted when it goes away, pass or fail; every
// wait is bounded by a timeout.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/link/link.h"
#include "policy/ip_address.h"
#include "tests/support/big_endian.h"
#include "tests/support/needs_root.h"  // ABOX_NEEDS_ROOT, for the tests that use kNeedRoot

namespace abox::netstack::link_test {

using namespace std::chrono_literals;
using Frame = std::vector<std::uint8_t>;
using Mac = std::array<std::uint8_t, 6>;
using Clock = std::chrono::steady_clock;

inline constexpr const char* kNeedRoot =
    "needs root: creates network namespaces and tap devices (CI runs as root, so it runs there)";
inline bool is_root() {
  return ::geteuid() == 0;
}

// ---------------------------------------------------------------------------
// Shell, namespaces, sockets inside a namespace.

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

inline CommandResult run(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> chunk{};
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) result.output.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// A namespace made with `ip netns add`, deleted with `ip netns del` when this
// goes away. IPv6 is off in it by default (quiet = true) so that the guest
// kernel sends nothing on its own and counters can be checked exactly.
class ScopedNetns {
 public:
  explicit ScopedNetns(bool quiet = true)
      : name_("abox-tap-test-" + std::to_string(::getpid()) + "-" + std::to_string(next_++)) {
    const CommandResult r = run("ip netns add " + name_);
    created_ = r.status == 0;
    if (!created_) {
      ADD_FAILURE() << "ip netns add " << name_ << ": " << r.output;
      return;
    }
    if (quiet) {
      const CommandResult q = run("ip netns exec " + name_ +
                                  " sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6 &&"
                                  " echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'");
      if (q.status != 0) ADD_FAILURE() << "disabling IPv6 in " << name_ << ": " << q.output;
    }
  }
  ~ScopedNetns() { remove(); }
  ScopedNetns(const ScopedNetns&) = delete;
  ScopedNetns& operator=(const ScopedNetns&) = delete;
  ScopedNetns(ScopedNetns&&) = delete;
  ScopedNetns& operator=(ScopedNetns&&) = delete;

  const std::string& name() const { return name_; }
  std::string path() const { return "/run/netns/" + name_; }
  bool ok() const { return created_; }
  // `ip -n NAME args`
  CommandResult ip(const std::string& args) const { return run("ip -n " + name_ + " " + args); }
  void remove() {
    if (created_) run("ip netns del " + name_);
    created_ = false;
  }

 private:
  static inline int next_ = 0;
  std::string name_;
  bool created_ = false;
};

// Runs fn on a thread that first enters the namespace at `path`; what fn
// opens (sockets, taps) stays in that namespace. The test's own thread never
// changes namespace.
template <class F>
auto in_netns(const std::string& path, F fn) -> decltype(fn()) {
  decltype(fn()) result{};
  std::thread worker([&] {
    base::UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns || ::setns(ns.get(), CLONE_NEWNET) != 0) return;
    result = fn();
  });
  worker.join();
  return result;
}

struct NsId {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const NsId&, const NsId&) = default;
};
inline NsId ns_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino};
}

// Opens a tap like someone else would before `abox-net --tap-fd N`:
// blocking, in the namespace at `path`.
inline base::UniqueFd open_tap_in(const std::string& path, const std::string& ifname, int flags) {
  return in_netns(path, [&] {
    base::UniqueFd tap(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    if (!tap) return base::UniqueFd();
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname.data(), std::min(ifname.size(), sizeof(ifr.ifr_name) - 1));
    ifr.ifr_flags = static_cast<short>(flags);
    if (::ioctl(tap.get(), TUNSETIFF, &ifr) != 0) return base::UniqueFd();
    return tap;
  });
}

// ---------------------------------------------------------------------------
// Frames.

using abox::testing::get16;
using abox::testing::put16;
inline void put_bytes(Frame& f, std::span<const std::uint8_t> b) {
  f.insert(f.end(), b.begin(), b.end());
}
inline std::array<std::uint8_t, 4> ip4(const policy::IpAddress& a) {
  return {a.bytes()[0], a.bytes()[1], a.bytes()[2], a.bytes()[3]};
}
inline bool bytes_at(const Frame& f, std::size_t at, std::span<const std::uint8_t> want) {
  return f.size() >= at + want.size() &&
         std::equal(want.begin(), want.end(), f.begin() + static_cast<long>(at));
}
inline Mac mac_at(const Frame& f, std::size_t at) {
  Mac m{};
  std::copy_n(f.begin() + static_cast<long>(at), 6, m.begin());
  return m;
}

inline std::uint16_t inet_checksum(std::span<const std::uint8_t> data) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < data.size(); i += 2)
    sum += static_cast<std::uint32_t>((data[i] << 8) | data[i + 1]);
  if (data.size() % 2 != 0) sum += static_cast<std::uint32_t>(data.back() << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

inline constexpr Mac kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
inline constexpr std::uint16_t kEtherArp = 0x0806;
inline constexpr std::uint16_t kEtherIpv4 = 0x0800;
// IEEE 802 "local experimental" EtherType: contract frames carry it, so a
// peer's own traffic can never be mistaken for them.
inline constexpr std::uint16_t kContractEtherType = 0x88B5;

// An Ethernet frame of one IPv4 TCP segment (ACK, seq 1, ack 1) carrying
// `payload` counting bytes: far larger than the MTU, as TSO and GSO make
// them. The IP checksum is set; the TCP checksum is left 0 for the offload.
struct BigTcpFrame {
  Mac dst_mac, src_mac;
  std::array<std::uint8_t, 4> src_ip, dst_ip;
  std::uint16_t ip_id;
  std::uint16_t src_port, dst_port;
  std::size_t payload;
};
inline Frame big_tcp_frame(const BigTcpFrame& b) {
  Frame f;
  put_bytes(f, b.dst_mac);
  put_bytes(f, b.src_mac);
  put16(f, kEtherIpv4);
  const auto ip_len = static_cast<std::uint16_t>(20 + 20 + b.payload);
  put16(f, 0x4500);
  put16(f, ip_len);
  put16(f, b.ip_id);
  put16(f, 0x4000);  // don't fragment
  put16(f, 0x4006);  // TTL 64, TCP
  put16(f, 0);       // the checksum, below
  put_bytes(f, b.src_ip);
  put_bytes(f, b.dst_ip);
  const std::uint16_t ip_sum = inet_checksum(std::span(f).subspan(14, 20));
  f[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[25] = static_cast<std::uint8_t>(ip_sum);
  put16(f, b.src_port);
  put16(f, b.dst_port);
  const std::array<std::uint8_t, 16> tcp_rest = {0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0};
  put_bytes(f, tcp_rest);
  while (f.size() < 14u + ip_len) f.push_back(static_cast<std::uint8_t>(f.size()));
  return f;
}

inline constexpr std::uint16_t kEtherIpv6 = 0x86DD;

// The same segment over IPv6 (no extension headers): the TCP header starts
// at 54, its checksum at 54 + 16.
struct BigTcp6Frame {
  Mac dst_mac, src_mac;
  std::array<std::uint8_t, 16> src_ip, dst_ip;
  std::uint16_t src_port, dst_port;
  std::size_t payload;
};
inline Frame big_tcp6_frame(const BigTcp6Frame& b) {
  Frame f;
  put_bytes(f, b.dst_mac);
  put_bytes(f, b.src_mac);
  put16(f, kEtherIpv6);
  put16(f, 0x6000);  // version 6, no traffic class or flow label
  put16(f, 0);
  put16(f, static_cast<std::uint16_t>(20 + b.payload));
  put16(f, 0x0640);  // next header TCP, hop limit 64
  put_bytes(f, b.src_ip);
  put_bytes(f, b.dst_ip);
  put16(f, b.src_port);
  put16(f, b.dst_port);
  const std::array<std::uint8_t, 16> tcp_rest = {0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0};
  put_bytes(f, tcp_rest);
  const std::size_t end = 14 + 40 + 20 + b.payload;
  while (f.size() < end) f.push_back(static_cast<std::uint8_t>(f.size()));
  return f;
}

// A contract frame: broadcast, kContractEtherType, then `seq` and filler up
// to `size` bytes.
inline Frame test_frame(std::size_t size, std::uint16_t seq) {
  // Sized once and filled, not grown: growing made GCC 12 at -O3 report
  // false -Wstringop-overflow in vector's insert.
  const Mac src = {0x02, 0, 0, 0, 0, 0x01};
  Frame f(std::max<std::size_t>(size, 16));
  std::copy(kBroadcast.begin(), kBroadcast.end(), f.begin());
  std::copy(src.begin(), src.end(), f.begin() + 6);
  f[12] = static_cast<std::uint8_t>(kContractEtherType >> 8);
  f[13] = static_cast<std::uint8_t>(kContractEtherType & 0xFF);
  f[14] = static_cast<std::uint8_t>(seq >> 8);
  f[15] = static_cast<std::uint8_t>(seq & 0xFF);
  for (std::size_t i = 16; i < f.size(); ++i) f[i] = static_cast<std::uint8_t>(i * 7 + seq);
  f.resize(size);
  return f;
}
inline bool is_test_frame(const Frame& f) {
  return f.size() >= 14 && get16(f, 12) == kContractEtherType;
}

inline bool is_arp_request_for(const Frame& f, const policy::IpAddress& target) {
  return f.size() >= 42 && get16(f, 12) == kEtherArp && get16(f, 20) == 1 && bytes_at(f, 38, ip4(target));
}

inline Frame arp_reply(const Mac& from_mac, const policy::IpAddress& from_ip, const Mac& to_mac,
                       const policy::IpAddress& to_ip) {
  Frame f;
  put_bytes(f, to_mac);
  put_bytes(f, from_mac);
  put16(f, kEtherArp);
  put16(f, 1);       // hardware: Ethernet
  put16(f, 0x0800);  // protocol: IPv4
  f.push_back(6);
  f.push_back(4);
  put16(f, 2);  // reply
  put_bytes(f, from_mac);
  put_bytes(f, ip4(from_ip));
  put_bytes(f, to_mac);
  put_bytes(f, ip4(to_ip));
  f.resize(60, 0);  // minimum Ethernet payload
  return f;
}

inline bool is_echo_request_to(const Frame& f, const policy::IpAddress& dst) {
  if (f.size() < 14 + 20 + 8 || get16(f, 12) != kEtherIpv4 || f[23] != 1 /* ICMP */) return false;
  const std::size_t ihl = (f[14] & 0x0F) * 4u;
  return bytes_at(f, 30, ip4(dst)) && f.size() >= 14 + ihl + 8 && f[14 + ihl] == 8;
}

// The gateway's answer to an echo request frame: addresses swapped, type 0,
// checksums redone.
inline Frame echo_reply(const Frame& request, const Mac& gateway_mac) {
  Frame f = request;
  const std::size_t ihl = (f[14] & 0x0F) * 4u;
  const std::size_t ip_len = get16(f, 16);
  f.resize(14 + ip_len);
  std::copy_n(request.begin() + 6, 6, f.begin());  // to the guest
  std::copy(gateway_mac.begin(), gateway_mac.end(), f.begin() + 6);
  std::copy_n(request.begin() + 26, 4, f.begin() + 30);
  std::copy_n(request.begin() + 30, 4, f.begin() + 26);
  f[14 + 8] = 64;  // TTL
  f[24] = f[25] = 0;
  const std::uint16_t ip_sum = inet_checksum(std::span(f).subspan(14, ihl));
  f[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[25] = static_cast<std::uint8_t>(ip_sum);
  const std::size_t icmp = 14 + ihl;
  f[icmp] = 0;  // echo reply
  f[icmp + 2] = f[icmp + 3] = 0;
  const std::uint16_t icmp_sum = inet_checksum(std::span(f).subspan(icmp, ip_len - ihl));
  f[icmp + 2] = static_cast<std::uint8_t>(icmp_sum >> 8);
  f[icmp + 3] = static_cast<std::uint8_t>(icmp_sum);
  return f;
}

// Receives from `link` until a frame satisfies `want` (others are skipped)
// or `timeout` passes.
inline std::optional<Frame> wait_frame(Link& link, const std::function<bool(const Frame&)>& want,
                                       std::chrono::milliseconds timeout) {
  Frame buf(link.mtu() + 14);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    for (;;) {
      auto r = link.receive(buf);
      if (!r.ok()) break;
      if (*r == 0) {
        if (link.last_oversize_head()) continue;  // an oversize frame's head: more may wait (link.h)
        break;
      }
      Frame got(buf.begin(), buf.begin() + static_cast<long>(*r));
      if (want(got)) return got;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) return std::nullopt;
    pollfd p{link.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

// ---------------------------------------------------------------------------
// The Link contract.

// The far end of a link under test: the guest, or the VMM.
class LinkPeer {
 public:
  virtual ~LinkPeer() = default;
  // Sends a frame to the link under test. The peer carries frames up to
  // the link's mtu() + 14 + kPeerSlack bytes, so that it can send frames the
  // link must refuse.
  virtual void inject(std::span<const std::uint8_t> frame) = 0;
  // The next contract frame (kContractEtherType) the link under test sent,
  // waiting up to `timeout`; nullopt when none came.
  virtual std::optional<Frame> next_sent(std::chrono::milliseconds timeout) = 0;
  // The next frame the link sent that `want` picks, of any kind and up to
  // 64 KiB (a GSO frame): for a link that says tx_tso(). A peer whose link
  // never does has no need of it.
  virtual std::optional<Frame> next_sent_where(std::chrono::milliseconds timeout,
                                               const std::function<bool(const Frame&)>& want) {
    (void)timeout;
    (void)want;
    ADD_FAILURE() << "this peer cannot look for frames other than the contract's";
    return std::nullopt;
  }
  // The far end goes away for good (the tap is deleted, the VMM exits).
  virtual void kill() = 0;
  // Sends a frame in pieces, calling between() after each piece but the
  // last, so that the link sees it cut across reads; returns true. A peer
  // whose medium keeps frames whole (a tap) sends it whole, never calls
  // between() and returns false.
  virtual bool inject_in_pieces(std::span<const std::uint8_t> frame, const std::function<void()>& between) {
    (void)between;
    inject(frame);
    return false;
  }
  // Sends many frames back to back (in one write where the medium allows).
  virtual void inject_batch(const std::vector<Frame>& frames) {
    for (const Frame& f : frames) inject(f);
  }
  // Sends a frame shorter than an Ethernet header; false when the medium
  // cannot carry one (the kernel refuses them on an Ethernet device, so a
  // tap never delivers one).
  virtual bool inject_runt(std::span<const std::uint8_t> frame) {
    (void)frame;
    return false;
  }
};
inline constexpr std::size_t kPeerSlack = 1000;

struct LinkUnderTest {
  std::unique_ptr<LinkPeer> peer;  // first, so it outlives the link
  std::unique_ptr<Link> link;
};

// The peer of a tap: an AF_PACKET socket on the tap inside its namespace,
// which sees what the guest's eth0 receives and can send as the guest.
class TapPeer final : public LinkPeer {
 public:
  // Owns `ns`. Raises eth0's MTU to the link's plus kPeerSlack, as a guest
  // that ignores its configured MTU would.
  TapPeer(std::unique_ptr<ScopedNetns> ns, std::string ifname, std::size_t link_mtu)
      : ns_(std::move(ns)), ifname_(std::move(ifname)) {
    const CommandResult r =
        ns_->ip("link set " + ifname_ + " mtu " + std::to_string(link_mtu + kPeerSlack) + " up");
    if (r.status != 0) ADD_FAILURE() << "raising the MTU of " << ifname_ << ": " << r.output;
    socket_ = in_netns(ns_->path(), [&] {
      base::UniqueFd s(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
      if (!s) return base::UniqueFd();
      sockaddr_ll at{};
      at.sll_family = AF_PACKET;
      at.sll_protocol = htons(ETH_P_ALL);
      at.sll_ifindex = static_cast<int>(::if_nametoindex(ifname_.c_str()));
      if (at.sll_ifindex == 0 || ::bind(s.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) {
        return base::UniqueFd();
      }
      return s;
    });
    if (!socket_) ADD_FAILURE() << "no packet socket on " << ifname_ << " in " << ns_->name();
  }

  void inject(std::span<const std::uint8_t> frame) override {
    const ssize_t n = ::send(socket_.get(), frame.data(), frame.size(), 0);
    EXPECT_EQ(n, static_cast<ssize_t>(frame.size())) << "packet socket send: " << std::strerror(errno);
  }

  std::optional<Frame> next_sent(std::chrono::milliseconds timeout) override {
    return next_sent_where(timeout, is_test_frame);
  }

  std::optional<Frame> next_sent_where(std::chrono::milliseconds timeout,
                                       const std::function<bool(const Frame&)>& want) override {
    Frame buf(256 * 1024);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{socket_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max(left, 0ms).count())) <= 0) return std::nullopt;
      sockaddr_ll from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n =
          ::recvfrom(socket_.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0) return std::nullopt;
      if (from.sll_pkttype == PACKET_OUTGOING) continue;  // what the guest itself sent
      Frame got(buf.begin(), buf.begin() + n);
      if (want(got)) return got;
    }
  }

  void kill() override {
    const CommandResult r = ns_->ip("link del " + ifname_);
    EXPECT_EQ(r.status, 0) << r.output;
  }

 private:
  std::unique_ptr<ScopedNetns> ns_;
  std::string ifname_;
  base::UniqueFd socket_;
};

}  // namespace abox::netstack::link_test
