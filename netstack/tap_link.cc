// TapLink (see tap_link.h for how it works). Three parts: entering the
// guest's namespace and coming back, configuring the tap over rtnetlink
// (libnl-route; its types stay inside this file), and the frame path.
#include "netstack/tap_link.h"

#include <fcntl.h>
#include <linux/if_addr.h>
#include <linux/if_tun.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/errno.h>
#include <netlink/handlers.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/nexthop.h>
#include <netlink/route/route.h>
#include <netlink/socket.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace abox::netstack {
namespace {

using base::Err;
using VoidOrError = base::Result<void, std::string>;

// The tap's flags: every frame either way starts with a virtio_net_hdr
// (TUNSETVNETHDRSZ right after TUNSETIFF), which has its own iovec in
// receive() and send_frame(). TUN_F_CSUM (TUNSETOFFLOAD) lets the guest's
// kernel hand us TCP/UDP with the checksum left partial (NEEDS_CSUM), and
// lets us do the same the other way (LWIP.md: checksums were half of lwIP's
// CPU time at MTU 65520). TUN_F_TSO4 lets it hand us one large TCP/IPv4
// segment where it would send many MTU-sized ones (a guest with MTU 1500
// then moves 64 KiB per frame, as one with MTU 65520 does). The kernel's TCP
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
constexpr unsigned kTapOffloads = TUN_F_CSUM | TUN_F_TSO4;
constexpr std::uint8_t kVnetGsoTcpv4 = 1;   // VIRTIO_NET_HDR_GSO_TCPV4
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
// rtnetlink through libnl-route.

template <class T, void (*Free)(T*)>
struct FreeWith {
  void operator()(T* p) const { Free(p); }
};
using NlSocketPtr = std::unique_ptr<nl_sock, FreeWith<nl_sock, nl_socket_free>>;
using NlAddrPtr = std::unique_ptr<nl_addr, FreeWith<nl_addr, nl_addr_put>>;
using RtnlLinkPtr = std::unique_ptr<rtnl_link, FreeWith<rtnl_link, rtnl_link_put>>;
using RtnlAddrPtr = std::unique_ptr<rtnl_addr, FreeWith<rtnl_addr, rtnl_addr_put>>;
using RtnlRoutePtr = std::unique_ptr<rtnl_route, FreeWith<rtnl_route, rtnl_route_put>>;
using RtnlNexthopPtr = std::unique_ptr<rtnl_nexthop, FreeWith<rtnl_nexthop, rtnl_route_nh_free>>;

// An rtnetlink socket. It belongs to the namespace it was opened in, so it
// is opened inside the guest's and then used from our own. libnl turns the
// kernel's errno into codes of its own; an error callback keeps the errno so
// that messages say "File exists" rather than "Object exists".
class RouteSocket {
 public:
  RouteSocket() = default;
  ~RouteSocket() = default;
  RouteSocket(const RouteSocket&) = delete;
  RouteSocket& operator=(const RouteSocket&) = delete;
  RouteSocket(RouteSocket&&) = delete;  // the error callback points at last_errno_
  RouteSocket& operator=(RouteSocket&&) = delete;

  VoidOrError connect(const std::string& where) {
    sock_.reset(nl_socket_alloc());
    if (!sock_) return Err{"cannot open an rtnetlink socket in " + where + ": " + errno_text(ENOMEM)};
    nl_socket_modify_err_cb(sock_.get(), NL_CB_CUSTOM, &RouteSocket::keep_errno, &last_errno_);
    if (const int err = nl_connect(sock_.get(), NETLINK_ROUTE); err < 0) {
      return Err{"cannot open an rtnetlink socket in " + where + ": " + nl_geterror(err)};
    }
    return {};
  }

  // Runs one request (a call returning a libnl code); on failure the error
  // is `what` and the errno text.
  template <class Request>
  VoidOrError run(const std::string& what, Request&& request) {
    last_errno_ = 0;
    const int err = std::forward<Request>(request)(sock_.get());
    if (err >= 0) return {};
    return Err{what + ": " + describe(err)};
  }

