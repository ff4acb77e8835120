// RouteSocket (see rtnetlink.h). The message layouts are the kernel's
// (netlink(7), rtnetlink(7)): nlmsghdr, a family header, then rtattr
// (length, type, value) records, every one padded to 4 bytes.
#include "netstack/link/rtnetlink.h"

#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#include "base/byte_reader.h"

namespace abox::netstack::rtnl {
namespace {

constexpr std::size_t align4(std::size_t n) {
  return (n + 3) & ~std::size_t{3};
}

// Reads a T (host byte order, as netlink is) out of `r`, or nullopt when
// fewer than sizeof(T) bytes remain.
template <class T>
std::optional<T> read_struct(base::ByteReader& r) {
  auto bytes = r.bytes(sizeof(T));
  if (!bytes) return std::nullopt;
  T out;
  std::memcpy(&out, bytes->data(), sizeof(T));
  return out;
}

// A link reply is a few KiB (its statistics and attributes); far more room
// than that, so a reply never arrives truncated.
constexpr std::size_t kReceiveBytes = 32 * 1024;
// Datagrams read for one request before giving up: the kernel answers each
// request with one or two, so more means the socket is not what we think.
constexpr int kMaxDatagramsPerRequest = 64;
// The largest errno the kernel has (MAX_ERRNO in <linux/err.h>).
constexpr int kMaxErrno = 4095;

}  // namespace

// -- Request ------------------------------------------------------------------

Request::Request(std::uint16_t type, std::uint16_t flags) {
  nlmsghdr h{};
  h.nlmsg_type = type;
  h.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
  header(h);
}

void Request::append(std::span<const std::byte> bytes) {
  for (std::byte b : bytes) bytes_.push_back(static_cast<std::uint8_t>(b));
  bytes_.resize(align4(bytes_.size()), 0);
}

void Request::attr(std::uint16_t type, std::span<const std::byte> value) {
  rtattr a{};
  a.rta_len = static_cast<unsigned short>(RTA_LENGTH(value.size()));
  a.rta_type = type;
  append(std::as_bytes(std::span(&a, 1)));  // 4 bytes: the value follows directly
  append(value);
}

void Request::attr_u32(std::uint16_t type, std::uint32_t value) {
  attr(type, std::as_bytes(std::span(&value, 1)));
}

void Request::attr_string(std::uint16_t type, std::string_view value) {
  std::vector<std::byte> with_nul(value.size() + 1, std::byte{0});
  std::memcpy(with_nul.data(), value.data(), value.size());
  attr(type, with_nul);
}

void Request::attr_address(std::uint16_t type, const policy::IpAddress& a) {
  attr(type, std::as_bytes(std::span(a.bytes().data(), a.byte_length())));
}

std::span<const std::uint8_t> Request::finish(std::uint32_t seq) {
  nlmsghdr h{};
  std::memcpy(&h, bytes_.data(), sizeof h);
  h.nlmsg_len = static_cast<std::uint32_t>(bytes_.size());
  h.nlmsg_seq = seq;
  std::memcpy(bytes_.data(), &h, sizeof h);
  return bytes_;
}

// -- read_answer --------------------------------------------------------------

Answer read_answer(std::span<const std::uint8_t> datagram, std::uint32_t seq) {
  base::ByteReader r(datagram);
  Answer malformed;
  malformed.kind = Answer::Kind::kMalformed;
  while (!r.empty()) {
    const auto h = read_struct<nlmsghdr>(r);
    if (!h) return malformed;
    if (h->nlmsg_len < sizeof(nlmsghdr)) return malformed;
    const auto payload_bytes = r.bytes(h->nlmsg_len - sizeof(nlmsghdr));
    if (!payload_bytes) return malformed;
    // The padding after the last message may be missing.
    if (!r.skip(std::min(align4(h->nlmsg_len) - h->nlmsg_len, r.remaining()))) return malformed;
    if (h->nlmsg_seq != seq) continue;  // an answer to an earlier request

    base::ByteReader payload(*payload_bytes);
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto code = read_struct<int>(payload);  // nlmsgerr.error; the echoed request follows
      if (!code) return malformed;
      Answer a;
      if (*code == 0) {
        a.kind = Answer::Kind::kAck;
      } else {
        a.kind = Answer::Kind::kError;
        // The kernel sends -errno, and errno values stop at 4095 (MAX_ERRNO);
        // anything else is not an errno (and -INT_MIN would overflow).
        a.error = *code < 0 && *code >= -kMaxErrno ? -*code : EPROTO;
      }
      return a;
    }
    if (h->nlmsg_type == RTM_NEWLINK) {
      const auto info = read_struct<ifinfomsg>(payload);
      if (!info) return malformed;
      Answer a;
      a.kind = Answer::Kind::kLink;
      a.ifindex = info->ifi_index;
      return a;
    }
    // NLMSG_NOOP, NLMSG_DONE, anything else: not an answer.
  }
  return Answer{};
}

