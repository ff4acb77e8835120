// TapLink (see tap_link.h for how it works). Three parts: entering the
// guest's namespace and coming back, configuring the tap over rtnetlink
// (rtnetlink.h), and the frame path.
#include "netstack/link/tap_link.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "netstack/link/rtnetlink.h"

namespace abox::netstack {
namespace {

using base::Err;
using VoidOrError = base::Result<void, std::string>;

// The tap's flags: every frame either way starts with a virtio_net_hdr
// (TUNSETVNETHDRSZ right after TUNSETIFF), which has its own iovec in
// receive() and send_frame(). TUN_F_CSUM (TUNSETOFFLOAD) lets the guest's
// kernel hand us TCP/UDP with the checksum left partial (NEEDS_CSUM), and
// lets us do the same the other way (LWIP.md: checksums were half of lwIP's
// CPU time at MTU 65520). TUN_F_TSO4 and TUN_F_TSO6 let it hand us one
// large TCP segment, over IPv4 or IPv6, where it would send many MTU-sized
// ones (a guest with MTU 1500 then moves 64 KiB per frame, as one with MTU
// 65520 does). The kernel's TCP
// keeps such a segment under 65536 - MAX_TCP_HEADER bytes with the default
// gso_max_size, so it fits lwIP's u16 pbuf with its Ethernet header; a
// larger one is dropped as oversize, never truncated.
constexpr int kTapFlags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;

// struct virtio_net_hdr of <linux/virtio_net.h> (which C++ cannot include:
// it has a member named `class`), in the host's byte order as the tap uses it.
struct VnetHeader {
  std::uint8_t flags;
  std::uint8_t gso_type;
  std::uint16_t hdr_len;
  std::uint16_t gso_size;
  std::uint16_t csum_start;
  std::uint16_t csum_offset;
};
static_assert(sizeof(VnetHeader) == 10);
constexpr std::uint8_t kVnetNeedsCsum = 1;  // kVnetNeedsCsum
constexpr std::uint8_t kVnetDataValid = 2;  // kVnetDataValid
constexpr std::uint8_t kVnetGsoNone = 0;    // kVnetGsoNone
constexpr int kVnetHeaderSize = sizeof(VnetHeader);
constexpr unsigned kTapOffloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
constexpr std::uint8_t kVnetGsoTcpv4 = 1;   // VIRTIO_NET_HDR_GSO_TCPV4
constexpr std::uint8_t kVnetGsoTcpv6 = 4;   // VIRTIO_NET_HDR_GSO_TCPV6
constexpr std::uint8_t kVnetGsoEcn = 0x80;  // VIRTIO_NET_HDR_GSO_ECN: a flag on the type
// The largest frame lwIP can hold (u16 pbuf lengths): the limit of a TSO frame.
constexpr std::size_t kMaxTsoFrame = 0xFFFF;
// More pieces than this are gathered into one buffer first.
constexpr std::size_t kMaxSendPieces = 15;

// The tap's own MTU limits (the kernel's MIN_MTU, and MAX_MTU less the
// Ethernet header). 65521 + 14 is also the largest frame lwIP can hold.
constexpr std::size_t kMinMtu = 68;
constexpr std::size_t kMinMtuIpv6 = 1280;
constexpr std::size_t kMaxMtu = 65521;

std::string errno_text(int err) {
  return std::strerror(err);
}

// ---------------------------------------------------------------------------
// Validation of what we were given.

VoidOrError validate_mtu(std::size_t mtu, bool ipv6) {
  const std::size_t min = ipv6 ? kMinMtuIpv6 : kMinMtu;
  if (mtu < min || mtu > kMaxMtu) {
    return Err{"MTU " + std::to_string(mtu) + " is outside " + std::to_string(min) + ".." +
               std::to_string(kMaxMtu)};
  }
  return {};
}

// The kernel's dev_valid_name(), so that a bad name fails here and clearly.
VoidOrError validate_ifname(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return Err{"interface name '" + name + "' must be 1 to " + std::to_string(IFNAMSIZ - 1) + " characters"};
  }
  if (name == "." || name == "..") return Err{"interface name '" + name + "' is not allowed"};
  for (const char c : name) {
    if (c == '/' || c == ':' || c == '%' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
        c == '\f' || c == '\0') {
      return Err{"interface name '" + name + "' may not contain '/', ':', '%' or blanks"};
    }
  }
  return {};
}

bool same_prefix(const policy::IpAddress& a, const policy::IpAddress& b, unsigned prefix) {
  const auto& x = a.bytes();
  const auto& y = b.bytes();
  const unsigned whole = prefix / 8;
  for (unsigned i = 0; i < whole; ++i) {
    if (x[i] != y[i]) return false;
  }
  const unsigned rest = prefix % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xFF << (8 - rest));
  return (x[whole] & mask) == (y[whole] & mask);
}

