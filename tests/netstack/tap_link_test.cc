// TapLink against real network namespaces and tap devices, and the Link
// contract: one typed suite (LinkContract) that every Link implementation
// joins with a factory returning the link and a peer for its far end. The
// tap joins twice (create_in_netns and from_fd); the QEMU stream link will
// join with a socketpair peer.
//
// Each test makes its own namespace (abox-tap-test-<pid>-<n>) and deletes it
// when done, pass or fail. Tests that need namespaces skip when not root;
// CI runs as root, so there they really run.
#include "netstack/tap_link.h"

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
#include <sys/uio.h>
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

namespace abox::netstack {
namespace {

using namespace std::chrono_literals;
using Frame = std::vector<std::uint8_t>;
using Mac = std::array<std::uint8_t, 6>;
using Clock = std::chrono::steady_clock;

constexpr const char* kNeedRoot =
    "needs root: creates network namespaces and tap devices (CI runs as root, so it runs there)";
bool is_root() {
  return ::geteuid() == 0;
}

// ---------------------------------------------------------------------------
// Shell, namespaces, sockets inside a namespace.

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CommandResult run(const std::string& command) {
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
NsId ns_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino};
}

// Opens a tap like someone else would before `abox-net --tap-fd N`:
// blocking, in the namespace at `path`.
base::UniqueFd open_tap_in(const std::string& path, const std::string& ifname, int flags) {
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

void put16(Frame& f, std::uint16_t v) {
  f.push_back(static_cast<std::uint8_t>(v >> 8));
  f.push_back(static_cast<std::uint8_t>(v & 0xFF));
}
std::uint16_t get16(const Frame& f, std::size_t at) {
  return static_cast<std::uint16_t>((f.at(at) << 8) | f.at(at + 1));
}
void put_bytes(Frame& f, std::span<const std::uint8_t> b) {
  f.insert(f.end(), b.begin(), b.end());
}
std::array<std::uint8_t, 4> ip4(const policy::IpAddress& a) {
  return {a.bytes()[0], a.bytes()[1], a.bytes()[2], a.bytes()[3]};
}
bool bytes_at(const Frame& f, std::size_t at, std::span<const std::uint8_t> want) {
  return f.size() >= at + want.size() &&
         std::equal(want.begin(), want.end(), f.begin() + static_cast<long>(at));
}
Mac mac_at(const Frame& f, std::size_t at) {
  Mac m{};
  std::copy_n(f.begin() + static_cast<long>(at), 6, m.begin());
  return m;
}

std::uint16_t inet_checksum(std::span<const std::uint8_t> data) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < data.size(); i += 2)
    sum += static_cast<std::uint32_t>((data[i] << 8) | data[i + 1]);
  if (data.size() % 2 != 0) sum += static_cast<std::uint32_t>(data.back() << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

constexpr Mac kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr std::uint16_t kEtherArp = 0x0806;
constexpr std::uint16_t kEtherIpv4 = 0x0800;
// IEEE 802 "local experimental" EtherType: contract frames carry it, so a
// peer's own traffic can never be mistaken for them.
constexpr std::uint16_t kContractEtherType = 0x88B5;

// A contract frame: broadcast, kContractEtherType, then `seq` and filler up
// to `size` bytes.
Frame test_frame(std::size_t size, std::uint16_t seq) {
  const Mac src = {0x02, 0, 0, 0, 0, 0x01};
  Frame f;
  put_bytes(f, kBroadcast);
  put_bytes(f, src);
  put16(f, kContractEtherType);
  put16(f, seq);
  while (f.size() < size) f.push_back(static_cast<std::uint8_t>(f.size() * 7 + seq));
  f.resize(size);
  return f;
}
bool is_test_frame(const Frame& f) {
  return f.size() >= 14 && get16(f, 12) == kContractEtherType;
}

bool is_arp_request_for(const Frame& f, const policy::IpAddress& target) {
  return f.size() >= 42 && get16(f, 12) == kEtherArp && get16(f, 20) == 1 && bytes_at(f, 38, ip4(target));
}

Frame arp_reply(const Mac& from_mac, const policy::IpAddress& from_ip, const Mac& to_mac,
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

bool is_echo_request_to(const Frame& f, const policy::IpAddress& dst) {
  if (f.size() < 14 + 20 + 8 || get16(f, 12) != kEtherIpv4 || f[23] != 1 /* ICMP */) return false;
  const std::size_t ihl = (f[14] & 0x0F) * 4u;
  return bytes_at(f, 30, ip4(dst)) && f.size() >= 14 + ihl + 8 && f[14 + ihl] == 8;
}

// The gateway's answer to an echo request frame: addresses swapped, type 0,
// checksums redone.
Frame echo_reply(const Frame& request, const Mac& gateway_mac) {
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
std::optional<Frame> wait_frame(Link& link, const std::function<bool(const Frame&)>& want,
                                std::chrono::milliseconds timeout) {
  Frame buf(link.mtu() + 14);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    for (;;) {
      auto r = link.receive(buf);
      if (!r.ok() || *r == 0) break;
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
  // The far end goes away for good (the tap is deleted, the VMM exits).
  virtual void kill() = 0;
};
constexpr std::size_t kPeerSlack = 1000;

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
      if (is_test_frame(got)) return got;
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

constexpr std::size_t kContractMtu = 1500;

struct TapInNetnsFactory {
  static constexpr const char* kName = "TapInNetns";
  static const char* skip_reason() { return is_root() ? nullptr : kNeedRoot; }
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

template <class Factory>
class LinkContract : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* reason = Factory::skip_reason()) GTEST_SKIP() << reason;
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
using LinkFactories = ::testing::Types<TapInNetnsFactory, TapFromFdFactory>;
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
  for (const Frame* f : expect) {
    auto got = this->peer().next_sent(2s);
    ASSERT_TRUE(got) << "a frame of " << f->size() << " bytes sent in pieces never reached the peer";
    EXPECT_EQ(*got, *f);
  }
  EXPECT_EQ(this->link().counters().frames_out, expect.size());
  const Frame too_big = test_frame(this->max_frame() + 1, 4);
  const auto pieces = cut(too_big, {100});
  EXPECT_TRUE(this->link().send_frame(OutFrame{pieces}).ok());
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

TYPED_TEST(LinkContract, OversizeSendIsDroppedAndCounted) {
  auto r = this->link().send(test_frame(this->max_frame() + 1, 1));
  EXPECT_TRUE(r.ok()) << "an oversize frame is dropped, not a dead link";
  ASSERT_TRUE(this->link().send(test_frame(300, 2)).ok());
  auto got = this->peer().next_sent(2s);
  ASSERT_TRUE(got);
  EXPECT_EQ(get16(*got, 14), 2);
  EXPECT_EQ(this->link().counters().dropped_oversize, 1u);
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
  auto s = this->link().send(test_frame(60, 1));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error(), EAGAIN);
}

// ---------------------------------------------------------------------------
// TapLink itself.

class TapLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_root()) GTEST_SKIP() << kNeedRoot;
  }
  static std::unique_ptr<TapLink> create(const ScopedNetns& ns, const GuestNetConfig& config = {}) {
    auto link = TapLink::create_in_netns(ns.name(), config);
    if (!link) {
      ADD_FAILURE() << link.error();
      return nullptr;
    }
    return std::move(link).value();
  }
};

void expect_configured(const ScopedNetns& ns, std::size_t mtu) {
  const CommandResult addr = ns.ip("-j addr show eth0");
  ASSERT_EQ(addr.status, 0) << addr.output;
  EXPECT_NE(addr.output.find("\"mtu\":" + std::to_string(mtu) + ","), std::string::npos) << addr.output;
  EXPECT_NE(addr.output.find("\"local\":\"10.0.2.15\",\"prefixlen\":24,\"broadcast\":\"10.0.2.255\""),
            std::string::npos)
      << addr.output;
  EXPECT_NE(addr.output.find("\"UP\""), std::string::npos) << addr.output;
  EXPECT_NE(addr.output.find("\"LOWER_UP\""), std::string::npos) << "no carrier: " << addr.output;
  const CommandResult route = ns.ip("route");
  EXPECT_NE(route.output.find("default via 10.0.2.2 dev eth0"), std::string::npos) << route.output;
  const CommandResult lo = ns.ip("-j link show lo");
  EXPECT_NE(lo.output.find("\"UP\""), std::string::npos) << lo.output;
}

TEST_F(TapLinkTest, CreateConfiguresTheDefaultGuestNetwork) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  expect_configured(ns, 65520);
  EXPECT_EQ(link->mtu(), 65520u);
  EXPECT_EQ(link->max_frame_size(), 65534u);
  EXPECT_EQ(link->ifname(), "eth0");
  EXPECT_EQ(link->netns_path(), ns.path());
  EXPECT_TRUE(::fcntl(link->fd(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(link->fd(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(TapLinkTest, CreateWithMtu1500AndAGuestMac) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  config.guest_mac = Mac{0x02, 0xab, 0xcd, 0x00, 0x00, 0x0f};
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  expect_configured(ns, 1500);
  const CommandResult eth0 = ns.ip("-j link show eth0");
  EXPECT_NE(eth0.output.find("\"address\":\"02:ab:cd:00:00:0f\""), std::string::npos) << eth0.output;
}

TEST_F(TapLinkTest, CreateWithAnIpv6GuestNetwork) {
  ScopedNetns ns(/*quiet=*/false);
  GuestNetConfig config;
  config.guest_address = *policy::IpAddress::parse("fd00:ab::15");
  config.prefix_len = 64;
  config.gateway = *policy::IpAddress::parse("fd00:ab::2");
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  const CommandResult addr = ns.ip("-j -6 addr show eth0");
  EXPECT_NE(addr.output.find("\"local\":\"fd00:ab::15\",\"prefixlen\":64"), std::string::npos) << addr.output;
  const CommandResult route = ns.ip("-6 route");
  EXPECT_NE(route.output.find("default via fd00:ab::2 dev eth0"), std::string::npos) << route.output;
}

TEST_F(TapLinkTest, DestroyingTheLinkRemovesTheTap) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  link.reset();
  EXPECT_NE(ns.ip("link show eth0").status, 0);
}

// What `ping -c1 10.0.2.2` does in the guest, with the test as the gateway:
// the guest's ARP request comes out of the link, our ARP reply goes in, the
// queued echo request comes out addressed to the gateway's MAC, our echo
// reply goes in and reaches the guest's socket. Both directions, end to end.
TEST_F(TapLinkTest, GuestPingsTheGatewayThroughTheLink) {
  ScopedNetns ns(/*quiet=*/false);  // with the guest's IPv6 chatter, as in real life
  const GuestNetConfig config;
  auto link = create(ns, config);
  ASSERT_TRUE(link);

  base::UniqueFd icmp = in_netns(
      ns.path(), [] { return base::UniqueFd(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP)); });
  ASSERT_TRUE(icmp) << "raw ICMP socket in the namespace";
  Frame echo = {8, 0, 0, 0, 0x42, 0x42, 0, 1, 'a', 'b', 'o', 'x', '-', 't', 'a', 'p'};
  const std::uint16_t sum = inet_checksum(echo);
  echo[2] = static_cast<std::uint8_t>(sum >> 8);
  echo[3] = static_cast<std::uint8_t>(sum);
  sockaddr_in gw{};
  gw.sin_family = AF_INET;
  gw.sin_addr.s_addr = htonl(config.gateway.v4_value());
  ASSERT_EQ(::sendto(icmp.get(), echo.data(), echo.size(), 0, reinterpret_cast<sockaddr*>(&gw), sizeof(gw)),
            static_cast<ssize_t>(echo.size()))
      << std::strerror(errno);

  auto arp = wait_frame(
      *link, [&](const Frame& f) { return is_arp_request_for(f, config.gateway); }, 3s);
  ASSERT_TRUE(arp) << "no ARP request for the gateway came out of the link";
  EXPECT_TRUE(bytes_at(*arp, 0, kBroadcast));
  EXPECT_TRUE(bytes_at(*arp, 28, ip4(config.guest_address)));
  const Mac guest_mac = mac_at(*arp, 6);
  ASSERT_TRUE(
      link->send(arp_reply(config.gateway_mac, config.gateway, guest_mac, config.guest_address)).ok());

  auto request = wait_frame(
      *link, [&](const Frame& f) { return is_echo_request_to(f, config.gateway); }, 3s);
  ASSERT_TRUE(request) << "the echo request never followed the ARP reply";
  EXPECT_TRUE(bytes_at(*request, 0, config.gateway_mac)) << "the guest did not take our ARP reply";
  ASSERT_TRUE(link->send(echo_reply(*request, config.gateway_mac)).ok());

  bool answered = false;
  const auto deadline = Clock::now() + 3s;
  while (!answered && Clock::now() < deadline) {
    pollfd p{icmp.get(), POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    std::array<std::uint8_t, 1500> in{};
    const ssize_t n = ::recv(icmp.get(), in.data(), in.size(), 0);
    if (n < 28) continue;
    const std::size_t ihl = (in[0] & 0x0F) * 4u;
    answered = static_cast<std::size_t>(n) >= ihl + 8 && in[ihl] == 0 && in[ihl + 4] == 0x42 &&
               in[ihl + 5] == 0x42 &&
               std::equal(in.begin() + 12, in.begin() + 16, ip4(config.gateway).begin());
  }
  EXPECT_TRUE(answered) << "the guest's socket never got the echo reply";
  EXPECT_GE(link->counters().frames_in, 2u);
  EXPECT_EQ(link->counters().frames_out, 2u);
}

// The vnet header's checksum offload, both ways, with the guest's own UDP
// stack: its datagram to the gateway leaves with the checksum partial (the
// link says so), and the answer we send in three pieces with only the
// pseudo-header sum in its checksum field reaches the guest's socket.
TEST_F(TapLinkTest, ChecksumOffloadBothWaysWithTheGuestsUdp) {
  ScopedNetns ns;
  const GuestNetConfig config;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  EXPECT_TRUE(link->tx_checksum_offload());

  base::UniqueFd udp = in_netns(ns.path(), [] {
    base::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(40001);
    if (fd && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return base::UniqueFd();
    return fd;
  });
  ASSERT_TRUE(udp);
  sockaddr_in gw{};
  gw.sin_family = AF_INET;
  gw.sin_port = htons(9999);
  gw.sin_addr.s_addr = htonl(config.gateway.v4_value());
  const std::string hello = "hello, gateway";
  ASSERT_EQ(::sendto(udp.get(), hello.data(), hello.size(), 0, reinterpret_cast<sockaddr*>(&gw), sizeof gw),
            static_cast<ssize_t>(hello.size()));

  auto arp = wait_frame(
      *link, [&](const Frame& f) { return is_arp_request_for(f, config.gateway); }, 3s);
  ASSERT_TRUE(arp);
  const Mac guest_mac = mac_at(*arp, 6);
  ASSERT_TRUE(
      link->send(arp_reply(config.gateway_mac, config.gateway, guest_mac, config.guest_address)).ok());
  auto datagram = wait_frame(
      *link, [](const Frame& f) { return f.size() >= 42 && get16(f, 12) == kEtherIpv4 && f[23] == 17; }, 3s);
  ASSERT_TRUE(datagram) << "the guest's datagram never came out";
  EXPECT_TRUE(link->last_frame_checksum_trusted()) << "the guest's kernel left the checksum to us";

  // The answer: gateway:9999 -> guest:40001, UDP checksum = pseudo-header sum.
  const std::string answer = "hello, guest; this answer comes in three pieces";
  Frame head;
  put_bytes(head, guest_mac);
  put_bytes(head, config.gateway_mac);
  put16(head, kEtherIpv4);
  const auto ip_len = static_cast<std::uint16_t>(20 + 8 + answer.size());
  const std::array<std::uint8_t, 12> ip_start = {0x45,
                                                 0,
                                                 static_cast<std::uint8_t>(ip_len >> 8),
                                                 static_cast<std::uint8_t>(ip_len),
                                                 0,
                                                 1,
                                                 0x40,
                                                 0,
                                                 64,
                                                 17,
                                                 0,
                                                 0};
  put_bytes(head, ip_start);
  put_bytes(head, ip4(config.gateway));
  put_bytes(head, ip4(config.guest_address));
  const std::uint16_t ip_sum = inet_checksum(std::span(head).subspan(14, 20));
  head[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  head[25] = static_cast<std::uint8_t>(ip_sum);
  const auto udp_len = static_cast<std::uint16_t>(8 + answer.size());
  put16(head, 9999);
  put16(head, 40001);
  put16(head, udp_len);
  std::uint32_t pseudo = 0;
  for (std::size_t i = 26; i < 34; i += 2) pseudo += get16(head, i);
  pseudo += 17 + udp_len;
  while (pseudo >> 16) pseudo = (pseudo & 0xFFFF) + (pseudo >> 16);
  put16(head, static_cast<std::uint16_t>(pseudo));
  const auto* text = reinterpret_cast<const std::uint8_t*>(answer.data());
  const std::array<std::span<const std::uint8_t>, 3> pieces = {
      std::span<const std::uint8_t>(head), std::span<const std::uint8_t>(text, 10),
      std::span<const std::uint8_t>(text + 10, answer.size() - 10)};
  OutFrame out{pieces};
  out.checksum_start = 34;
  out.checksum_offset = 6;
  ASSERT_TRUE(link->send_frame(out).ok());
  EXPECT_EQ(link->counters().dropped_send, 0u);

  pollfd p{udp.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "the guest's socket got nothing";
  std::array<char, 256> in{};
  const ssize_t n = ::recv(udp.get(), in.data(), in.size(), 0);
  EXPECT_EQ(std::string(in.data(), static_cast<std::size_t>(std::max<ssize_t>(n, 0))), answer);
}

// TSO from the guest's kernel: with MTU 1500, a TCP/IPv4 segment of 20,000
// bytes handed to eth0 as one GSO packet (a packet socket with a vnet header
// stands in for the guest's TCP) arrives as one frame, checksum trusted.
TEST_F(TapLinkTest, TsoSegmentFromTheGuestArrivesWhole) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  EXPECT_GE(link->max_receive_size(), 65535u);

  base::UniqueFd sender = in_netns(ns.path(), [&] {
    base::UniqueFd s(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
    int on = 1;
    if (!s || ::setsockopt(s.get(), SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0)
      return base::UniqueFd();
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_ALL);
    at.sll_ifindex = static_cast<int>(::if_nametoindex(config.ifname.c_str()));
    if (at.sll_ifindex == 0 || ::bind(s.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
      return base::UniqueFd();
    }
    return s;
  });
  ASSERT_TRUE(sender) << "packet socket with PACKET_VNET_HDR: " << std::strerror(errno);

  constexpr std::size_t kPayload = 20000;
  Frame f;
  put_bytes(f, config.gateway_mac);
  put_bytes(f, Mac{0x02, 0, 0, 0, 0, 0x15});
  put16(f, kEtherIpv4);
  const auto ip_len = static_cast<std::uint16_t>(20 + 20 + kPayload);
  const std::array<std::uint8_t, 12> ip_start = {0x45,
                                                 0,
                                                 static_cast<std::uint8_t>(ip_len >> 8),
                                                 static_cast<std::uint8_t>(ip_len),
                                                 0,
                                                 7,
                                                 0x40,
                                                 0,
                                                 64,
                                                 6,
                                                 0,
                                                 0};
  put_bytes(f, ip_start);
  put_bytes(f, ip4(config.guest_address));
  put_bytes(f, std::array<std::uint8_t, 4>{93, 184, 216, 34});
  const std::uint16_t ip_sum = inet_checksum(std::span(f).subspan(14, 20));
  f[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[25] = static_cast<std::uint8_t>(ip_sum);
  const std::array<std::uint8_t, 20> tcp = {0x9c, 0x40, 0,    80,   0,    0,    0, 1, 0, 0,
                                            0,    1,    0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0};
  put_bytes(f, tcp);
  while (f.size() < 14 + ip_len) f.push_back(static_cast<std::uint8_t>(f.size()));
  struct {                      // struct virtio_net_hdr, as the packet socket takes it
    std::uint8_t flags = 1;     // NEEDS_CSUM
    std::uint8_t gso_type = 1;  // TCPV4
    std::uint16_t hdr_len = 54;
    std::uint16_t gso_size = 1448;
    std::uint16_t csum_start = 34;
    std::uint16_t csum_offset = 16;
  } vnet;
  static_assert(sizeof vnet == 10);
  std::array<iovec, 2> iov = {{{&vnet, sizeof vnet}, {f.data(), f.size()}}};
  ASSERT_EQ(::writev(sender.get(), iov.data(), 2), static_cast<ssize_t>(sizeof vnet + f.size()))
      << std::strerror(errno);

  Frame buf(link->max_receive_size());
  std::optional<std::size_t> got;
  const auto deadline = Clock::now() + 3s;
  while (!got && Clock::now() < deadline) {
    pollfd p{link->fd(), POLLIN, 0};
    ::poll(&p, 1, 200);
    for (;;) {
      auto r = link->receive(buf);
      ASSERT_TRUE(r.ok());
      if (*r == 0) break;
      if (*r > 14 + 20 && get16(buf, 12) == kEtherIpv4 && buf[23] == 6) {
        got = *r;
        break;
      }
    }
  }
  ASSERT_TRUE(got) << "the TSO segment never came out (dropped_oversize " << link->counters().dropped_oversize
                   << ")";
  EXPECT_EQ(*got, f.size()) << "one frame, not segmented";
  EXPECT_TRUE(std::equal(f.begin() + 54, f.end(), buf.begin() + 54)) << "the payload arrives as sent";
  EXPECT_TRUE(link->last_frame_checksum_trusted());
}

// GSO to the guest: a 20,000-byte TCP frame sent with gso_size reaches the
// guest's eth0 as one packet that its kernel knows to be TCPv4 segments of
// gso_size bytes (a packet socket with a vnet header reads it as such).
TEST_F(TapLinkTest, GsoFrameToTheGuestArrivesAsOneTcpPacket) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  ASSERT_TRUE(link->tx_tso());
  base::UniqueFd watcher = in_netns(ns.path(), [&] {
    base::UniqueFd s(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP)));
    int on = 1;
    if (!s || ::setsockopt(s.get(), SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0)
      return base::UniqueFd();
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_IP);
    at.sll_ifindex = static_cast<int>(::if_nametoindex(config.ifname.c_str()));
    if (at.sll_ifindex == 0 || ::bind(s.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
      return base::UniqueFd();
    }
    return s;
  });
  ASSERT_TRUE(watcher);

  constexpr std::size_t kPayload = 20000;
  Frame f;
  put_bytes(f, Mac{0x02, 0, 0, 0, 0, 0x15});  // the guest's MAC does not matter to a packet socket
  put_bytes(f, config.gateway_mac);
  put16(f, kEtherIpv4);
  const auto ip_len = static_cast<std::uint16_t>(20 + 20 + kPayload);
  const std::array<std::uint8_t, 12> ip_start = {0x45,
                                                 0,
                                                 static_cast<std::uint8_t>(ip_len >> 8),
                                                 static_cast<std::uint8_t>(ip_len),
                                                 0,
                                                 9,
                                                 0x40,
                                                 0,
                                                 64,
                                                 6,
                                                 0,
                                                 0};
  put_bytes(f, ip_start);
  put_bytes(f, std::array<std::uint8_t, 4>{93, 184, 216, 34});
  put_bytes(f, ip4(config.guest_address));
  const std::uint16_t ip_sum = inet_checksum(std::span(f).subspan(14, 20));
  f[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  f[25] = static_cast<std::uint8_t>(ip_sum);
  const std::array<std::uint8_t, 20> tcp = {0, 80, 0x9c, 0x40, 0,    0,    0, 1, 0, 0,
                                            0, 1,  0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0};
  put_bytes(f, tcp);
  while (f.size() < 14 + ip_len) f.push_back(static_cast<std::uint8_t>(f.size()));
  const std::array<std::span<const std::uint8_t>, 2> pieces = {std::span<const std::uint8_t>(f).first(54),
                                                               std::span<const std::uint8_t>(f).subspan(54)};
  OutFrame out{pieces};
  out.checksum_start = 34;
  out.checksum_offset = 16;
  out.gso_size = 1460;
  out.gso_header_size = 54;
  ASSERT_TRUE(link->send_frame(out).ok());
  EXPECT_EQ(link->counters().dropped_send, 0u);
  EXPECT_EQ(link->counters().dropped_oversize, 0u);

  struct {
    std::uint8_t flags, gso_type;
    std::uint16_t hdr_len, gso_size, csum_start, csum_offset;
  } vnet{};
  Frame in(70000);
  bool seen = false;
  const auto deadline = Clock::now() + 3s;
  while (!seen && Clock::now() < deadline) {
    pollfd p{watcher.get(), POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    std::array<iovec, 2> iov = {{{&vnet, sizeof vnet}, {in.data(), in.size()}}};
    const ssize_t n = ::readv(watcher.get(), iov.data(), 2);
    seen = n == static_cast<ssize_t>(sizeof vnet + f.size()) && in[23] == 6;
  }
  ASSERT_TRUE(seen) << "the guest's eth0 never got the GSO packet whole";
  EXPECT_EQ(vnet.gso_type & 0x7F, 1) << "TCPv4 GSO";
  EXPECT_EQ(vnet.gso_size, 1460);
  EXPECT_TRUE(std::equal(f.begin() + 54, f.end(), in.begin() + 54));
}

TEST_F(TapLinkTest, ShortBufferDropsTheFrameInsteadOfTruncating) {
  auto ns = std::make_unique<ScopedNetns>();
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(*ns, config);
  ASSERT_TRUE(link);
  TapPeer peer(std::move(ns), "eth0", config.mtu);
  peer.inject(test_frame(500, 1));
  peer.inject(test_frame(80, 2));
  Frame small(100);
  std::optional<std::size_t> got;
  const auto deadline = Clock::now() + 2s;
  while (!got && Clock::now() < deadline) {
    pollfd p{link->fd(), POLLIN, 0};
    ::poll(&p, 1, 200);
    auto r = link->receive(small);
    ASSERT_TRUE(r.ok());
    if (*r > 0) got = *r;
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, 80u);
  EXPECT_EQ(get16(small, 14), 2);
  EXPECT_EQ(link->counters().dropped_oversize, 1u);
}

TEST_F(TapLinkTest, RuntSendIsDroppedAndCounted) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  const Frame runt(10, 0xff);
  EXPECT_TRUE(link->send(runt).ok());
  EXPECT_EQ(link->counters().dropped_send, 1u);
  EXPECT_EQ(link->counters().frames_out, 0u);
}

TEST_F(TapLinkTest, MissingNamespaceIsAClearError) {
  const std::string name = "abox-tap-test-" + std::to_string(::getpid()) + "-missing";
  auto link = TapLink::create_in_netns(name, GuestNetConfig{});
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(),
            "cannot enter network namespace /run/netns/" + name + ": No such file or directory");
}

TEST_F(TapLinkTest, ExistingInterfaceNameIsRefused) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.ifname = "lo";
  auto link = TapLink::create_in_netns(ns.name(), config);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(), "an interface named lo already exists in " + ns.path());
}

TEST_F(TapLinkTest, AFailedStepIsNamedWithItsErrnoAndLeavesNoTap) {
  ScopedNetns ns;
  // Someone already put a default route in the namespace.
  ASSERT_EQ(ns.ip("link add d0 type veth peer name d1").status, 0);
  ASSERT_EQ(ns.ip("link set d0 up").status, 0);
  ASSERT_EQ(ns.ip("route add default dev d0").status, 0);
  const NsId before = ns_id("/proc/thread-self/ns/net");
  auto link = TapLink::create_in_netns(ns.name(), GuestNetConfig{});
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(), "cannot add default route via 10.0.2.2 in " + ns.path() + ": File exists");
  EXPECT_NE(ns.ip("link show eth0").status, 0) << "the half-configured tap was left behind";
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
}

TEST_F(TapLinkTest, TheCallersNamespaceIsRestored) {
  const NsId before = ns_id("/proc/thread-self/ns/net");
  ScopedNetns ns;
  {
    auto link = create(ns);
    ASSERT_TRUE(link);
    EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
  }
  GuestNetConfig taken;
  taken.ifname = "lo";  // fails inside the namespace
  EXPECT_FALSE(TapLink::create_in_netns(ns.name(), taken).ok());
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
  ASSERT_TRUE(create(ns));  // eth0 is free again: the first link was destroyed
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
}

// A process that sits in a namespace until destroyed: for /proc/PID/ns/net.
class ProcessInNetns {
 public:
  explicit ProcessInNetns(const std::string& path) {
    int ready[2];
    int hold[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(hold[1]);
      const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) ::_exit(1);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      while (::read(hold[0], &c, 1) > 0) {
      }  // until the parent closes its end
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_.reset(hold[1]);
    char c = 0;
    ready_ = pid_ > 0 && ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
  }
  ~ProcessInNetns() { stop(); }
  ProcessInNetns(const ProcessInNetns&) = delete;
  ProcessInNetns& operator=(const ProcessInNetns&) = delete;
  ProcessInNetns(ProcessInNetns&&) = delete;
  ProcessInNetns& operator=(ProcessInNetns&&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  void stop() {
    hold_.reset();
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  base::UniqueFd hold_;
  bool ready_ = false;
};

TEST_F(TapLinkTest, ProcPidPathWorksAndItsExitEndsTheNamespace) {
  ScopedNetns ns;
  ProcessInNetns process(ns.path());
  ASSERT_TRUE(process.ready());
  const std::string path = "/proc/" + std::to_string(process.pid()) + "/ns/net";
  auto link = TapLink::create_in_netns(path, GuestNetConfig{});
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ((*link)->netns_path(), path);
  expect_configured(ns, 65520);
  EXPECT_TRUE((*link)->netns_alive());
  process.stop();
  EXPECT_FALSE((*link)->netns_alive());
}

TEST_F(TapLinkTest, NetnsAliveFollowsTheNamedNamespace) {
  auto ns = std::make_unique<ScopedNetns>();
  const std::string name = ns->name();
  auto link = create(*ns);
  ASSERT_TRUE(link);
  EXPECT_TRUE(link->netns_alive());
  ns->remove();
  EXPECT_FALSE(link->netns_alive());
  // The tap itself goes on working: the kernel keeps the namespace while the
  // tap is open. That is why netns_alive() exists.
  Frame buf(link->max_frame_size());
  EXPECT_TRUE(link->receive(buf).ok());
  // A new namespace under the same name is not ours.
  ASSERT_EQ(run("ip netns add " + name).status, 0);
  EXPECT_FALSE(link->netns_alive());
  run("ip netns del " + name);
}

TEST_F(TapLinkTest, FromFdWrapsAnOpenTap) {
  ScopedNetns ns;
  base::UniqueFd tap = open_tap_in(ns.path(), "abox0", IFF_TAP | IFF_NO_PI);
  ASSERT_TRUE(tap);
  EXPECT_FALSE(::fcntl(tap.get(), F_GETFL) & O_NONBLOCK);
  const int raw = tap.get();
  auto link = TapLink::from_fd(std::move(tap), 1500);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ((*link)->fd(), raw);
  EXPECT_TRUE(::fcntl(raw, F_GETFL) & O_NONBLOCK);
  EXPECT_EQ((*link)->ifname(), "abox0");
  EXPECT_EQ((*link)->mtu(), 1500u);
  EXPECT_TRUE((*link)->netns_path().empty());
  EXPECT_TRUE((*link)->netns_alive());
  Frame buf((*link)->max_frame_size());
  auto r = (*link)->receive(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);  // non-blocking: nothing there, no hang
}

TEST_F(TapLinkTest, FromFdRefusesWhatIsNotAPlainTap) {
  base::UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  const std::string null_name = "tap fd " + std::to_string(null.get());
  auto not_tap = TapLink::from_fd(std::move(null), 1500);
  ASSERT_FALSE(not_tap.ok());
  EXPECT_EQ(not_tap.error(),
            null_name + " is not an attached tap device (TUNGETIFF): Inappropriate ioctl for device");

  base::UniqueFd detached(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(detached);
  auto not_attached = TapLink::from_fd(std::move(detached), 1500);
  ASSERT_FALSE(not_attached.ok());
  EXPECT_NE(not_attached.error().find("is not an attached tap device"), std::string::npos)
      << not_attached.error();

  ScopedNetns ns;
  base::UniqueFd tun = open_tap_in(ns.path(), "tun0", IFF_TUN | IFF_NO_PI);
  ASSERT_TRUE(tun);
  auto is_tun = TapLink::from_fd(std::move(tun), 1500);
  ASSERT_FALSE(is_tun.ok());
  EXPECT_NE(is_tun.error().find("is a tun device"), std::string::npos) << is_tun.error();

  // (A tap opened without IFF_NO_PI cannot be told apart: TUNGETIFF sets
  // IFF_NOFILTER, the same bit, when no filter is attached.)

  base::UniqueFd with_vnet = open_tap_in(ns.path(), "tap2", IFF_TAP | IFF_NO_PI | IFF_VNET_HDR);
  ASSERT_TRUE(with_vnet);
  auto vnet = TapLink::from_fd(std::move(with_vnet), 1500);
  ASSERT_FALSE(vnet.ok());
  EXPECT_NE(vnet.error().find("IFF_VNET_HDR"), std::string::npos) << vnet.error();

  EXPECT_FALSE(TapLink::from_fd(base::UniqueFd(), 1500).ok());
}

// Checked before anything touches a namespace, so no root needed.
TEST(TapLinkConfigTest, BadGuestNetworksAreRefusedClearly) {
  struct Case {
    std::function<void(GuestNetConfig&)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](GuestNetConfig& c) { c.gateway = *policy::IpAddress::parse("10.0.3.2"); },
       "bad guest network: gateway 10.0.3.2 is not inside 10.0.2.15/24"},
      {[](GuestNetConfig& c) { c.gateway = c.guest_address; },
       "bad guest network: gateway 10.0.2.15 is the guest's own address"},
      {[](GuestNetConfig& c) { c.prefix_len = 33; },
       "bad guest network: prefix length of 10.0.2.15/33 must be 1..32"},
      {[](GuestNetConfig& c) { c.mtu = 65522; }, "bad guest network: MTU 65522 is outside 68..65521"},
      {[](GuestNetConfig& c) { c.mtu = 67; }, "bad guest network: MTU 67 is outside 68..65521"},
      {[](GuestNetConfig& c) { c.ifname = "a-very-long-name"; },
       "bad guest network: interface name 'a-very-long-name' must be 1 to 15 characters"},
      {[](GuestNetConfig& c) { c.ifname = "eth/0"; },
       "bad guest network: interface name 'eth/0' may not contain '/', ':', '%' or blanks"},
      {[](GuestNetConfig& c) { c.gateway = *policy::IpAddress::parse("fd00::2"); },
       "bad guest network: guest address 10.0.2.15 and gateway fd00::2 are of different address families"},
  };
  for (const Case& c : cases) {
    GuestNetConfig config;
    c.change(config);
    auto link = TapLink::create_in_netns("never-opened", config);
    ASSERT_FALSE(link.ok());
    EXPECT_EQ(link.error(), c.error);
  }
}

TEST(TapLinkConfigTest, PathsThatAreNotNetworkNamespacesAreRefused) {
  auto file = TapLink::create_in_netns("/dev/null", GuestNetConfig{});
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error(), "cannot enter network namespace /dev/null: not a namespace file");
  auto uts = TapLink::create_in_netns("/proc/self/ns/uts", GuestNetConfig{});
  ASSERT_FALSE(uts.ok());
  EXPECT_EQ(uts.error(), "cannot enter network namespace /proc/self/ns/uts: not a network namespace");
  auto empty = TapLink::create_in_netns("", GuestNetConfig{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error(), "network namespace name is empty");
}

}  // namespace
}  // namespace abox::netstack