// -- read_address_messages ----------------------------------------------------

namespace {

// The address an RTM_NEWADDR/RTM_DELADDR names (see the header), nullopt
// when it names none we read; `bad` set when its attributes do not add up.
std::optional<policy::IpAddress> address_of(base::ByteReader& payload, bool& bad) {
  const auto msg = read_struct<ifaddrmsg>(payload);
  if (!msg) {
    bad = true;
    return std::nullopt;
  }
  std::size_t size = 0;
  if (msg->ifa_family == AF_INET) {
    size = 4;
  } else if (msg->ifa_family == AF_INET6) {
    size = 16;
  } else {
    return std::nullopt;
  }
  // The attributes start at NLMSG_ALIGN(sizeof(ifaddrmsg)) = 8: no padding.
  std::optional<policy::IpAddress> local;
  std::optional<policy::IpAddress> address;
  while (!payload.empty()) {
    const auto a = read_struct<rtattr>(payload);
    if (!a || a->rta_len < sizeof(rtattr)) {
      bad = true;
      return std::nullopt;
    }
    const auto value = payload.bytes(a->rta_len - sizeof(rtattr));
    if (!value) {
      bad = true;
      return std::nullopt;
    }
    if (!payload.skip(std::min(align4(a->rta_len) - a->rta_len, payload.remaining()))) {
      bad = true;
      return std::nullopt;
    }
    if (a->rta_type != IFA_LOCAL && a->rta_type != IFA_ADDRESS) continue;
    if (value->size() != size) {
      bad = true;
      return std::nullopt;
    }
    std::array<std::uint8_t, 16> b{};
    std::copy(value->begin(), value->end(), b.begin());
    const policy::IpAddress ip = size == 4 ? policy::IpAddress::v4_bytes(b.data()) : policy::IpAddress::v6(b);
    (a->rta_type == IFA_LOCAL ? local : address) = ip;
  }
  return local ? local : address;
}

}  // namespace

AddressMessages read_address_messages(std::span<const std::uint8_t> datagram, std::uint32_t dump_seq) {
  base::ByteReader r(datagram);
  AddressMessages out;
  auto malformed = [] {
    AddressMessages m;
    m.end = AddressMessages::End::kMalformed;
    return m;
  };
  while (!r.empty()) {
    const auto h = read_struct<nlmsghdr>(r);
    if (!h) return malformed();
    if (h->nlmsg_len < sizeof(nlmsghdr)) return malformed();
    const auto payload_bytes = r.bytes(h->nlmsg_len - sizeof(nlmsghdr));
    if (!payload_bytes) return malformed();
    if (!r.skip(std::min(align4(h->nlmsg_len) - h->nlmsg_len, r.remaining()))) return malformed();
    base::ByteReader payload(*payload_bytes);
    if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR) {
      bool bad = false;
      const auto ip = address_of(payload, bad);
      if (bad) return malformed();
      if (ip) out.changes.push_back(AddressChange{h->nlmsg_type == RTM_NEWADDR, *ip});
      continue;
    }
    if (h->nlmsg_type == RTM_NEWROUTE || h->nlmsg_type == RTM_DELROUTE) {
      out.routes_changed = true;
      continue;
    }
    if (h->nlmsg_seq != dump_seq) continue;
    if (h->nlmsg_type == NLMSG_DONE) {
      out.end = AddressMessages::End::kDone;
      return out;
    }
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto code = read_struct<int>(payload);
      if (!code) return malformed();
      if (*code == 0) continue;  // an ack: not the end of a dump
      out.end = AddressMessages::End::kError;
      out.error = *code < 0 && *code >= -kMaxErrno ? -*code : EPROTO;
      return out;
    }
  }
  return out;
}

// -- RouteSocket --------------------------------------------------------------

base::Result<RouteSocket, int> RouteSocket::open() {
  base::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return base::Err{errno};
  // Extended errors would append attributes to every NLMSG_ERROR; we read
  // only the code, so turn them off where the kernel has them.
  const int off = 0;
  ::setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &off, sizeof off);
  return RouteSocket(std::move(fd));
}