VoidOrError validate(const GuestNetConfig& c) {
  if (c.guest_address.family() != c.gateway.family()) {
    return Err{"guest address " + c.guest_address.to_string() + " and gateway " + c.gateway.to_string() +
               " are of different address families"};
  }
  const unsigned max_prefix = c.guest_address.is_v4() ? 32 : 128;
  const std::string guest = c.guest_address.to_string() + "/" + std::to_string(c.prefix_len);
  if (c.prefix_len == 0 || c.prefix_len > max_prefix) {
    return Err{"prefix length of " + guest + " must be 1.." + std::to_string(max_prefix)};
  }
  if (c.gateway == c.guest_address)
    return Err{"gateway " + c.gateway.to_string() + " is the guest's own address"};
  if (!same_prefix(c.guest_address, c.gateway, c.prefix_len)) {
    return Err{"gateway " + c.gateway.to_string() + " is not inside " + guest};
  }
  if (auto r = validate_mtu(c.mtu, c.guest_address.is_v6()); !r) return r;
  return validate_ifname(c.ifname);
}

// A name under /run/netns, or a path as given.
base::Result<std::string, std::string> resolve_netns(std::string_view netns) {
  if (netns.empty()) return Err{std::string("network namespace name is empty")};
  if (netns.find('/') != std::string_view::npos) return std::string(netns);
  if (netns == "." || netns == "..")
    return Err{"network namespace name '" + std::string(netns) + "' is not allowed"};
  return "/run/netns/" + std::string(netns);
}

// ---------------------------------------------------------------------------
// Entering the namespace.

// Moves the calling thread into a network namespace and back when destroyed.
// Coming back cannot fail in practice (we hold an fd of the original); if it
// did, abox-net would go on inside the guest's namespace, so that aborts.
class NetnsSwitch {
 public:
  NetnsSwitch() = default;
  NetnsSwitch(const NetnsSwitch&) = delete;
  NetnsSwitch& operator=(const NetnsSwitch&) = delete;
  NetnsSwitch(NetnsSwitch&&) = delete;
  NetnsSwitch& operator=(NetnsSwitch&&) = delete;
  ~NetnsSwitch() {
    if (!original_) return;
    if (::setns(original_.get(), CLONE_NEWNET) != 0) {
      (void)std::fprintf(stderr, "abox-net: cannot return to the original network namespace: %s\n",
                         std::strerror(errno));
      std::abort();
    }
  }

  VoidOrError enter(int target, const std::string& path) {
    base::UniqueFd original(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!original) {
      return Err{"cannot open this thread's network namespace /proc/thread-self/ns/net: " +
                 errno_text(errno)};
    }
    if (::setns(target, CLONE_NEWNET) != 0) {
      return Err{"cannot enter network namespace " + path + ": " + errno_text(errno)};
    }
    original_ = std::move(original);
    return {};
  }

 private:
  base::UniqueFd original_;
};

// ---------------------------------------------------------------------------
// rtnetlink (rtnetlink.h). The socket is opened inside the guest's namespace
// and then used from our own.

std::string failed(const std::string& what, int err) {
  return what + ": " + errno_text(err);
}