  // The link named `name`, or null when there is none (ENODEV).
  base::Result<RtnlLinkPtr, std::string> find_link(const std::string& name, const std::string& where) {
    last_errno_ = 0;
    rtnl_link* found = nullptr;
    const int err = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), &found);
    if (err >= 0) return RtnlLinkPtr(found);
    // rtnl_link_get_kernel() reads the answer with an error callback of its
    // own, so ENODEV shows only as libnl's code.
    if (err == -NLE_NODEV || err == -NLE_OBJ_NOTFOUND || last_errno_ == ENODEV) return RtnlLinkPtr();
    return Err{"cannot look up interface " + name + " in " + where + ": " + describe(err)};
  }

 private:
  // The kernel's errno when the error callback saw one, else libnl's text.
  std::string describe(int nl_err) const {
    if (last_errno_ != 0) return errno_text(last_errno_);
    return nl_geterror(nl_err);
  }

  static int keep_errno(sockaddr_nl* /*from*/, nlmsgerr* e, void* arg) {
    *static_cast<int*>(arg) = -e->error;
    return NL_STOP;  // libnl then returns its own code for the same error
  }

  NlSocketPtr sock_;
  int last_errno_ = 0;
};

// An nl_addr of `a` with `prefix`.
NlAddrPtr make_nl_addr(const policy::IpAddress& a, unsigned prefix) {
  NlAddrPtr out(nl_addr_build(a.is_v4() ? AF_INET : AF_INET6, a.bytes().data(), a.byte_length()));
  if (out) nl_addr_set_prefixlen(out.get(), static_cast<int>(prefix));
  return out;
}

VoidOrError change_link(RouteSocket& rs, rtnl_link* link, const RtnlLinkPtr& change,
                        const std::string& what) {
  return rs.run(what, [&](nl_sock* s) { return rtnl_link_change(s, link, change.get(), 0); });
}

VoidOrError bring_up(RouteSocket& rs, rtnl_link* link, const std::string& what) {
  RtnlLinkPtr change(rtnl_link_alloc());
  if (!change) return Err{what + ": " + errno_text(ENOMEM)};
  rtnl_link_set_flags(change.get(), IFF_UP);
  return change_link(rs, link, change, what);
}