base::Result<Answer, int> RouteSocket::exchange(Request& request) {
  const std::uint32_t seq = ++seq_;
  const auto message = request.finish(seq);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  const ssize_t sent = ::sendto(fd_.get(), message.data(), message.size(), 0,
                                reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
  if (sent < 0) return base::Err{errno};
  if (static_cast<std::size_t>(sent) != message.size()) return base::Err{EMSGSIZE};

  auto buffer = std::make_unique_for_overwrite<std::uint8_t[]>(kReceiveBytes);
  for (int i = 0; i < kMaxDatagramsPerRequest; ++i) {
    sockaddr_nl from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = ::recvfrom(fd_.get(), buffer.get(), kReceiveBytes, MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::Err{errno};
    }
    if (static_cast<std::size_t>(n) > kReceiveBytes) return base::Err{EMSGSIZE};  // MSG_TRUNC: the real size
    if (from_len < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0)
      continue;  // not the kernel
    const Answer a = read_answer(std::span(buffer.get(), static_cast<std::size_t>(n)), seq);
    if (a.kind == Answer::Kind::kMalformed) return base::Err{EPROTO};
    if (a.kind != Answer::Kind::kNothing) return a;
  }
  return base::Err{EPROTO};
}

base::Result<std::optional<int>, int> RouteSocket::link_index(std::string_view name) {
  Request req(RTM_GETLINK, 0);  // answered with the link or an error, no ack
  ifinfomsg info{};
  info.ifi_family = AF_UNSPEC;
  req.header(info);
  req.attr_string(IFLA_IFNAME, name);
  auto a = exchange(req);
  if (!a) return base::Err{a.error()};
  switch (a->kind) {
    case Answer::Kind::kLink:
      return std::optional<int>(a->ifindex);
    case Answer::Kind::kError:
      if (a->error == ENODEV) return std::optional<int>();
      return base::Err{a->error};
    default:
      return base::Err{EPROTO};  // an ack without the link
  }
}

namespace {

base::Result<void, int> acked(const base::Result<Answer, int>& a) {
  if (!a) return base::Err{a.error()};
  if (a->kind == Answer::Kind::kAck) return {};
  if (a->kind == Answer::Kind::kError) return base::Err{a->error};
  return base::Err{EPROTO};
}

}  // namespace

base::Result<void, int> RouteSocket::set_link(int ifindex, std::optional<std::uint32_t> mtu,
                                              std::optional<std::array<std::uint8_t, 6>> mac, bool up) {
  Request req(RTM_NEWLINK, NLM_F_ACK);  // no NLM_F_CREATE: changes the link with this index
  ifinfomsg info{};
  info.ifi_family = AF_UNSPEC;
  info.ifi_index = ifindex;
  if (up) {
    info.ifi_flags = IFF_UP;
    info.ifi_change = IFF_UP;
  }
  req.header(info);
  if (mtu) req.attr_u32(IFLA_MTU, *mtu);
  if (mac) req.attr(IFLA_ADDRESS, std::as_bytes(std::span(*mac)));
  return acked(exchange(req));
}

base::Result<void, int> RouteSocket::add_address(int ifindex, const policy::IpAddress& address,
                                                 unsigned prefix,
                                                 std::optional<policy::IpAddress> broadcast) {
  Request req(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  ifaddrmsg msg{};
  msg.ifa_family = address.is_v4() ? AF_INET : AF_INET6;
  msg.ifa_prefixlen = static_cast<std::uint8_t>(prefix);
  msg.ifa_flags = address.is_v6() ? IFA_F_NODAD : 0;  // usable at once
  msg.ifa_scope = RT_SCOPE_UNIVERSE;
  msg.ifa_index = static_cast<std::uint32_t>(ifindex);
  req.header(msg);
  req.attr_address(IFA_LOCAL, address);
  req.attr_address(IFA_ADDRESS, address);
  if (broadcast) req.attr_address(IFA_BROADCAST, *broadcast);
  return acked(exchange(req));
}

base::Result<void, int> RouteSocket::add_default_route(int ifindex, const policy::IpAddress& gateway) {
  Request req(RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  rtmsg msg{};
  msg.rtm_family = gateway.is_v4() ? AF_INET : AF_INET6;
  msg.rtm_dst_len = 0;  // default: no RTA_DST
  msg.rtm_table = RT_TABLE_MAIN;
  msg.rtm_protocol = RTPROT_STATIC;
  msg.rtm_scope = RT_SCOPE_UNIVERSE;
  msg.rtm_type = RTN_UNICAST;
  req.header(msg);
  req.attr_address(RTA_GATEWAY, gateway);
  req.attr_u32(RTA_OIF, static_cast<std::uint32_t>(ifindex));
  return acked(exchange(req));
}

}  // namespace abox::netstack::rtnl