// MTU, MAC, lo and the tap up, address, default route: in this order,
// because the kernel accepts a route via the gateway only once the
// address's subnet route exists, which needs the tap up.
VoidOrError configure(rtnl::RouteSocket& rs, const std::string& ifname, const GuestNetConfig& c,
                      const std::string& where) {
  const std::string on = " on " + ifname + " in " + where;
  auto tap = rs.link_index(ifname);
  if (!tap) return Err{failed("cannot look up interface " + ifname + " in " + where, tap.error())};
  if (!*tap) return Err{"interface " + ifname + " vanished from " + where + " right after it was created"};
  const int ifindex = **tap;

  if (auto r = rs.set_link(ifindex, static_cast<std::uint32_t>(c.mtu), std::nullopt, false); !r) {
    return Err{failed("cannot set MTU " + std::to_string(c.mtu) + on, r.error())};
  }
  if (c.guest_mac) {
    if (auto r = rs.set_link(ifindex, std::nullopt, *c.guest_mac, false); !r) {
      return Err{failed("cannot set the MAC address" + on, r.error())};
    }
  }

  auto lo = rs.link_index("lo");
  if (!lo) return Err{failed("cannot look up interface lo in " + where, lo.error())};
  if (*lo) {
    if (auto r = rs.set_link(**lo, std::nullopt, std::nullopt, true); !r) {
      return Err{failed("cannot bring up lo in " + where, r.error())};
    }
  }
  if (auto r = rs.set_link(ifindex, std::nullopt, std::nullopt, true); !r) {
    return Err{failed("cannot bring up " + ifname + " in " + where, r.error())};
  }

  {
    const std::string what = "cannot add address " + c.guest_address.to_string() + "/" +
                             std::to_string(c.prefix_len) + " to " + ifname + " in " + where;
    std::optional<policy::IpAddress> brd;
    if (c.guest_address.is_v4() && c.prefix_len < 31) {
      // The subnet's broadcast address, as `ip addr add ... brd +` and DHCP
      // clients set it.
      const std::uint32_t host_bits = 0xFFFF'FFFFU >> c.prefix_len;
      brd = policy::IpAddress::v4(c.guest_address.v4_value() | host_bits);
    }
    if (auto r = rs.add_address(ifindex, c.guest_address, c.prefix_len, brd); !r) {
      return Err{failed(what, r.error())};
    }
  }

  if (auto r = rs.add_default_route(ifindex, c.gateway); !r) {
    return Err{failed("cannot add default route via " + c.gateway.to_string() + " in " + where, r.error())};
  }
  return {};
}

// The process a /proc/PID/ns/net path names, as a pidfd (PID reuse cannot
// fool a pidfd); an empty fd for any other path. Taken after the namespace
// was opened, then the path is checked again: if it still names the same
// namespace, the pidfd is the process that owns it.
base::UniqueFd owner_pidfd(const std::string& path, const struct stat& ns_stat) {
  constexpr std::string_view kProc = "/proc/";
  constexpr std::string_view kNsNet = "/ns/net";
  if (!path.starts_with(kProc) || !path.ends_with(kNsNet)) return {};
  const std::string_view digits =
      std::string_view(path).substr(kProc.size(), path.size() - kProc.size() - kNsNet.size());
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return {};
  }
  int pid = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), pid).ec != std::errc{}) return {};
  base::UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  struct stat again {};
  if (!fd || ::stat(path.c_str(), &again) != 0 || again.st_dev != ns_stat.st_dev ||
      again.st_ino != ns_stat.st_ino) {
    return {};
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------
// Creation.

TapLink::TapLink(base::UniqueFd fd, std::size_t mtu, std::string ifname)
    : fd_(std::move(fd)), mtu_(mtu), ifname_(std::move(ifname)) {}

base::Result<std::unique_ptr<TapLink>, std::string> TapLink::create_in_netns(std::string_view netns,
                                                                             const GuestNetConfig& config) {
  if (auto r = validate(config); !r) return Err{"bad guest network: " + r.error()};
  auto resolved = resolve_netns(netns);
  if (!resolved) return Err{std::move(resolved).error()};
  const std::string path = std::move(resolved).value();

  // Open the namespace and make sure it is one: a wrong path should say so,
  // not fail later as "Invalid argument" from setns().
  base::UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return Err{"cannot enter network namespace " + path + ": " + errno_text(errno)};
  const int ns_type = ::ioctl(ns.get(), NS_GET_NSTYPE);
  if (ns_type < 0) return Err{"cannot enter network namespace " + path + ": not a namespace file"};
  if (ns_type != CLONE_NEWNET)
    return Err{"cannot enter network namespace " + path + ": not a network namespace"};
  struct stat ns_stat {};
  if (::fstat(ns.get(), &ns_stat) != 0) return Err{"cannot stat " + path + ": " + errno_text(errno)};

  std::optional<rtnl::RouteSocket> rs;
  base::UniqueFd tap;
  std::string ifname;
  {
    NetnsSwitch inside;
    if (auto r = inside.enter(ns.get(), path); !r) return Err{r.error()};
    auto opened = rtnl::RouteSocket::open();
    if (!opened) return Err{failed("cannot open an rtnetlink socket in " + path, opened.error())};
    rs.emplace(std::move(opened).value());
    auto existing = rs->link_index(config.ifname);
    if (!existing)
      return Err{failed("cannot look up interface " + config.ifname + " in " + path, existing.error())};
    if (*existing) return Err{"an interface named " + config.ifname + " already exists in " + path};

    tap.reset(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!tap) return Err{"cannot open /dev/net/tun: " + errno_text(errno)};
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, config.ifname.data(), config.ifname.size());  // validated: < IFNAMSIZ
    ifr.ifr_flags = static_cast<short>(kTapFlags);
    if (::ioctl(tap.get(), TUNSETIFF, &ifr) != 0) {
      return Err{"cannot create tap " + config.ifname + " in " + path + " (TUNSETIFF): " + errno_text(errno)};
    }
    int header_size = kVnetHeaderSize;
    if (::ioctl(tap.get(), TUNSETVNETHDRSZ, &header_size) != 0) {
      return Err{"cannot set the vnet header size of tap " + config.ifname +
                 " (TUNSETVNETHDRSZ): " + errno_text(errno)};
    }
    if (::ioctl(tap.get(), TUNSETOFFLOAD, kTapOffloads) != 0) {
      return Err{"cannot set checksum offload on tap " + config.ifname +
                 " (TUNSETOFFLOAD): " + errno_text(errno)};
    }
    ifname.assign(ifr.ifr_name, strnlen(ifr.ifr_name, IFNAMSIZ));
  }  // back in our own namespace; the tap and the rtnetlink socket stay in the guest's

  if (auto r = configure(*rs, ifname, config, path); !r) return Err{r.error()};

  std::unique_ptr<TapLink> link(new TapLink(std::move(tap), config.mtu, std::move(ifname)));
  link->vnet_ = true;
  link->netns_path_ = path;
  link->netns_dev_ = ns_stat.st_dev;
  link->netns_ino_ = ns_stat.st_ino;
  link->netns_owner_ = owner_pidfd(path, ns_stat);
  return link;
}