// MTU, MAC, lo and the tap up, address, default route: in this order,
// because the kernel accepts a route via the gateway only once the
// address's subnet route exists, which needs the tap up.
VoidOrError configure(RouteSocket& rs, const std::string& ifname, const GuestNetConfig& c,
                      const std::string& where) {
  const std::string on = " on " + ifname + " in " + where;
  auto tap = rs.find_link(ifname, where);
  if (!tap) return Err{std::move(tap).error()};
  if (!*tap) return Err{"interface " + ifname + " vanished from " + where + " right after it was created"};
  const int ifindex = rtnl_link_get_ifindex(tap->get());

  {
    RtnlLinkPtr change(rtnl_link_alloc());
    if (!change) return Err{"cannot set MTU" + on + ": " + errno_text(ENOMEM)};
    rtnl_link_set_mtu(change.get(), static_cast<unsigned>(c.mtu));
    if (auto r = change_link(rs, tap->get(), change, "cannot set MTU " + std::to_string(c.mtu) + on); !r)
      return r;
  }
  if (c.guest_mac) {
    RtnlLinkPtr change(rtnl_link_alloc());
    NlAddrPtr mac(nl_addr_build(AF_LLC, c.guest_mac->data(), c.guest_mac->size()));
    if (!change || !mac) return Err{"cannot set the MAC address" + on + ": " + errno_text(ENOMEM)};
    rtnl_link_set_addr(change.get(), mac.get());
    if (auto r = change_link(rs, tap->get(), change, "cannot set the MAC address" + on); !r) return r;
  }

  auto lo = rs.find_link("lo", where);
  if (!lo) return Err{std::move(lo).error()};
  if (*lo) {
    if (auto r = bring_up(rs, lo->get(), "cannot bring up lo in " + where); !r) return r;
  }
  if (auto r = bring_up(rs, tap->get(), "cannot bring up " + ifname + " in " + where); !r) return r;

  const int family = c.guest_address.is_v4() ? AF_INET : AF_INET6;
  {
    const std::string what = "cannot add address " + c.guest_address.to_string() + "/" +
                             std::to_string(c.prefix_len) + " to " + ifname + " in " + where;
    RtnlAddrPtr addr(rtnl_addr_alloc());
    NlAddrPtr local = make_nl_addr(c.guest_address, c.prefix_len);
    if (!addr || !local) return Err{what + ": " + errno_text(ENOMEM)};
    rtnl_addr_set_ifindex(addr.get(), ifindex);
    rtnl_addr_set_family(addr.get(), family);
    if (const int err = rtnl_addr_set_local(addr.get(), local.get()); err < 0) {
      return Err{what + ": " + nl_geterror(err)};
    }
    rtnl_addr_set_prefixlen(addr.get(), static_cast<int>(c.prefix_len));
    if (c.guest_address.is_v4() && c.prefix_len < 31) {
      // The subnet's broadcast address, as `ip addr add ... brd +` and DHCP
      // clients set it.
      const std::uint32_t host_bits = 0xFFFF'FFFFU >> c.prefix_len;
      const auto brd_addr = policy::IpAddress::v4(c.guest_address.v4_value() | host_bits);
      NlAddrPtr brd = make_nl_addr(brd_addr, 32);
      if (!brd) return Err{what + ": " + errno_text(ENOMEM)};
      if (const int err = rtnl_addr_set_broadcast(addr.get(), brd.get()); err < 0) {
        return Err{what + ": " + nl_geterror(err)};
      }
    }
    if (c.guest_address.is_v6()) rtnl_addr_set_flags(addr.get(), IFA_F_NODAD);  // usable at once
    if (auto r = rs.run(what, [&](nl_sock* s) { return rtnl_addr_add(s, addr.get(), NLM_F_EXCL); }); !r)
      return r;
  }

  {
    const std::string what = "cannot add default route via " + c.gateway.to_string() + " in " + where;
    RtnlRoutePtr route(rtnl_route_alloc());
    RtnlNexthopPtr hop(rtnl_route_nh_alloc());
    NlAddrPtr any = make_nl_addr(
        c.guest_address.is_v4() ? policy::IpAddress() : policy::IpAddress::v6(std::array<std::uint8_t, 16>{}),
        0);
    NlAddrPtr gateway = make_nl_addr(c.gateway, c.guest_address.is_v4() ? 32 : 128);
    if (!route || !hop || !any || !gateway) return Err{what + ": " + errno_text(ENOMEM)};
    rtnl_route_set_family(route.get(), static_cast<std::uint8_t>(family));
    rtnl_route_set_table(route.get(), RT_TABLE_MAIN);
    rtnl_route_set_protocol(route.get(), RTPROT_STATIC);
    rtnl_route_set_scope(route.get(), RT_SCOPE_UNIVERSE);
    rtnl_route_set_type(route.get(), RTN_UNICAST);
    if (const int err = rtnl_route_set_dst(route.get(), any.get()); err < 0) {
      return Err{what + ": " + nl_geterror(err)};
    }
    rtnl_route_nh_set_ifindex(hop.get(), ifindex);
    rtnl_route_nh_set_gateway(hop.get(), gateway.get());
    rtnl_route_add_nexthop(route.get(), hop.release());  // the route owns it now
    if (auto r = rs.run(what, [&](nl_sock* s) { return rtnl_route_add(s, route.get(), NLM_F_EXCL); }); !r) {
      return r;
    }
  }
  return {};
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

  RouteSocket rs;
  base::UniqueFd tap;
  std::string ifname;
  {
    NetnsSwitch inside;
    if (auto r = inside.enter(ns.get(), path); !r) return Err{r.error()};
    if (auto r = rs.connect(path); !r) return Err{r.error()};
    auto existing = rs.find_link(config.ifname, path);
    if (!existing) return Err{std::move(existing).error()};
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

  if (auto r = configure(rs, ifname, config, path); !r) return Err{r.error()};

  std::unique_ptr<TapLink> link(new TapLink(std::move(tap), config.mtu, std::move(ifname)));
  link->vnet_ = true;
  link->netns_path_ = path;
  link->netns_dev_ = ns_stat.st_dev;
  link->netns_ino_ = ns_stat.st_ino;
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
  struct stat st {};
  if (::stat(netns_path_.c_str(), &st) != 0) {
    // EACCES: the path is there (another user's /proc/PID), just not ours to
    // look into; anything else (ENOENT, ESRCH) means it is gone.
    return errno == EACCES;
  }
  return st.st_dev == netns_dev_ && st.st_ino == netns_ino_;
}

// ---------------------------------------------------------------------------
// The frame path.

// Checks only lengths: the frame's bytes are the netstack's to parse.
// With a vnet header the kernel's header comes first, in its own iovec; only
// its flags and gso_type are read. A TSO frame (TCPV4) may be larger than
// the MTU allows, up to max_receive_size(); any other GSO type was never
// offered and is dropped as oversize, as is a plain frame over the MTU.
base::Result<std::size_t, int> TapLink::receive(std::span<std::uint8_t> buf) {
  const std::size_t room = std::min(buf.size(), max_receive_size());
  std::uint8_t spill = 0;  // a read that reaches this byte was too long
  VnetHeader header{};
  std::array<iovec, 3> iov = {{{&header, sizeof header}, {buf.data(), room}, {&spill, 1}}};
  iovec* first = vnet_ ? &iov[0] : &iov[1];
  const int count = vnet_ ? 3 : 2;
  last_checksum_trusted_ = false;
  for (;;) {
    const ssize_t n = ::readv(fd_.get(), first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return std::size_t{0};
      return Err{errno};  // EBADFD: the tap device is gone
    }
    if (std::size_t len =
            accept_read(static_cast<std::size_t>(n), room, reinterpret_cast<std::uint8_t*>(&header));
        len != 0)
      return len;
  }
}

std::span<const iovec> TapLink::ring_receive_iovecs(std::span<std::uint8_t> buf) {
  ring_room_ = std::min(buf.size(), max_receive_size());
  ring_iov_ = {{{ring_vnet_.data(), ring_vnet_.size()}, {buf.data(), ring_room_}, {&ring_spill_, 1}}};
  return vnet_ ? std::span<const iovec>(ring_iov_) : std::span<const iovec>(ring_iov_).subspan(1);
}

base::Result<std::size_t, int> TapLink::finish_ring_receive(int res) {
  last_checksum_trusted_ = false;
  if (res < 0) {
    if (res == -EAGAIN || res == -EINTR) return std::size_t{0};  // nothing read: read again
    return Err{-res};
  }
  return accept_read(static_cast<std::size_t>(res), ring_room_, ring_vnet_.data());
}

std::size_t TapLink::accept_read(std::size_t n, std::size_t room, const std::uint8_t* vnet_header) {
  const std::size_t header_size = vnet_ ? sizeof(VnetHeader) : 0;
  if (n < header_size + kEthernetHeader) {
    ++dropped_runt_;
    return 0;
  }
  VnetHeader header{};
  if (vnet_) std::memcpy(&header, vnet_header, sizeof header);
  const std::size_t len = n - header_size;
  const std::uint8_t gso = vnet_ ? static_cast<std::uint8_t>(header.gso_type & ~kVnetGsoEcn) : kVnetGsoNone;
  const std::size_t limit = gso == kVnetGsoTcpv4 ? room : std::min(room, max_frame_size());
  if (len > limit || (gso != kVnetGsoNone && gso != kVnetGsoTcpv4)) {
    ++counters_.dropped_oversize;
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
    header.gso_type = kVnetGsoTcpv4;
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
  if (res == -EINVAL) return {};  // the kernel refused this frame; the link is fine
  return Err{static_cast<int>(-res)};
}

// One writev: the vnet header (when the tap has one), then the pieces as
// they are. The checksum offload fields were set by the stack only because
// tx_checksum_offload() said yes; the kernel checks that they lie inside the
// frame (and refuses the frame with EINVAL otherwise).
base::Result<void, int> TapLink::send_frame(const OutFrame& frame) {
  VnetHeader header{};
  if (!prepare_send(frame, reinterpret_cast<std::uint8_t*>(&header))) return {};
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