base::Result<std::unique_ptr<TapLink>, std::string> TapLink::from_fd(base::UniqueFd&& fd_in,
                                                                     std::size_t mtu) {
  base::UniqueFd fd = std::move(fd_in);
  const std::string name = "tap fd " + std::to_string(fd.get());
  if (!fd) return Err{std::string("tap fd is not open")};
  if (auto r = validate_mtu(mtu, false); !r) return Err{name + ": " + r.error()};

  ifreq ifr{};
  if (::ioctl(fd.get(), TUNGETIFF, &ifr) != 0) {
    return Err{name + " is not an attached tap device (TUNGETIFF): " + errno_text(errno)};
  }
  const int flags = ifr.ifr_flags;
  if ((flags & IFF_TAP) == 0) return Err{name + " is a tun device (IP packets), not a tap (Ethernet frames)"};
  // TUNGETIFF reports IFF_NOFILTER, the same bit as IFF_NO_PI, whenever no
  // socket filter is attached: a tap with packet information then looks
  // like one without. This catches it only when a filter is attached.
  if ((flags & IFF_NO_PI) == 0) return Err{name + " carries packet information; open it with IFF_NO_PI"};
  if ((flags & IFF_VNET_HDR) != 0)
    return Err{name + " has a vnet header (IFF_VNET_HDR), which is not supported yet"};

  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl | O_NONBLOCK) != 0) {
    return Err{"cannot make " + name + " non-blocking: " + errno_text(errno)};
  }
  std::string ifname(ifr.ifr_name, strnlen(ifr.ifr_name, IFNAMSIZ));
  return std::unique_ptr<TapLink>(new TapLink(std::move(fd), mtu, std::move(ifname)));
}

std::size_t TapLink::max_receive_size() const {
  return vnet_ ? std::max(kMaxTsoFrame, max_frame_size()) : max_frame_size();
}

bool TapLink::netns_alive() const {
  if (netns_path_.empty()) return true;
  // A /proc/PID path: signal 0 through the pidfd says whether that very
  // process still runs (ESRCH once it has exited, even if its PID was
  // reused since); EPERM means it runs but is not ours to signal.
  if (netns_owner_ && ::syscall(SYS_pidfd_send_signal, netns_owner_.get(), 0, nullptr, 0) != 0 &&
      errno == ESRCH) {
    return false;
  }
  struct stat st {};
  if (::stat(netns_path_.c_str(), &st) != 0) {
    // EACCES: the path is there (another user's /proc/PID, or any once
    // abox-net has dropped its capabilities), just not ours to look into;
    // the pidfd above answered for such a process. Anything else (ENOENT,
    // ESRCH) means it is gone.
    return errno == EACCES;
  }
  return st.st_dev == netns_dev_ && st.st_ino == netns_ino_;
}

// ---------------------------------------------------------------------------
// The frame path.

// Checks only lengths: the frame's bytes are the netstack's to parse.
// With a vnet header the kernel's header comes first, in its own iovec; only
// its flags and gso_type are read. A TSO frame (TCPV4 or TCPV6) may be
// larger than the MTU allows, up to max_receive_size(); any other GSO type
// (UDP, ECN-less kinds we never offered) is dropped as oversize, as is a
// plain frame over the MTU.
base::Result<std::size_t, int> TapLink::receive(std::span<std::uint8_t> buf) {
  const std::size_t room = std::min(buf.size(), max_receive_size());
  VnetHeader header{};
  // A read that reaches the spill was too long (see spill_).
  std::array<iovec, 3> iov = {{{&header, sizeof header}, {buf.data(), room}, {spill_.get(), kSpillBytes}}};
  iovec* first = vnet_ ? &iov[0] : &iov[1];
  const int count = vnet_ ? 3 : 2;
  last_checksum_trusted_ = false;
  oversize_head_.reset();
  for (;;) {
    const ssize_t n = ::readv(fd_.get(), first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return std::size_t{0};
      return Err{errno};  // EBADFD: the tap device is gone
    }
    if (std::size_t len = accept_read(static_cast<std::size_t>(n), buf.data(), room,
                                      reinterpret_cast<std::uint8_t*>(&header));
        len != 0 || oversize_head_)
      return len;  // a frame, or the head of one over the MTU: the caller's turn
  }
}

std::span<const iovec> TapLink::ring_receive_iovecs(std::span<std::uint8_t> buf) {
  ring_room_ = std::min(buf.size(), max_receive_size());
  ring_frame_ = buf.data();
  ring_iov_ = {
      {{ring_vnet_.data(), ring_vnet_.size()}, {buf.data(), ring_room_}, {spill_.get(), kSpillBytes}}};
  return vnet_ ? std::span<const iovec>(ring_iov_) : std::span<const iovec>(ring_iov_).subspan(1);
}

base::Result<std::size_t, int> TapLink::finish_ring_receive(int res) {
  last_checksum_trusted_ = false;
  oversize_head_.reset();
  if (res < 0) {
    if (res == -EAGAIN || res == -EINTR) return std::size_t{0};  // nothing read: read again
    return Err{-res};
  }
  return accept_read(static_cast<std::size_t>(res), ring_frame_, ring_room_, ring_vnet_.data());
}

// The tap driver copies what fits and returns what it copied: the spill
// (kSpillBytes, more than any frame's rest) takes the rest of an oversize
// frame, so n is its real length, and its head is in `frame` already.
std::size_t TapLink::accept_read(std::size_t n, const std::uint8_t* frame, std::size_t room,
                                 const std::uint8_t* vnet_header) {
  const std::size_t header_size = vnet_ ? sizeof(VnetHeader) : 0;
  if (n < header_size + kEthernetHeader) {
    ++dropped_runt_;
    return 0;
  }
  VnetHeader header{};
  if (vnet_) std::memcpy(&header, vnet_header, sizeof header);
  const std::size_t len = n - header_size;
  const std::uint8_t gso = vnet_ ? static_cast<std::uint8_t>(header.gso_type & ~kVnetGsoEcn) : kVnetGsoNone;
  const bool tso = gso == kVnetGsoTcpv4 || gso == kVnetGsoTcpv6;
  const std::size_t limit = tso ? room : std::min(room, max_frame_size());
  if (len > limit || (gso != kVnetGsoNone && !tso)) {
    ++counters_.dropped_oversize;
    // A frame the guest's kernel sent whole (not a GSO packet) over the MTU:
    // its head, for the guest's path MTU (link.h).
    if (gso == kVnetGsoNone) oversize_head_ = OversizeHead{{frame, std::min(len, room)}, len};
    return 0;
  }
  ++counters_.frames_in;
  counters_.bytes_in += len;
  last_checksum_trusted_ = vnet_ && (header.flags & (kVnetNeedsCsum | kVnetDataValid)) != 0;
  return len;
}

base::Result<void, int> TapLink::send(std::span<const std::uint8_t> frame) {
  const std::array<std::span<const std::uint8_t>, 1> one = {frame};
  return send_frame(OutFrame{one});
}

bool TapLink::prepare_send(const OutFrame& frame, std::uint8_t* vnet_header) {
  const std::size_t size = frame.size();
  const bool gso = vnet_ && frame.gso_size != 0;
  if (size > (gso ? kMaxTsoFrame : max_frame_size())) {
    ++counters_.dropped_oversize;
    return false;
  }
  if (gso && (frame.checksum_offset == 0 || frame.gso_header_size >= size)) {
    ++counters_.dropped_send;  // GSO needs the checksum left partial, and a payload
    return false;
  }
  if (size < kEthernetHeader) {
    ++counters_.dropped_send;
    return false;
  }
  VnetHeader header{};
  if (frame.checksum_offset != 0) {
    header.flags = kVnetNeedsCsum;
    header.csum_start = frame.checksum_start;
    header.csum_offset = frame.checksum_offset;
    // The tap copies hdr_len bytes into the packet's linear part and the
    // rest into pages; the kernel takes the offload only when the checksum
    // field is in the linear part (with hdr_len 0 a large frame is refused).
    header.hdr_len = static_cast<std::uint16_t>(frame.checksum_start + frame.checksum_offset + 2);
  }
  if (gso) {
    header.gso_type = frame.gso_tcp_ipv6 ? kVnetGsoTcpv6 : kVnetGsoTcpv4;
    header.gso_size = frame.gso_size;
    header.hdr_len = frame.gso_header_size;
  }
  std::memcpy(vnet_header, &header, sizeof header);
  return true;
}

base::Result<void, int> TapLink::count_send(long res, std::size_t size) {
  // A tap takes a frame whole or not at all.
  if (res >= 0) {
    ++counters_.frames_out;
    counters_.bytes_out += size;
    return {};
  }
  ++counters_.dropped_send;
  if (res == -EAGAIN) return Err{EAGAIN};
  if (res == -EINVAL) return Err{EMSGSIZE};  // the kernel refused this frame; the link is fine
  return Err{static_cast<int>(-res)};
}

// One writev: the vnet header (when the tap has one), then the pieces as
// they are. The checksum offload fields were set by the stack only because
// tx_checksum_offload() said yes; the kernel checks that they lie inside the
// frame (and refuses the frame with EINVAL otherwise).
base::Result<void, int> TapLink::send_frame(const OutFrame& frame) {
  VnetHeader header{};
  if (!prepare_send(frame, reinterpret_cast<std::uint8_t*>(&header))) return Err{EMSGSIZE};
  const std::size_t size = frame.size();
  std::array<iovec, kMaxSendPieces + 1> iov{};
  std::size_t count = 0;
  if (vnet_) iov[count++] = {&header, sizeof header};
  if (frame.pieces.size() <= kMaxSendPieces) {
    for (const auto& p : frame.pieces) iov[count++] = {const_cast<std::uint8_t*>(p.data()), p.size()};
  } else {
    gather_.clear();
    for (const auto& p : frame.pieces) gather_.insert(gather_.end(), p.begin(), p.end());
    iov[count++] = {gather_.data(), gather_.size()};
  }
  for (;;) {
    const ssize_t n = ::writev(fd_.get(), iov.data(), static_cast<int>(count));
    if (n < 0 && errno == EINTR) continue;
    return count_send(n < 0 ? -errno : n, size);
  }
}

std::optional<std::size_t> TapLink::ring_send_header(const OutFrame& frame,
                                                     std::span<std::uint8_t, kRingSendHeaderMax> header) {
  static_assert(sizeof(VnetHeader) <= kRingSendHeaderMax);
  if (!prepare_send(frame, header.data())) return std::nullopt;
  return vnet_ ? sizeof(VnetHeader) : 0;
}

base::Result<void, int> TapLink::finish_ring_send(int res, std::size_t frame_size) {
  return count_send(res, frame_size);
}

}  // namespace abox::netstack
